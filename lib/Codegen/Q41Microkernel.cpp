//===- Q41Microkernel.cpp - vector x Q4_1 matrix products on the CPU ------===//
//
// One row of snapkv-quantize-weights' Q4_1 product (Q41Contraction.h), as
// the Q8_0 one of Vectorize.cpp with two values per byte: per block of 32
// rows, its 16 rows of bytes are read in address order, each vector of bytes
// split into its low and high nibbles (`and 15`, `shr 4`), both widened to
// f32 (`uitofp`, exact) and multiply-added by the block's activations j and
// 16 + j into a row of block sums (in the L1 cache); then, once per block,
// `out = sums * d + (m * sum x + out)`: llama.cpp's factoring of `sum (q *
// d + m) * x`, two FMAs per column instead of two per weight.
//
//===----------------------------------------------------------------------===//

#include "VectorLoops.h"

#include "snapkv/Codegen/Q41Contraction.h"

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::snapkv;

namespace {

/// Columns per chunk of the block sums, as the Q8_0 kernel's (8 KB of f32).
constexpr int64_t kChunk = 2048;

/// The vector width and the chunk of columns of a product of `columns`
/// columns, or nullopt if no vector width divides them.
std::optional<std::pair<int64_t, int64_t>> widthAndChunk(int64_t columns,
                                                         int64_t lanes) {
  int64_t width = 0;
  for (int64_t w : {4 * lanes, 2 * lanes, lanes})
    if (!width && columns % w == 0)
      width = w;
  if (!width)
    return std::nullopt;
  int64_t chunk = columns;
  if (chunk > kChunk)
    for (chunk = kChunk - kChunk % width; columns % chunk != 0;)
      chunk -= width;
  return std::make_pair(width, chunk);
}

/// The float-activation kernel (see vectorizeQ41VectorTimesMatrix).
void vectorizeFloat(RewriterBase &rewriter, linalg::LinalgOp op,
                    ArrayRef<int64_t> ranges, int64_t width, int64_t chunk) {
  int64_t columns = ranges[4];
  Location loc = op.getLoc();
  Value x = op.getDpsInputs()[0], bytes = op.getDpsInputs()[1],
        scales = op.getDpsInputs()[2], mins = op.getDpsInputs()[3],
        init = op.getDpsInits()[0];
  Type f32 = rewriter.getF32Type();
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  };
  Value c0 = index(0), c1 = index(1);
  auto floatType = VectorType::get({width}, f32);
  auto byteType = VectorType::get({width}, rewriter.getI8Type());
  Value zeros = arith::ConstantOp::create(
      rewriter, loc, floatType, DenseElementsAttr::get(floatType, 0.0f));
  Value fifteen = arith::ConstantOp::create(
      rewriter, loc, byteType, DenseElementsAttr::get(byteType, int8_t(15)));
  Value four = arith::ConstantOp::create(
      rewriter, loc, byteType, DenseElementsAttr::get(byteType, int8_t(4)));
  auto loop = [&](OpBuilder &b, Location loc, int64_t count, int64_t step,
                  Value carried, CarriedBody body) {
    return forCarrying(b, loc, c0, count, step, carried, body).getResult(0);
  };
  auto read = readVector;
  auto write = writeVector;
  // Activation (half, j) of block `block`, in f32.
  auto activation = [&](OpBuilder &b, Location loc, Value block, int64_t half,
                        Value j) -> Value {
    Value a = tensor::ExtractOp::create(b, loc, x, {c0, block, index(half), j});
    return a.getType().isF32() ? a : arith::ExtFOp::create(b, loc, f32, a);
  };

