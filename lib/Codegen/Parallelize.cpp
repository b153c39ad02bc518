//===- Parallelize.cpp - linalg ops into parallel and cache tiles ---------===//
//
// CPU step before register tiling: every linalg op at the top of a function
// body becomes an scf.forall over one of its parallel loops (the pipeline
// turns the loops into OpenMP), and a contraction is also blocked for the
// caches (columns per thread, a block of its reduction per pass). Tiling is
// the upstream TilingInterface's (scf::tileUsingSCF); this file only chooses
// the loops and sizes. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_PARALLELIZE
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

using utils::IteratorType;

/// Whether the body of `op` has effects other than reads (a run-time check,
/// cf.assert): such an op stays out of parallel loops, because a check that
/// reports to the caller must return from a function body.
bool hasWritingBody(Operation *op) {
  return op
      ->walk([&](Operation *nested) {
        if (nested == op)
          return WalkResult::advance();
        auto effects = dyn_cast<MemoryEffectOpInterface>(nested);
        if (!effects)
          return nested->hasTrait<OpTrait::HasRecursiveMemoryEffects>()
                     ? WalkResult::advance()
                     : WalkResult::interrupt();
        return effects.onlyHasEffect<MemoryEffects::Read>() ||
                       effects.hasNoEffect()
                   ? WalkResult::advance()
                   : WalkResult::interrupt();
      })
      .wasInterrupted();
}

/// Tiles `op` with `tileSizes` (0: not tiled) into loops of `type`; returns
/// the tiled op, or null if nothing was tiled.
linalg::LinalgOp tile(RewriterBase &rewriter, linalg::LinalgOp op,
                      ArrayRef<OpFoldResult> tileSizes,
                      scf::SCFTilingOptions::LoopType type) {
  scf::SCFTilingOptions options;
  options.setLoopType(type);
  options.setTileSizes(tileSizes);
  rewriter.setInsertionPoint(op);
  FailureOr<scf::SCFTilingResult> result = scf::tileUsingSCF(
      rewriter, cast<TilingInterface>(op.getOperation()), options);
  if (failed(result))
    return nullptr;
  rewriter.replaceOp(op, result->replacements);
  return dyn_cast<linalg::LinalgOp>(result->tiledOps.front());
}

struct ParallelizePass : snapkv::impl::ParallelizeBase<ParallelizePass> {
  using Base::Base;

