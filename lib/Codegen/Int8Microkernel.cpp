//===- Int8Microkernel.cpp - int8 x int8 block products on the CPU --------===//
//
// The one-row product of snapkv-quantize-weights' `activations=i8` (int8
// activations and Q8_0 weights, each with a scale per block of 32 along the
// reduction), as llama.cpp computes it: each block's 32 integer products
// summed exactly in i32, then one multiply by the two scales. On
// AVX512_VNNI `vpdpbusd` (inline assembly: see below) multiplies 4 unsigned
// bytes by 4 signed bytes and adds the 4 products into an i32 lane: the weights
// (signed) are offset by 128 into the unsigned operand (`q ^ 0x80` is `q +
// 128`), the activations are the signed operand, and the offset's share, 128
// x the block's sum of activations, is subtracted from each sum once per
// block. The weights come packed by 4 rows (`[K / 4, N, 4]`, bound so once),
// so each `vpdpbusd` takes one contiguous 64-byte read and the matrix is read
// in address order, without shuffles.
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
using snapkv::readVector;

namespace {

/// Columns per chunk of the one-row product's block sums (i32): up to the
/// logits' 49,152 (192 KiB, in the L2 cache), so that the packed weights are
/// read in address order; chunks of 2,048 (in L1) read the logits' matrix in
/// 8 KiB pieces 192 KiB apart, 1.4x slower streaming from memory.
constexpr int64_t kChunk = 65536;
/// Rows of a block, and rows per `vpdpbusd` lane.
constexpr int64_t kBlock = 32, kGroup = 4;
/// Rows of the matrix product's register tile: 4 x 4 i32 accumulators of 16
/// lanes, the 4 weight vectors they share and the broadcast activations fit
/// the 32 vector registers.
constexpr int64_t kTileRows = 4;

Value indexConstant(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

/// The 4 int8 activations of `source` (`[m, k / 32, k % 32]`) at `indices`
/// as one i32, in every lane of a vector of `lanes`.
Value broadcastWord(OpBuilder &b, Location loc, Value source,
                    ValueRange indices, int64_t lanes) {
  Type i8 = b.getI8Type(), i32 = b.getI32Type();
  Value four =
      readVector(b, loc, VectorType::get({kGroup}, i8), source, indices);
  Value word = vector::ExtractOp::create(
      b, loc,
      vector::BitCastOp::create(b, loc, VectorType::get({1}, i32), four),
      ArrayRef<int64_t>{0});
  return vector::BroadcastOp::create(b, loc, VectorType::get({lanes}, i32),
                                     word);
}

/// `acc` (i32 lanes) plus, in each lane, the 4 products of the lane's 4 bytes
/// of `piece` (int8 weights) and of `words` (int8 activations).
Value dot4(OpBuilder &b, Location loc, Value acc, Value piece, Value words,
           bool vnni) {
  auto laneType = cast<VectorType>(acc.getType());
  auto pieceType = cast<VectorType>(piece.getType());
  if (vnni) {
    // `vpdpbusd acc, q + 128, activations` (AT&T order reversed; `q ^ 0x80`
    // is `q + 128` as an unsigned byte; the caller subtracts 128 x the sum
    // of the activations), the sum tied to `acc`. Inline assembly without
    // side effects is pure; `llvm.call_intrinsic` has unknown memory
    // effects, which the buffer deallocation pipeline after this pass
    // rejects.
    Value offset = arith::ConstantOp::create(
        b, loc, pieceType, DenseElementsAttr::get(pieceType, int8_t(-128)));
    return LLVM::InlineAsmOp::create(
               b, loc, laneType,
               ValueRange{acc, arith::XOrIOp::create(b, loc, piece, offset),
                          vector::BitCastOp::create(b, loc, pieceType, words)},
               "vpdpbusd $3, $2, $0", "=v,0,v,v",
               /*has_side_effects=*/false, /*is_align_stack=*/false,
               LLVM::TailCallKind::None, LLVM::AsmDialectAttr(), ArrayAttr())
        .getRes();
  }
  // Byte r of each i32 lane, sign-extended: shifted to the top, then
  // arithmetically back.
  auto shift = [&](int64_t bits) -> Value {
    return arith::ConstantOp::create(
        b, loc, laneType,
        DenseElementsAttr::get(laneType, static_cast<int32_t>(bits)));
  };
  auto byte = [&](Value v, int64_t r) -> Value {
    Value up = arith::ShLIOp::create(b, loc, v, shift(8 * (kGroup - 1 - r)));
    return arith::ShRSIOp::create(b, loc, up, shift(8 * (kGroup - 1)));
  };
  Value packed = vector::BitCastOp::create(b, loc, laneType, piece);
  for (int64_t r = 0; r < kGroup; ++r)
    acc = arith::AddIOp::create(
        b, loc, acc,
        arith::MulIOp::create(b, loc, byte(packed, r), byte(words, r)));
  return acc;
}

/// An int8 x int8 block product (snapkv::isInt8ScaledContraction) with f32
/// scales and result, static but perhaps for its rows: its operands, and the
/// widest multiple of the vector (up to 4 of them) that divides its columns.
struct Int8Product {
  Value x, values, xScales, scales, init;
  int64_t blocks, columns, width;
};

std::optional<Int8Product> matchInt8Product(linalg::LinalgOp op,
                                            int64_t lanes) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (!snapkv::isInt8ScaledContraction(op) || ranges.size() != 5 ||
      ranges[2] != kBlock / kGroup || ranges[3] != kGroup ||
      llvm::any_of(ArrayRef<int64_t>(ranges).drop_front(),
                   ShapedType::isDynamic))
    return std::nullopt;
  Int8Product p{op.getDpsInputs()[0],
                op.getDpsInputs()[1],
                op.getDpsInputs()[2],
                op.getDpsInputs()[3],
                op.getDpsInits()[0],
                ranges[1],
                ranges[4],
                0};
  auto elementType = [](Value v) { return getElementTypeOrSelf(v.getType()); };
  if (!elementType(p.xScales).isF32() || !elementType(p.scales).isF32() ||
      !elementType(p.init).isF32())
    return std::nullopt;
  for (int64_t w : {4 * lanes, 2 * lanes, lanes})
    if (!p.width && p.columns % w == 0)
      p.width = w;
  if (!p.width)
    return std::nullopt;
  return p;
}

/// `v` (`[..., a, b]`) as `[..., a * b]`.
Value collapseLast(OpBuilder &b, Location loc, Value v) {
  int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
  SmallVector<ReassociationIndices> groups;
  for (int64_t d = 0; d < rank - 2; ++d)
    groups.push_back({d});
  groups.push_back({rank - 2, rank - 1});
  return tensor::CollapseShapeOp::create(b, loc, v, groups);
}

} // namespace

