//===- VectorizeLinalg.cpp - tile linalg ops to vectors and vectorise -----===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_VECTORIZELINALG
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

/// Tile sizes: the innermost loop gets `width`; if it is a reduction, the
/// innermost parallel loop gets `width / 2` so reductions produce several
/// lanes at once; everything else is 1. Sizes never exceed a static extent.
SmallVector<int64_t> chooseTileSizes(linalg::LinalgOp op, int64_t width) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  SmallVector<utils::IteratorType> iters = op.getIteratorTypesArray();
  SmallVector<int64_t> sizes(ranges.size(), 1);
  if (ranges.empty())
    return sizes;
  int64_t last = static_cast<int64_t>(ranges.size()) - 1;
  sizes[last] = width;
  if (iters[last] == utils::IteratorType::reduction) {
    for (int64_t d = last - 1; d >= 0; --d) {
      if (iters[d] == utils::IteratorType::parallel) {
        sizes[d] = std::max<int64_t>(width / 2, 1);
        break;
      }
    }
  }
  for (auto [size, range] : llvm::zip(sizes, ranges))
    if (!ShapedType::isDynamic(range))
      size = std::max<int64_t>(std::min(size, range), 1);
  return sizes;
}

struct VectorizeLinalgPass
    : snapkv::impl::VectorizeLinalgBase<VectorizeLinalgPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> candidates;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op.hasPureTensorSemantics() && op.getNumLoops() > 0)
        candidates.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp op : candidates)
      tileAndVectorize(rewriter, op);
  }

  void tileAndVectorize(IRRewriter &rewriter, linalg::LinalgOp op) {
    SmallVector<int64_t> sizes = chooseTileSizes(op, vectorWidth);
    auto tileable = cast<TilingInterface>(op.getOperation());
    scf::SCFTilingOptions options;
    options.setTileSizes(getAsIndexOpFoldResult(&getContext(), sizes));
    rewriter.setInsertionPoint(op);
    FailureOr<scf::SCFTilingResult> tiled =
        scf::tileUsingSCF(rewriter, tileable, options);
    if (failed(tiled))
      return;
    auto tiledOp = dyn_cast<linalg::LinalgOp>(tiled->tiledOps.back());
    if (!tiledOp ||
        failed(linalg::vectorizeOpPrecondition(tiledOp, sizes, {},
                                               /*vectorizeNDExtract=*/true))) {
      // Keep the original op: a tile loop nest of scalar code is no faster.
      if (!tiled->loops.empty())
        rewriter.eraseOp(tiled->loops.front());
      else if (tiledOp && tiledOp != op)
        rewriter.eraseOp(tiledOp);
      return;
    }
    rewriter.replaceOp(op, tiled->replacements);
    rewriter.setInsertionPoint(tiledOp);
    // Vector sizes only matter (as masks) for tiles of dynamic size.
    ArrayRef<int64_t> vectorSizes;
    if (llvm::any_of(tiledOp.getStaticLoopRanges(), ShapedType::isDynamic))
      vectorSizes = sizes;
    FailureOr<linalg::VectorizationResult> vectorized = linalg::vectorize(
        rewriter, tiledOp, vectorSizes, {}, /*vectorizeNDExtract=*/true);
    if (succeeded(vectorized)) {
      if (vectorized->replacements.empty())
        rewriter.eraseOp(tiledOp);
      else
        rewriter.replaceOp(tiledOp, vectorized->replacements);
    }
  }
};

} // namespace
