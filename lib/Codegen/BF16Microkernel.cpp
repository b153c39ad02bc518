//===- BF16Microkernel.cpp - bf16 register tiles as AVX512_BF16 dots ------===//
//
// The register tile of a bf16 x bf16 -> f32 contraction that snapkv-vectorize
// chose the `avx512bf16` microkernel for, as `x86vector.avx512.dot`
// (`vdpbf16ps`) over pairs of reduction steps.
//
//===----------------------------------------------------------------------===//

#include "BF16Microkernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"

using namespace mlir;

namespace {

/// The whole static tensor `v` read as a vector of `shape` (its non-unit
/// dimensions, in order).
Value readWhole(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(v.getType());
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  SmallVector<Value> indices(type.getRank(), zero);
  SmallVector<bool> inBounds(type.getRank(), true);
  Value read = vector::TransferReadOp::create(
      b, loc, VectorType::get(type.getShape(), type.getElementType()), v,
      indices, /*padding=*/std::nullopt, inBounds);
  return vector::ShapeCastOp::create(
      b, loc, VectorType::get(shape, type.getElementType()), read);
}

} // namespace

LogicalResult snapkv::vectorizeBF16Dot(RewriterBase &rewriter,
                                       linalg::LinalgOp op, int64_t lanes) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  SmallVector<unsigned> reductions;
  op.getReductionDims(reductions);
  unsigned k = reductions.back();
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  unsigned n = cast<AffineDimExpr>(maps[2].getResults().back()).getPosition();
  // Rows: the parallel dimension of A (and C) with more than one step.
  std::optional<unsigned> m;
  for (auto [d, range] : llvm::enumerate(ranges))
    if (d != k && d != n && range != 1) {
      if (m || !maps[0].isFunctionOfDim(d))
        return failure();
      m = d;
    }
  int64_t rows = m ? ranges[*m] : 1, columns = ranges[n];
  if (ranges[k] != 2 || columns % lanes != 0)
    return failure();
  Location loc = op.getLoc();
  Type bf16 = rewriter.getBF16Type(), f32 = rewriter.getF32Type(),
       i32 = rewriter.getI32Type();
  Value a;
  if (m && maps[0].getResults().back().isFunctionOfDim(*m)) {
    // A as [2, rows]: its two rows interleaved into the rows' pairs.
    Value pairRows = readWhole(rewriter, loc, op.getDpsInputs()[0], {2, rows});
    SmallVector<int64_t> pairsOf;
    for (int64_t r = 0; r < rows; ++r)
      pairsOf.append({r, rows + r});
    a = vector::ShapeCastOp::create(
        rewriter, loc, VectorType::get({rows, 2}, bf16),
        vector::ShuffleOp::create(
            rewriter, loc,
            vector::ExtractOp::create(rewriter, loc, pairRows, 0),
            vector::ExtractOp::create(rewriter, loc, pairRows, 1), pairsOf));
  } else {
    a = readWhole(rewriter, loc, op.getDpsInputs()[0], {rows, 2});
  }
  Value init = op.getDpsInits()[0];
  Value c = readWhole(rewriter, loc, init, {rows, columns});
  // The pairs of B: lanes 2i and 2i + 1 of pair vector j hold column
  // j * lanes + i of the two rows.
  SmallVector<Value> pairs;
  if (maps[1].getResults().back().isFunctionOfDim(k)) {
    // Already in pairs ([N, 2]): read as they are, through a 1-D view (an
    // [N x 2] read would be N reads of two elements).
    Value bTile = op.getDpsInputs()[1];
    auto bType = cast<RankedTensorType>(bTile.getType());
    ReassociationIndices all =
        llvm::to_vector(llvm::seq<int64_t>(0, bType.getRank()));
    Value b = readWhole(
        rewriter, loc,
        tensor::CollapseShapeOp::create(rewriter, loc, bTile,
                                        ArrayRef<ReassociationIndices>{all}),
        {2 * columns});
    for (int64_t j = 0; j < columns; j += lanes)
      pairs.push_back(vector::ExtractStridedSliceOp::create(
          rewriter, loc, b, {2 * j}, {2 * lanes}, {1}));
  } else {
    // Two rows ([2, N]), interleaved.
    Value b = readWhole(rewriter, loc, op.getDpsInputs()[1], {2, columns});
    SmallVector<int64_t> interleave;
    for (int64_t i = 0; i < lanes; ++i)
      interleave.append({i, lanes + i});
    Value b0 = vector::ExtractOp::create(rewriter, loc, b, 0);
    Value b1 = vector::ExtractOp::create(rewriter, loc, b, 1);
    for (int64_t j = 0; j < columns; j += lanes) {
      auto part = [&](Value row) {
        return vector::ExtractStridedSliceOp::create(rewriter, loc, row, {j},
                                                     {lanes}, {1});
      };
      pairs.push_back(vector::ShuffleOp::create(rewriter, loc, part(b0),
                                                part(b1), interleave));
    }
  }
  auto pairType = VectorType::get({2 * lanes}, bf16);
  for (int64_t r = 0; r < rows; ++r) {
    Value pair = vector::ExtractOp::create(rewriter, loc, a, r);
    Value word = vector::ExtractOp::create(
        rewriter, loc,
        vector::BitCastOp::create(rewriter, loc, VectorType::get({1}, i32),
                                  pair),
        0);
    Value broadcast = vector::BitCastOp::create(
        rewriter, loc, pairType,
        vector::BroadcastOp::create(rewriter, loc,
                                    VectorType::get({lanes}, i32), word));
    Value row = vector::ExtractOp::create(rewriter, loc, c, r);
    for (auto [j, bPairs] : llvm::enumerate(pairs)) {
      int64_t offset = static_cast<int64_t>(j) * lanes;
      Value acc = vector::ExtractStridedSliceOp::create(rewriter, loc, row,
                                                        {offset}, {lanes}, {1});
      Value dot = x86vector::DotBF16Op::create(
          rewriter, loc, VectorType::get({lanes}, f32), acc, broadcast, bPairs);
      row = vector::InsertStridedSliceOp::create(rewriter, loc, dot, row,
                                                 {offset}, {1});
    }
    c = vector::InsertOp::create(rewriter, loc, row, c, r);
  }
  auto initType = cast<RankedTensorType>(init.getType());
  Value result = vector::ShapeCastOp::create(
      rewriter, loc, VectorType::get(initType.getShape(), f32), c);
  Value zero = arith::ConstantIndexOp::create(rewriter, loc, 0);
  SmallVector<Value> indices(initType.getRank(), zero);
  SmallVector<bool> inBounds(initType.getRank(), true);
  auto write = vector::TransferWriteOp::create(rewriter, loc, result, init,
                                               indices, inBounds);
  rewriter.replaceOp(op, write.getResult());
  return success();
}
