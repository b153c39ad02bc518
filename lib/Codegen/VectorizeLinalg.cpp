//===- VectorizeLinalg.cpp - tile linalg ops to vectors and vectorise -----===//
//
// Two phases: (1) tile each linalg op on tensors to vector-sized tiles and
// peel every tile loop whose trip count is not a known multiple of its step,
// so the main loops hold statically shaped tiles; (2) after canonicalisation
// has folded those shapes, vectorise the static tiles without masks. Peeled
// remainders (dynamic prompt lengths) stay scalar.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_VECTORIZELINALG
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

/// Marks tiles created by phase 1 for phase 2.
constexpr StringLiteral kTileMarker = "snapkv.vector_tile";
/// Tile sizes chosen by whoever built the op (convert-snapkv-to-linalg).
constexpr StringLiteral kTileSizesHint = "snapkv.tile_sizes";
constexpr StringLiteral kInterchangeHint = "snapkv.tile_interchange";

/// Tile sizes: the op's `snapkv.tile_sizes` hint if it has one; otherwise
/// the innermost loop gets `width` and, if it is a reduction, the innermost
/// parallel loop gets `width / 2` so reductions produce several lanes at
/// once; everything else is 1. Sizes never exceed a static extent.
SmallVector<int64_t> chooseTileSizes(linalg::LinalgOp op, int64_t width) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  SmallVector<utils::IteratorType> iters = op.getIteratorTypesArray();
  SmallVector<int64_t> sizes(ranges.size(), 1);
  int64_t last = static_cast<int64_t>(ranges.size()) - 1;
  sizes[last] = width;
  auto hint = op->getAttrOfType<DenseI64ArrayAttr>(kTileSizesHint);
  if (hint && hint.size() == static_cast<int64_t>(sizes.size()))
    sizes = llvm::to_vector(hint.asArrayRef());
  else if (iters[last] == utils::IteratorType::reduction) {
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

/// i1 tensors are stored one byte per element, but vectors of i1 are stored
/// bit-packed: a vectorised read or write of i1 memory would reinterpret
/// the bytes, so ops that touch i1 tensors stay scalar.
bool touchesI1(linalg::LinalgOp op) {
  auto isI1Tensor = [](Type t) {
    auto shaped = dyn_cast<ShapedType>(t);
    return shaped && shaped.getElementType().isInteger(1);
  };
  if (llvm::any_of(op->getOperandTypes(), isI1Tensor))
    return true;
  // tensor.extract from captured i1 tensors inside the body (gathers).
  WalkResult found = op->walk([&](tensor::ExtractOp extract) {
    return isI1Tensor(extract.getTensor().getType()) ? WalkResult::interrupt()
                                                     : WalkResult::advance();
  });
  return found.wasInterrupted();
}

bool hasStaticLoopRanges(linalg::LinalgOp op) {
  return llvm::none_of(op.getStaticLoopRanges(), ShapedType::isDynamic);
}

struct VectorizeLinalgPass
    : snapkv::impl::VectorizeLinalgBase<VectorizeLinalgPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> candidates;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op.hasPureTensorSemantics() && op.getNumLoops() > 0 &&
          !touchesI1(op))
        candidates.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp op : candidates)
      tileAndPeel(rewriter, op);

    // Fold the peeled tiles' sizes into their types.
    RewritePatternSet patterns(&getContext());
    for (Dialect *dialect : getContext().getLoadedDialects())
      dialect->getCanonicalizationPatterns(patterns);
    for (RegisteredOperationName name :
         getContext().getRegisteredOperations())
      name.getCanonicalizationPatterns(patterns, &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();

    SmallVector<linalg::LinalgOp> tiles;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op->removeAttr(kTileMarker) && hasStaticLoopRanges(op))
        tiles.push_back(op);
    });
    for (linalg::LinalgOp tile : tiles) {
      rewriter.setInsertionPoint(tile);
      FailureOr<linalg::VectorizationResult> vectorized = linalg::vectorize(
          rewriter, tile, {}, {}, /*vectorizeNDExtract=*/true);
      if (failed(vectorized))
        continue;
      if (vectorized->replacements.empty())
        rewriter.eraseOp(tile);
      else
        rewriter.replaceOp(tile, vectorized->replacements);
    }
  }

  void tileAndPeel(IRRewriter &rewriter, linalg::LinalgOp op) {
    SmallVector<int64_t> sizes = chooseTileSizes(op, vectorWidth);
    op->removeAttr(kTileSizesHint);
    scf::SCFTilingOptions options;
    options.setTileSizes(getAsIndexOpFoldResult(&getContext(), sizes));
    if (auto order = op->getAttrOfType<DenseI64ArrayAttr>(kInterchangeHint)) {
      if (isPermutationVector(order.asArrayRef()) &&
          order.size() == static_cast<int64_t>(sizes.size()))
        options.setInterchange(order.asArrayRef());
      op->removeAttr(kInterchangeHint);
    }
    rewriter.setInsertionPoint(op);
    FailureOr<scf::SCFTilingResult> tiled = scf::tileUsingSCF(
        rewriter, cast<TilingInterface>(op.getOperation()), options);
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
    tiledOp->setAttr(kTileMarker, rewriter.getUnitAttr());
    rewriter.replaceOp(op, tiled->replacements);
    for (LoopLikeOpInterface loop : tiled->loops) {
      auto forOp = dyn_cast<scf::ForOp>(loop.getOperation());
      if (!forOp)
        continue;
      scf::ForOp remainder;
      // Fails (harmlessly) when the step already divides the trip count.
      (void)scf::peelForLoopAndSimplifyBounds(rewriter, forOp, remainder);
    }
  }
};

} // namespace