  Value result = forChunksOfBlocks(
      rewriter, loc, columns, chunk, ranges[1], init, zeros,
      [&](OpBuilder &b, Location loc, Value first, Value block, Value out,
          Value sums) -> std::pair<Value, Value> {
        // Byte row j: values j (low nibbles) and 16 + j (high), and
        // the block's sum of activations, in order.
        Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0));
        auto rows = scf::ForOp::create(
            b, loc, c0, index(kQ41Pairs), c1, ValueRange{sums, zero},
            [&](OpBuilder &b, Location loc, Value j, ValueRange carried) {
              Value low = activation(b, loc, block, 0, j);
              Value high = activation(b, loc, block, 1, j);
              Value total = arith::AddFOp::create(
                  b, loc, arith::AddFOp::create(b, loc, carried[1], low), high);
              Value lowSplat =
                  vector::BroadcastOp::create(b, loc, floatType, low);
              Value highSplat =
                  vector::BroadcastOp::create(b, loc, floatType, high);
              Value next =
                  loop(b, loc, chunk, width, carried[0],
                       [&](OpBuilder &b, Location loc, Value col, Value sums) {
                         Value at = arith::AddIOp::create(b, loc, first, col);
                         Value packed =
                             read(b, loc, byteType, bytes, {block, j, at});
                         Value q0 = arith::UIToFPOp::create(
                             b, loc, floatType,
                             arith::AndIOp::create(b, loc, packed, fifteen));
                         Value q1 = arith::UIToFPOp::create(
                             b, loc, floatType,
                             arith::ShRUIOp::create(b, loc, packed, four));
                         Value sum = vector::FMAOp::create(
                             b, loc, lowSplat, q0,
                             read(b, loc, floatType, sums, {col}));
                         sum =
                             vector::FMAOp::create(b, loc, highSplat, q1, sum);
                         return write(b, loc, sum, sums, {col});
                       });
              scf::YieldOp::create(b, loc, ValueRange{next, total});
            });
        Value total =
            vector::BroadcastOp::create(b, loc, floatType, rows.getResult(1));
        // out = sums * d + (m * sum x + out), once per block.
        Value updated = loop(
            b, loc, chunk, width, out,
            [&](OpBuilder &b, Location loc, Value col, Value out) {
              Value at = arith::AddIOp::create(b, loc, first, col);
              Value shifted = vector::FMAOp::create(
                  b, loc, read(b, loc, floatType, mins, {block, at}), total,
                  read(b, loc, floatType, out, {c0, at}));
              Value next = vector::FMAOp::create(
                  b, loc, read(b, loc, floatType, rows.getResult(0), {col}),
                  read(b, loc, floatType, scales, {block, at}), shifted);
              return write(b, loc, next, out, {c0, at});
            });
        return {updated, rows.getResult(0)};
      });
  rewriter.replaceOp(op, result);
}

/// `vpdpbusd acc, u8, s8`: per i32 lane of `acc`, the sum of the 4 products
/// of unsigned bytes `u8` by signed bytes `s8` added (AT&T order reversed;
/// inline assembly as Int8Microkernel.cpp's, for the same reason).
Value dpbusd(OpBuilder &b, Location loc, Value acc, Value u8, Value s8) {
  return LLVM::InlineAsmOp::create(
             b, loc, acc.getType(), ValueRange{acc, u8, s8},
             "vpdpbusd $3, $2, $0", "=v,0,v,v", /*has_side_effects=*/false,
             /*is_align_stack=*/false, LLVM::TailCallKind::None,
             LLVM::AsmDialectAttr(), ArrayAttr())
      .getRes();
}

