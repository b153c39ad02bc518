//===- Int8Microkernel.cpp - int8 x int8 block products on the CPU --------===//
//
// The one-row product of snapkv-quantize-weights' `activations=i8` (int8
// activations and Q8_0 weights, each with a scale per block of 32 along the
// reduction), as llama.cpp computes it: each block's 32 integer products
// summed exactly in i32, then one multiply by the two scales. On
// AVX512_VNNI `vpdpbusd` (inline assembly: see below) multiplies 4 unsigned
// bytes by 4 signed bytes and adds the 4 products into an i32 lane: the weights
// (signed) are offset by 128 into the unsigned operand (`q ^ 0x80` is `q +
// 128`) and interleaved by 4 rows in registers, the activations are the signed
// operand, and the offset's share, 128 x the block's sum of activations, is
// subtracted from each sum once per block.
//
//===----------------------------------------------------------------------===//

#include "Int8Microkernel.h"
#include "VectorLoops.h"

#include "snapkv/Codegen/ScaledContraction.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace {

/// Columns per chunk of the block sums (i32, in the L1 cache), as the
/// float-activation kernel's.
constexpr int64_t kChunk = 2048;
/// Rows of a block, and rows per `vpdpbusd` lane.
constexpr int64_t kBlock = 32, kGroup = 4;

} // namespace