  void runOnOperation() override {
    if (chunks < 1 || columns < 1 || reductionBlock < 1) {
      emitError(getOperation().getLoc())
          << "snapkv-parallelize: chunks, columns and reduction-block must "
             "be positive";
      return signalPassFailure();
    }
    SmallVector<linalg::LinalgOp> ops;
    for (Operation &op : getOperation().getBody().getOps())
      if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op))
        if (linalgOp.hasPureTensorSemantics() && linalgOp.getNumLoops() > 0 &&
            !hasWritingBody(linalgOp))
          ops.push_back(linalgOp);
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp op : ops) {
      if (linalg::isaContractionOpInterface(op) &&
          tileContraction(rewriter, op))
        continue;
      if (llvm::any_of(op.getStaticLoopRanges(), ShapedType::isDynamic))
        splitOutermost(rewriter, op);
    }
  }

  /// A contraction with a static innermost parallel loop (the vector of the
  /// register tile): a parallel batch loop if it has one, else blocks of
  /// `columns` of that loop, go to the threads; the innermost reduction is
  /// taken `reductionBlock` steps per pass, so that the block of the
  /// right-hand operand a thread works on stays in its caches while every
  /// row passes over it. Summation order is unchanged (the blocks run in
  /// order, each adding to the partial sums of the last).
  bool tileContraction(RewriterBase &rewriter, linalg::LinalgOp op) {
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    SmallVector<IteratorType> iters = op.getIteratorTypesArray();
    std::optional<unsigned> vectorDim, rowDim, batchDim, reduction;
    for (int64_t d = ranges.size() - 1; d >= 0; --d) {
      if (iters[d] == IteratorType::reduction) {
        if (!reduction)
          reduction = d;
      } else if (!vectorDim) {
        vectorDim = d;
      } else if (!rowDim) {
        rowDim = d;
      } else if (ranges[d] != 1 && !ShapedType::isDynamic(ranges[d])) {
        batchDim = d;
      }
    }
    if (!vectorDim || !reduction || ShapedType::isDynamic(ranges[*vectorDim]))
      return false;
    MLIRContext *ctx = &getContext();
    SmallVector<int64_t> sizes(ranges.size(), 0);
    // One row (a decode step's vector x matrix product) reads each element
    // of the matrix once: there is nothing to keep in the caches, and a
    // static reduction lets snapkv-vectorize read the matrix row by row.
    bool oneRow = llvm::all_of(llvm::enumerate(ranges), [&](auto it) {
      auto [d, range] = it;
      return d == *vectorDim || d == *reduction || range == 1;
    });
    // Column blocks: `columns`, halved (down to 64) until there are at
    // least four, so that narrow projections still go to several threads.
    int64_t block = columns;
    int64_t width = ranges[*vectorDim];
    while (block > 64 && width / block < 4)
      block /= 2;
    // A block that does not divide the columns leaves a partial last block,
    // and then every block's size is dynamic: its register tiles would take
    // the rows one at a time. A smaller block of whole vectors that divides
    // them keeps the sizes static (576 columns: 6 blocks of 96, not 128).
    if (width % block != 0)
      for (int64_t smaller = block - block % 32; smaller >= 32; smaller -= 32)
        if (width % smaller == 0) {
          block = smaller;
          break;
        }
    if (batchDim)
      sizes[*batchDim] = 1;
    else if (width > block)
      sizes[*vectorDim] = block;
    else
      return false;
    linalg::LinalgOp tiled =
        tile(rewriter, op, getAsIndexOpFoldResult(ctx, sizes),
             scf::SCFTilingOptions::LoopType::ForallOp);
    if (!tiled)
      return false;
    int64_t depth = tiled.getStaticLoopRanges()[*reduction];
    if (!oneRow &&
        (ShapedType::isDynamic(depth) || depth > 2 * reductionBlock)) {
      SmallVector<int64_t> steps(ranges.size(), 0);
      steps[*reduction] = reductionBlock;
      tile(rewriter, tiled, getAsIndexOpFoldResult(ctx, steps),
           scf::SCFTilingOptions::LoopType::ForOp);
    }
    return true;
  }

  /// An op with at least two dynamic loops (quadratic in the prompt, such as
  /// attention's softmax and Q x K^T): its outermost parallel loop with more
  /// than one iteration is split into at most `chunks` parallel pieces. Ops
  /// linear in the prompt (norms, rotary embeddings, activations, a decode
  /// step's attention) are cheap next to the contractions; splitting them
  /// would cost more (an OpenMP region each, at compile and at run time)
  /// than it saves.
  void splitOutermost(RewriterBase &rewriter, linalg::LinalgOp op) {
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    SmallVector<IteratorType> iters = op.getIteratorTypesArray();
    for (auto [d, it] : llvm::enumerate(iters)) {
      if (it != IteratorType::parallel || ranges[d] == 1)
        continue;
      scf::SCFTilingOptions options;
      options.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp);
      SmallVector<OpFoldResult> threads(ranges.size(),
                                        rewriter.getIndexAttr(0));
      int64_t n = ShapedType::isDynamic(ranges[d])
                      ? chunks
                      : std::min<int64_t>(chunks, ranges[d]);
      threads[d] = rewriter.getIndexAttr(n);
      options.setNumThreads(threads);
      rewriter.setInsertionPoint(op);
      FailureOr<scf::SCFTilingResult> result = scf::tileUsingSCF(
          rewriter, cast<TilingInterface>(op.getOperation()), options);
      if (succeeded(result))
        rewriter.replaceOp(op, result->replacements);
      return;
    }
  }
};

} // namespace