LogicalResult snapkv::vectorizeInt8VectorTimesMatrix(RewriterBase &rewriter,
                                                     linalg::LinalgOp op,
                                                     int64_t lanes, bool vnni) {
  std::optional<Int8Product> product = matchInt8Product(op, lanes);
  if (!product || op.getStaticLoopRanges()[0] != 1)
    return failure();
  Value x = product->x, values = product->values, xScales = product->xScales,
        scales = product->scales, init = product->init;
  int64_t blocks = product->blocks, columns = product->columns,
          width = product->width;
  // One vpdpbusd covers 16 columns by 4 rows.
  vnni = vnni && lanes == 16;
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
  auto laneType = VectorType::get({lanes}, i32);
  auto pieceType = VectorType::get({kGroup * lanes}, i8);
  Value zeros = arith::ConstantOp::create(rewriter, loc, intType,
                                          DenseElementsAttr::get(intType, 0));
  // for i in [0, count) step `step`: carried = body(i, carried).
  auto loop = [&](OpBuilder &b, Location loc, int64_t count, int64_t step,
                  Value carried, CarriedBody body) {
    return forCarrying(b, loc, c0, count, step, carried, body).getResult(0);
  };
  auto read = readVector;
  auto write = writeVector;
  // The packed values as `[k / 32, k % 32 / 4, n * 4 + k % 4]` and the
  // activations as `[m, k / 32, k % 32]`: a group's 16 columns x 4 rows are
  // one contiguous 64-byte read.
  Value rows = collapseLast(rewriter, loc, values),
        xBlocks = collapseLast(rewriter, loc, x);

  // The sums of group `group` (rows 4 group..4 group + 3) of block `block`
  // into `sums`, one stride of the packed values in address order.
  auto groupSums = [&](OpBuilder &b, Location loc, Value block, Value first,
                       Value group, Value sums) -> Value {
    Value words = broadcastWord(
        b, loc, xBlocks,
        {c0, block, arith::MulIOp::create(b, loc, group, index(kGroup))},
        lanes);
    return loop(
        b, loc, chunk, width, sums,
        [&](OpBuilder &b, Location loc, Value col, Value sums) -> Value {
          for (int64_t j = 0; j < width / lanes; ++j) {
            Value to = arith::AddIOp::create(b, loc, col, index(j * lanes));
            Value at = arith::MulIOp::create(
                b, loc, arith::AddIOp::create(b, loc, first, to),
                index(kGroup));
            Value piece = read(b, loc, pieceType, rows, {block, group, at});
            Value acc = read(b, loc, laneType, sums, {to});
            sums = write(b, loc, dot4(b, loc, acc, piece, words, vnni), sums,
                         {to});
          }
          return sums;
        });
  };

  Value sums0 = tensor::EmptyOp::create(rewriter, loc, {chunk}, i32);
  auto chunks = scf::ForOp::create(
      rewriter, loc, c0, index(columns), index(chunk), ValueRange{init, sums0},
      [&](OpBuilder &b, Location loc, Value first, ValueRange carried) {
        auto perBlock = scf::ForOp::create(
            b, loc, c0, index(blocks), c1, carried,
            [&](OpBuilder &b, Location loc, Value block, ValueRange carried) {
              Value sums =
                  loop(b, loc, chunk, width, carried[1],
                       [&](OpBuilder &b, Location loc, Value col, Value sums) {
                         return write(b, loc, zeros, sums, {col});
                       });
              sums = loop(
                  b, loc, kBlock / kGroup, 1, sums,
                  [&](OpBuilder &b, Location loc, Value group, Value sums) {
                    return groupSums(b, loc, block, first, group, sums);
                  });
              Value offset;
              if (vnni) {
                // 128 x the block's sum of activations, in every lane.
                Value all = read(b, loc, VectorType::get({kBlock}, i8), xBlocks,
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
        scf::YieldOp::create(b, loc, perBlock.getResults());
      });
  rewriter.replaceOp(op, chunks.getResult(0));
  return success();
}

LogicalResult snapkv::vectorizeInt8MatrixTimesMatrix(RewriterBase &rewriter,
                                                     linalg::LinalgOp op,
                                                     int64_t lanes, bool vnni) {
  std::optional<Int8Product> product = matchInt8Product(op, lanes);
  if (!product)
    return failure();
  // A strip of columns (up to 4 vectors): the weights every row of the tile
  // multiplies.
  Value x = product->x, values = product->values, xScales = product->xScales,
        scales = product->scales, init = product->init;
  int64_t blocks = product->blocks, columns = product->columns,
          strip = product->width;
  vnni = vnni && lanes == 16;
  int64_t vectors = strip / lanes;

  Location loc = op.getLoc();
  Type i8 = rewriter.getI8Type(), i32 = rewriter.getI32Type(),
       f32 = rewriter.getF32Type();
  auto index = [&](OpBuilder &b, int64_t v) {
    return indexConstant(b, loc, v);
  };
  Value c0 = index(rewriter, 0), c1 = index(rewriter, 1);
  auto laneType = VectorType::get({lanes}, i32);
  auto floatType = VectorType::get({lanes}, f32);
  auto pieceType = VectorType::get({kGroup * lanes}, i8);
  Value rows = collapseLast(rewriter, loc, values),
        xBlocks = collapseLast(rewriter, loc, x);
  Value count = tensor::DimOp::create(rewriter, loc, x, 0);

  // VNNI: 128 x each row's sum of activations per block (the offset of the
  // weights), once for the tile's rows: `[m, k / 32]`.
  Value offsets;
  if (vnni) {
    Value empty = tensor::EmptyOp::create(
        rewriter, loc,
        ArrayRef<OpFoldResult>{count, rewriter.getIndexAttr(blocks)}, i32);
    auto perRow = scf::ForOp::create(
        rewriter, loc, c0, count, c1, ValueRange{empty},
        [&](OpBuilder &b, Location loc, Value row, ValueRange carried) {
          auto perBlock = scf::ForOp::create(
              b, loc, c0, index(b, blocks), c1, carried,
              [&](OpBuilder &b, Location loc, Value block, ValueRange carried) {
                Value all = readVector(b, loc, VectorType::get({kBlock}, i8),
                                       xBlocks, {row, block, c0});
                Value total = vector::ReductionOp::create(
                    b, loc, vector::CombiningKind::ADD,
                    arith::ExtSIOp::create(
                        b, loc, VectorType::get({kBlock}, i32), all));
                Value offset = arith::MulIOp::create(
                    b, loc, total,
                    arith::ConstantOp::create(b, loc,
                                              b.getI32IntegerAttr(128)));
                scf::YieldOp::create(
                    b, loc,
                    ValueRange{tensor::InsertOp::create(
                        b, loc, offset, carried[0], {row, block})});
              });
          scf::YieldOp::create(b, loc, perBlock.getResults());
        });
    offsets = perRow.getResult(0);
  }

  // Rows [first, first + tileRows) x columns [col, col + strip) of `out`:
  // per block, the tile's i32 sums in registers over its 8 groups of 4 rows
  // (each group's `vectors` weight reads shared by the tile's rows), then
  // the sums times both scales added to `out`.
  auto tile = [&](OpBuilder &b, Location loc, int64_t tileRows, Value first,
                  Value col, Value out) -> Value {
    SmallVector<Value> rowIndex;
    for (int64_t i = 0; i < tileRows; ++i)
      rowIndex.push_back(arith::AddIOp::create(b, loc, first, index(b, i)));
    SmallVector<Value> colIndex, byteIndex;
    for (int64_t j = 0; j < vectors; ++j) {
      colIndex.push_back(
          arith::AddIOp::create(b, loc, col, index(b, j * lanes)));
      byteIndex.push_back(
          arith::MulIOp::create(b, loc, colIndex.back(), index(b, kGroup)));
    }
    Value zeros = arith::ConstantOp::create(
        b, loc, laneType, DenseElementsAttr::get(laneType, 0));
    auto perBlock = scf::ForOp::create(
        b, loc, c0, index(b, blocks), c1, ValueRange{out},
        [&](OpBuilder &b, Location loc, Value block, ValueRange carried) {
          SmallVector<Value> accs(tileRows * vectors, zeros);
          auto perGroup = scf::ForOp::create(
              b, loc, c0, index(b, kBlock / kGroup), c1, accs,
              [&](OpBuilder &b, Location loc, Value group, ValueRange accs) {
                Value at =
                    arith::MulIOp::create(b, loc, group, index(b, kGroup));
                SmallVector<Value> pieces;
                for (int64_t j = 0; j < vectors; ++j)
                  pieces.push_back(readVector(b, loc, pieceType, rows,
                                              {block, group, byteIndex[j]}));
                SmallVector<Value> next;
                for (int64_t i = 0; i < tileRows; ++i) {
                  Value words = broadcastWord(b, loc, xBlocks,
                                              {rowIndex[i], block, at}, lanes);
                  for (int64_t j = 0; j < vectors; ++j)
                    next.push_back(dot4(b, loc, accs[i * vectors + j],
                                        pieces[j], words, vnni));
                }
                scf::YieldOp::create(b, loc, next);
              });
          Value out = carried[0];
          SmallVector<Value> weightScales;
          for (int64_t j = 0; j < vectors; ++j)
            weightScales.push_back(
                readVector(b, loc, floatType, scales, {block, colIndex[j]}));
          for (int64_t i = 0; i < tileRows; ++i) {
            Value scaleA = vector::BroadcastOp::create(
                b, loc, floatType,
                tensor::ExtractOp::create(b, loc, xScales,
                                          {rowIndex[i], block}));
            Value offset;
            if (offsets)
              offset = vector::BroadcastOp::create(
                  b, loc, laneType,
                  tensor::ExtractOp::create(b, loc, offsets,
                                            {rowIndex[i], block}));
            for (int64_t j = 0; j < vectors; ++j) {
              Value sum = perGroup.getResult(i * vectors + j);
              if (offset)
                sum = arith::SubIOp::create(b, loc, sum, offset);
              Value scale =
                  arith::MulFOp::create(b, loc, scaleA, weightScales[j]);
              Value next = vector::FMAOp::create(
                  b, loc, arith::SIToFPOp::create(b, loc, floatType, sum),
                  scale,
                  readVector(b, loc, floatType, out,
                             {rowIndex[i], colIndex[j]}));
              out = writeVector(b, loc, next, out, {rowIndex[i], colIndex[j]});
            }
          }
          scf::YieldOp::create(b, loc, ValueRange{out});
        });
    return perBlock.getResult(0);
  };

  // Per strip of columns (its weights stay in the caches while every row
  // passes): the rows in tiles of kTileRows, then the rest one at a time.
  Value whole = arith::MulIOp::create(
      rewriter, loc,
      arith::DivUIOp::create(rewriter, loc, count, index(rewriter, kTileRows)),
      index(rewriter, kTileRows));
  auto strips = scf::ForOp::create(
      rewriter, loc, c0, index(rewriter, columns), index(rewriter, strip),
      ValueRange{init},
      [&](OpBuilder &b, Location loc, Value col, ValueRange carried) {
        auto tiles = scf::ForOp::create(
            b, loc, c0, whole, index(b, kTileRows), carried,
            [&](OpBuilder &b, Location loc, Value first, ValueRange carried) {
              scf::YieldOp::create(
                  b, loc, tile(b, loc, kTileRows, first, col, carried[0]));
            });
        auto rest = scf::ForOp::create(
            b, loc, whole, count, c1, tiles.getResults(),
            [&](OpBuilder &b, Location loc, Value first, ValueRange carried) {
              scf::YieldOp::create(b, loc,
                                   tile(b, loc, 1, first, col, carried[0]));
            });
        scf::YieldOp::create(b, loc, rest.getResults());
      });
  rewriter.replaceOp(op, strips.getResult(0));
  return success();
}