LogicalResult snapkv::vectorizeInt8VectorTimesMatrix(RewriterBase &rewriter,
                                                     linalg::LinalgOp op,
                                                     int64_t lanes, bool vnni) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (!isInt8ScaledContraction(op) || ranges.size() != 4 || ranges[0] != 1 ||
      ranges[2] != kBlock || llvm::any_of(ranges, ShapedType::isDynamic))
    return failure();
  Value x = op.getDpsInputs()[0], values = op.getDpsInputs()[1],
        xScales = op.getDpsInputs()[2], scales = op.getDpsInputs()[3],
        init = op.getDpsInits()[0];
  auto elementType = [](Value v) { return getElementTypeOrSelf(v.getType()); };
  if (!elementType(xScales).isF32() || !elementType(scales).isF32() ||
      !elementType(init).isF32())
    return failure();
  int64_t columns = ranges[3];
  // One vpdpbusd covers 16 columns by 4 rows; a step takes 4 of them.
  vnni = vnni && lanes == 16 && columns % (4 * lanes) == 0;
  int64_t width = 0;
  for (int64_t w : {4 * lanes, 2 * lanes, lanes})
    if (!width && columns % w == 0)
      width = w;
  if (!width)
    return failure();
  int64_t chunk = columns;
  if (chunk > kChunk)
    for (chunk = kChunk - kChunk % width; columns % chunk != 0;)
      chunk -= width;

  Location loc = op.getLoc();
  Type i8 = rewriter.getI8Type(), i32 = rewriter.getI32Type(),
       f32 = rewriter.getF32Type();
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  };
  Value c0 = index(0), c1 = index(1);
  auto intType = VectorType::get({width}, i32);
  auto floatType = VectorType::get({width}, f32);
  auto byteType = VectorType::get({width}, i8);
  Value zeros = arith::ConstantOp::create(rewriter, loc, intType,
                                          DenseElementsAttr::get(intType, 0));
  // for i in [0, count) step `step`: carried = body(i, carried).
  auto loop = [&](OpBuilder &b, Location loc, int64_t count, int64_t step,
                  Value carried, CarriedBody body) {
    return forCarrying(b, loc, c0, count, step, carried, body).getResult(0);
  };
  auto read = readVector;
  auto write = writeVector;

  // VNNI: the sums of one group of 4 rows of block `block` into `sums`.
  auto vnniGroup = [&](OpBuilder &b, Location loc, Value block, Value first,
                       Value group, Value sums) -> Value {
    auto laneType = VectorType::get({lanes}, i32);
    auto pieceType = VectorType::get({4 * lanes}, i8);
    // The group's 4 activations as one i32, in every lane.
    Value row = arith::MulIOp::create(b, loc, group, index(kGroup));
    Value four =
        read(b, loc, VectorType::get({kGroup}, i8), x, {c0, block, row});
    Value word = vector::ExtractOp::create(
        b, loc,
        vector::BitCastOp::create(b, loc, VectorType::get({1}, i32), four),
        ArrayRef<int64_t>{0});
    Value activations = vector::BitCastOp::create(
        b, loc, pieceType, vector::BroadcastOp::create(b, loc, laneType, word));
    Value offset = arith::ConstantOp::create(
        b, loc, pieceType, DenseElementsAttr::get(pieceType, int8_t(-128)));
    return loop(
        b, loc, chunk, 4 * lanes, sums,
        [&](OpBuilder &b, Location loc, Value col, Value sums) -> Value {
          Value at = arith::AddIOp::create(b, loc, first, col);
          SmallVector<Value> rows;
          for (int64_t r = 0; r < kGroup; ++r) {
            Value k = arith::AddIOp::create(b, loc, row, index(r));
            rows.push_back(arith::XOrIOp::create(
                b, loc, read(b, loc, pieceType, values, {block, k, at}),
                offset));
          }
          // Bytes of rows 0 and 1 (2 and 3) interleaved, then their pairs:
          // column c's 4 rows in lane c.
          SmallVector<int64_t> bytes;
          for (int64_t c = 0; c < 4 * lanes; ++c)
            bytes.append({c, 4 * lanes + c});
          Value low =
              vector::ShuffleOp::create(b, loc, rows[0], rows[1], bytes);
          Value high =
              vector::ShuffleOp::create(b, loc, rows[2], rows[3], bytes);
          for (int64_t j = 0; j < 4; ++j) {
            SmallVector<int64_t> mask;
            for (int64_t c = j * lanes; c < (j + 1) * lanes; ++c)
              mask.append(
                  {2 * c, 2 * c + 1, 8 * lanes + 2 * c, 8 * lanes + 2 * c + 1});
            Value piece = vector::ShuffleOp::create(b, loc, low, high, mask);
            Value to = arith::AddIOp::create(b, loc, col, index(j * lanes));
            Value acc = read(b, loc, laneType, sums, {to});
            // `vpdpbusd acc, piece, activations` (AT&T order reversed), the
            // sum tied to `acc`. Inline assembly without side effects is
            // pure; `llvm.call_intrinsic` has unknown memory effects, which
            // the buffer deallocation pipeline after this pass rejects.
            Value sum =
                LLVM::InlineAsmOp::create(
                    b, loc, laneType, ValueRange{acc, piece, activations},
                    "vpdpbusd $3, $2, $0", "=v,0,v,v",
                    /*has_side_effects=*/false, /*is_align_stack=*/false,
                    LLVM::TailCallKind::None, LLVM::AsmDialectAttr(),
                    ArrayAttr())
                    .getRes();
            sums = write(b, loc, sum, sums, {to});
          }
          return sums;
        });
  };
  // Without VNNI: the sums of row `row` of block `block`, widened to i32.
  auto plainRow = [&](OpBuilder &b, Location loc, Value block, Value first,
                      Value row, Value sums) -> Value {
    Value a = arith::ExtSIOp::create(
        b, loc, i32, tensor::ExtractOp::create(b, loc, x, {c0, block, row}));
    Value splat = vector::BroadcastOp::create(b, loc, intType, a);
    return loop(b, loc, chunk, width, sums,
                [&](OpBuilder &b, Location loc, Value col, Value sums) {
                  Value at = arith::AddIOp::create(b, loc, first, col);
                  Value q = arith::ExtSIOp::create(
                      b, loc, intType,
                      read(b, loc, byteType, values, {block, row, at}));
                  Value sum = arith::AddIOp::create(
                      b, loc, read(b, loc, intType, sums, {col}),
                      arith::MulIOp::create(b, loc, splat, q));
                  return write(b, loc, sum, sums, {col});
                });
  };

  Value sums0 = tensor::EmptyOp::create(rewriter, loc, {chunk}, i32);
  auto chunks = scf::ForOp::create(
      rewriter, loc, c0, index(columns), index(chunk), ValueRange{init, sums0},
      [&](OpBuilder &b, Location loc, Value first, ValueRange carried) {
        auto blocks = scf::ForOp::create(
            b, loc, c0, index(ranges[1]), c1, carried,
            [&](OpBuilder &b, Location loc, Value block, ValueRange carried) {
              Value sums =
                  loop(b, loc, chunk, width, carried[1],
                       [&](OpBuilder &b, Location loc, Value col, Value sums) {
                         return write(b, loc, zeros, sums, {col});
                       });
              Value offset;
              if (vnni) {
                sums = loop(
                    b, loc, kBlock / kGroup, 1, sums,
                    [&](OpBuilder &b, Location loc, Value group, Value sums) {
                      return vnniGroup(b, loc, block, first, group, sums);
                    });
                // 128 x the block's sum of activations, in every lane.
                Value all = read(b, loc, VectorType::get({kBlock}, i8), x,
                                 {c0, block, c0});
                Value total = vector::ReductionOp::create(
                    b, loc, vector::CombiningKind::ADD,
                    arith::ExtSIOp::create(
                        b, loc, VectorType::get({kBlock}, i32), all));
                offset = vector::BroadcastOp::create(
                    b, loc, intType,
                    arith::MulIOp::create(
                        b, loc, total,
                        arith::ConstantOp::create(b, loc,
                                                  b.getI32IntegerAttr(128))));
              } else {
                sums = loop(
                    b, loc, kBlock, 1, sums,
                    [&](OpBuilder &b, Location loc, Value row, Value sums) {
                      return plainRow(b, loc, block, first, row, sums);
                    });
              }
              // out += f32(sum) * (scale_a * scale_q), once per block.
              Value scaleA = vector::BroadcastOp::create(
                  b, loc, floatType,
                  tensor::ExtractOp::create(b, loc, xScales, {c0, block}));
              Value result = loop(
                  b, loc, chunk, width, carried[0],
                  [&](OpBuilder &b, Location loc, Value col, Value out) {
                    Value at = arith::AddIOp::create(b, loc, first, col);
                    Value sum = read(b, loc, intType, sums, {col});
                    if (offset)
                      sum = arith::SubIOp::create(b, loc, sum, offset);
                    Value scale = arith::MulFOp::create(
                        b, loc, scaleA,
                        read(b, loc, floatType, scales, {block, at}));
                    Value next = vector::FMAOp::create(
                        b, loc, arith::SIToFPOp::create(b, loc, floatType, sum),
                        scale, read(b, loc, floatType, out, {c0, at}));
                    return write(b, loc, next, out, {c0, at});
                  });
              scf::YieldOp::create(b, loc, ValueRange{result, sums});
            });
        scf::YieldOp::create(b, loc, blocks.getResults());
      });
  rewriter.replaceOp(op, chunks.getResult(0));
  return success();
}