/// The int8-activation kernel (see vectorizeQ41VectorTimesMatrix).
void vectorizeInt8(RewriterBase &rewriter, linalg::LinalgOp op,
                   ArrayRef<int64_t> ranges, int64_t width, int64_t chunk,
                   int64_t lanes, bool vnni) {
  int64_t columns = ranges[4];
  Location loc = op.getLoc();
  Value x = op.getDpsInputs()[0], bytes = op.getDpsInputs()[1],
        xScales = op.getDpsInputs()[2], scales = op.getDpsInputs()[3],
        mins = op.getDpsInputs()[4], init = op.getDpsInits()[0];
  Type i8 = rewriter.getI8Type(), i32 = rewriter.getI32Type(),
       f32 = rewriter.getF32Type();
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  };
  auto splat = [&](VectorType type, auto value) -> Value {
    return arith::ConstantOp::create(rewriter, loc, type,
                                     DenseElementsAttr::get(type, value));
  };
  Value c0 = index(0), c1 = index(1);
  auto intType = VectorType::get({width}, i32);
  auto floatType = VectorType::get({width}, f32);
  auto byteType = VectorType::get({width}, i8);
  auto laneType = VectorType::get({lanes}, i32);
  auto pieceType = VectorType::get({4 * lanes}, i8);
  Value zeros = splat(intType, int32_t(0));
  Value fifteen = splat(byteType, int8_t(15)),
        four = splat(byteType, int8_t(4));
  Value pieceFifteen = splat(pieceType, int8_t(15)),
        pieceFour = splat(pieceType, int8_t(4));
  auto loop = [&](OpBuilder &b, Location loc, int64_t count, int64_t step,
                  Value carried, CarriedBody body) {
    return forCarrying(b, loc, c0, count, step, carried, body).getResult(0);
  };
  auto read = readVector;
  auto write = writeVector;

  // VNNI: the sums of byte rows 4 g .. 4 g + 3 of block `block` (values j
  // in the low nibbles, 16 + j in the high ones) into `sums`.
  auto vnniGroup = [&](OpBuilder &b, Location loc, Value block, Value first,
                       Value group, Value sums) -> Value {
    Value row = arith::MulIOp::create(b, loc, group, index(4));
    // The activations of the 4 rows of half `half` as one i32, in every lane.
    auto activations = [&](int64_t half) -> Value {
      Value four = read(b, loc, VectorType::get({4}, i8), x,
                        {c0, block, index(half), row});
      Value word = vector::ExtractOp::create(
          b, loc,
          vector::BitCastOp::create(b, loc, VectorType::get({1}, i32), four),
          ArrayRef<int64_t>{0});
      return vector::BitCastOp::create(
          b, loc, pieceType,
          vector::BroadcastOp::create(b, loc, laneType, word));
    };
    Value low = activations(0), high = activations(1);
    return loop(
        b, loc, chunk, 4 * lanes, sums,
        [&](OpBuilder &b, Location loc, Value col, Value sums) -> Value {
          Value at = arith::AddIOp::create(b, loc, first, col);
          SmallVector<Value> rows;
          for (int64_t r = 0; r < 4; ++r)
            rows.push_back(read(
                b, loc, pieceType, bytes,
                {block, arith::AddIOp::create(b, loc, row, index(r)), at}));
          // Bytes of rows 0 and 1 (2 and 3) interleaved, then their pairs:
          // column c's 4 rows in lane c.
          SmallVector<int64_t> interleave;
          for (int64_t c = 0; c < 4 * lanes; ++c)
            interleave.append({c, 4 * lanes + c});
          Value pairs01 =
              vector::ShuffleOp::create(b, loc, rows[0], rows[1], interleave);
          Value pairs23 =
              vector::ShuffleOp::create(b, loc, rows[2], rows[3], interleave);
          for (int64_t j = 0; j < 4; ++j) {
            SmallVector<int64_t> mask;
            for (int64_t c = j * lanes; c < (j + 1) * lanes; ++c)
              mask.append(
                  {2 * c, 2 * c + 1, 8 * lanes + 2 * c, 8 * lanes + 2 * c + 1});
            Value piece =
                vector::ShuffleOp::create(b, loc, pairs01, pairs23, mask);
            Value to = arith::AddIOp::create(b, loc, col, index(j * lanes));
            Value acc = read(b, loc, laneType, sums, {to});
            acc =
                dpbusd(b, loc, acc,
                       arith::AndIOp::create(b, loc, piece, pieceFifteen), low);
            acc =
                dpbusd(b, loc, acc,
                       arith::ShRUIOp::create(b, loc, piece, pieceFour), high);
            sums = write(b, loc, acc, sums, {to});
          }
          return sums;
        });
  };
  // Without VNNI: the sums of byte row `j` of block `block`, widened to i32.
  auto plainRow = [&](OpBuilder &b, Location loc, Value block, Value first,
                      Value j, Value sums) -> Value {
    auto activation = [&](Value half) -> Value {
      Value a = arith::ExtSIOp::create(
          b, loc, i32,
          tensor::ExtractOp::create(b, loc, x, {c0, block, half, j}));
      return vector::BroadcastOp::create(b, loc, intType, a);
    };
    Value low = activation(c0), high = activation(c1);
    return loop(
        b, loc, chunk, width, sums,
        [&](OpBuilder &b, Location loc, Value col, Value sums) {
          Value at = arith::AddIOp::create(b, loc, first, col);
          Value packed = read(b, loc, byteType, bytes, {block, j, at});
          Value q0 = arith::ExtUIOp::create(
              b, loc, intType, arith::AndIOp::create(b, loc, packed, fifteen));
          Value q1 = arith::ExtUIOp::create(
              b, loc, intType, arith::ShRUIOp::create(b, loc, packed, four));
          Value sum =
              arith::AddIOp::create(b, loc, read(b, loc, intType, sums, {col}),
                                    arith::MulIOp::create(b, loc, low, q0));
          sum = arith::AddIOp::create(b, loc, sum,
                                      arith::MulIOp::create(b, loc, high, q1));
          return write(b, loc, sum, sums, {col});
        });
  };

  Value result = forChunksOfBlocks(
      rewriter, loc, columns, chunk, ranges[1], init, zeros,
      [&](OpBuilder &b, Location loc, Value first, Value block, Value out,
          Value sums) -> std::pair<Value, Value> {
        sums = vnni
                   ? loop(b, loc, kQ41Pairs / 4, 1, sums,
                          [&](OpBuilder &b, Location loc, Value group,
                              Value sums) {
                            return vnniGroup(b, loc, block, first, group, sums);
                          })
                   : loop(b, loc, kQ41Pairs, 1, sums,
                          [&](OpBuilder &b, Location loc, Value j, Value sums) {
                            return plainRow(b, loc, block, first, j, sums);
                          });
        // The block's sum of activations (exact in i32).
        auto halfType = VectorType::get({kQ41Pairs}, i8);
        auto wideHalf = VectorType::get({kQ41Pairs}, i32);
        Value both = arith::AddIOp::create(
            b, loc,
            arith::ExtSIOp::create(
                b, loc, wideHalf,
                read(b, loc, halfType, x, {c0, block, c0, c0})),
            arith::ExtSIOp::create(
                b, loc, wideHalf,
                read(b, loc, halfType, x, {c0, block, c1, c0})));
        Value total = vector::ReductionOp::create(
            b, loc, vector::CombiningKind::ADD, both);
        // out = sums * (scale_a * d) + ((scale_a * sum a) * m + out).
        Value scaleA = tensor::ExtractOp::create(b, loc, xScales, {c0, block});
        Value shift = vector::BroadcastOp::create(
            b, loc, floatType,
            arith::MulFOp::create(
                b, loc, arith::SIToFPOp::create(b, loc, f32, total), scaleA));
        Value scaleSplat =
            vector::BroadcastOp::create(b, loc, floatType, scaleA);
        Value updated = loop(
            b, loc, chunk, width, out,
            [&](OpBuilder &b, Location loc, Value col, Value out) {
              Value at = arith::AddIOp::create(b, loc, first, col);
              Value shifted = vector::FMAOp::create(
                  b, loc, read(b, loc, floatType, mins, {block, at}), shift,
                  read(b, loc, floatType, out, {c0, at}));
              Value scale = arith::MulFOp::create(
                  b, loc, scaleSplat,
                  read(b, loc, floatType, scales, {block, at}));
              Value next = vector::FMAOp::create(
                  b, loc,
                  arith::SIToFPOp::create(b, loc, floatType,
                                          read(b, loc, intType, sums, {col})),
                  scale, shifted);
              return write(b, loc, next, out, {c0, at});
            });
        return {updated, sums};
      });
  rewriter.replaceOp(op, result);
}

} // namespace

