//===- VectorizeLinalg.cpp - tile linalg ops to vectors and vectorise -----===//
//
// Runs on buffers (after bufferisation): tensor-level tiling would leave
// bufferisation and subset hoisting to prove slices disjoint with Presburger
// queries, which took seconds per op once prompt lengths are dynamic.
// Three phases: (1) tile each linalg op to vector-sized tiles and peel every
// tile loop whose trip count is not a known multiple of its step, so the
// main loops hold statically shaped tiles; (2) after canonicalisation has
// folded those shapes, vectorise the static tiles without masks (peeled
// remainders stay scalar); (3) hoist loop-invariant subviews and the
// read/write pairs of accumulators out of reduction loops.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Hoisting.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/LoopInvariantCodeMotionUtils.h"

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

/// i1 buffers are stored one byte per element, but vectors of i1 are stored
/// bit-packed: a vectorised read or write of i1 memory would reinterpret
/// the bytes, so ops that touch i1 tensors stay scalar.
bool touchesI1(linalg::LinalgOp op) {
  auto isI1Tensor = [](Type t) {
    auto shaped = dyn_cast<ShapedType>(t);
    return shaped && shaped.getElementType().isInteger(1);
  };
  if (llvm::any_of(op->getOperandTypes(), isI1Tensor))
    return true;
  // Loads from captured i1 buffers inside the body (gathers).
  WalkResult found = op->walk([&](memref::LoadOp load) {
    return isI1Tensor(load.getMemRefType()) ? WalkResult::interrupt()
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
      if (op.hasPureBufferSemantics() && op.getNumLoops() > 0 &&
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
    FrozenRewritePatternSet canonicalization(std::move(patterns));
    (void)applyPatternsGreedily(getOperation(), canonicalization);

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
      rewriter.eraseOp(tile);
    }

    // Unit reduction dims fold away here, and subviews fold into the
    // transfers (hoisting only trusts transfers on non-view memrefs), which
    // exposes the accumulator read/write pairs of reduction loops.
    // (Not converging within the rewrite limit only means less folding.)
    (void)applyPatternsGreedily(getOperation(), canonicalization);
    RewritePatternSet folding(&getContext());
    memref::populateFoldMemRefAliasOpPatterns(folding);
    (void)applyPatternsGreedily(getOperation(), std::move(folding));
    getOperation().walk(
        [](LoopLikeOpInterface loop) { moveLoopInvariantCode(loop); });
    SmallVector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp loop) { loops.push_back(loop); });
    for (scf::ForOp loop : loops)
      hoistAccumulator(rewriter, loop);
  }

  /// The tile loops we generate carry reductions through memory: inside a
  /// loop, a transfer_read and a transfer_write of the same vector at the
  /// same loop-invariant position of one buffer. When nothing else in the
  /// loop touches that buffer, the pair moves out and the vector is carried
  /// by the loop instead. (Upstream's hoistRedundantVectorTransfers refuses
  /// any buffer that has uses outside the loop, which ours always have.)
  static void hoistAccumulator(IRRewriter &rewriter, scf::ForOp loop) {
    if (loop.getNumResults() != 0)
      return;
    Block *body = loop.getBody();
    vector::TransferReadOp read;
    vector::TransferWriteOp write;
    for (Operation &op : *body) {
      auto candidate = dyn_cast<vector::TransferWriteOp>(op);
      if (!candidate || !isa<MemRefType>(candidate.getBase().getType()))
        continue;
      for (Operation &prev : *body) {
        if (&prev == &op)
          break;
        auto r = dyn_cast<vector::TransferReadOp>(prev);
        if (r && r.getBase() == candidate.getBase() &&
            r.getIndices() == candidate.getIndices() &&
            r.getVectorType() == candidate.getVectorType() &&
            r.getPermutationMap() == candidate.getPermutationMap() &&
            !r.getMask() && !candidate.getMask())
          read = r, write = candidate;
      }
      if (read)
        break;
    }
    if (!read)
      return;
    Value base = read.getBase();
    if (!base.getDefiningOp<memref::AllocOp>())
      return;
    for (Value operand : read->getOperands())
      if (!loop.isDefinedOutsideOfLoop(operand))
        return;
    // Every other memory access in the loop must be a read of another buffer
    // (allocations never alias each other or the function's arguments); a
    // view of the accumulator's allocation counts as the allocation itself.
    auto rootOf = [](Value v) {
      while (auto view = v.getDefiningOp<ViewLikeOpInterface>())
        v = view.getViewSource();
      return v;
    };
    WalkResult unsafe = body->walk([&](Operation *op) {
      if (op == read || op == write)
        return WalkResult::advance();
      if (llvm::any_of(op->getOperands(),
                       [&](Value v) { return rootOf(v) == base; }))
        return WalkResult::interrupt();
      auto effects = dyn_cast<MemoryEffectOpInterface>(op);
      if (!effects)
        return op->hasTrait<OpTrait::HasRecursiveMemoryEffects>() ||
                       isPure(op)
                   ? WalkResult::advance()
                   : WalkResult::interrupt();
      if (effects.hasEffect<MemoryEffects::Write>() ||
          effects.hasEffect<MemoryEffects::Free>())
        return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (unsafe.wasInterrupted())
      return;

    rewriter.moveOpBefore(read, loop);
    Value stored = write.getVector();
    FailureOr<LoopLikeOpInterface> newLoop =
        cast<LoopLikeOpInterface>(loop.getOperation())
            .replaceWithAdditionalYields(
                rewriter, read.getResult(), /*replaceInitOperandUsesInLoop=*/
                true, [&](OpBuilder &, Location, ArrayRef<BlockArgument>) {
                  return SmallVector<Value>{stored};
                });
    if (failed(newLoop))
      return;
    rewriter.moveOpAfter(write, *newLoop);
    rewriter.modifyOpInPlace(write, [&] {
      write.getValueToStoreMutable().assign((*newLoop)->getResults().back());
    });
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
    rewriter.eraseOp(op);
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