LogicalResult snapkv::vectorizeQ41VectorTimesMatrix(RewriterBase &rewriter,
                                                    linalg::LinalgOp op,
                                                    int64_t lanes, bool vnni) {
  bool int8 = isQ41Int8Contraction(op);
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (!(int8 || isQ41Contraction(op)) || ranges.size() != 5 || ranges[0] != 1 ||
      ranges[2] != 2 || ranges[3] != kQ41Pairs ||
      llvm::any_of(ranges, ShapedType::isDynamic))
    return failure();
  std::optional<std::pair<int64_t, int64_t>> sizes =
      widthAndChunk(ranges[4], lanes);
  if (!sizes)
    return failure();
  rewriter.setInsertionPoint(op);
  if (!int8) {
    vectorizeFloat(rewriter, op, ranges, sizes->first, sizes->second);
    return success();
  }
  if (auto attr = op->getAttrOfType<MicrokernelAttr>("snapkv.microkernel"))
    vnni = attr.getValue() == Microkernel::avx512vnni;
  // One vpdpbusd covers `lanes` columns by 4 rows; a step takes 4 of them.
  vnni = vnni && lanes == 16 && ranges[4] % (4 * lanes) == 0;
  vectorizeInt8(rewriter, op, ranges, sizes->first, sizes->second, lanes, vnni);
  return success();
}
