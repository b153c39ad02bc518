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
#include "snapkv/Codegen/Q41Contraction.h"
#include "snapkv/Codegen/ScaledContraction.h"

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
    if (chunks < 1 || columns < 1 || reductionBlock < 1 || reductionParts < 0 ||
        rowBlock < 0) {
      emitError(getOperation().getLoc())
          << "snapkv-parallelize: chunks, columns and reduction-block must "
             "be positive, reduction-parts and row-block non-negative";
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
      if ((linalg::isaContractionOpInterface(op) ||
           snapkv::isScaledContraction(op) ||
           snapkv::isInt8ScaledContraction(op) || snapkv::isQ41Product(op)) &&
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
    // The vector x Q8_0 matrix product's reduction is two loops (k / 32,
    // k % 32): its parts are whole blocks of 32 rows.
    bool scaled = snapkv::isScaledContraction(op) ||
                  snapkv::isInt8ScaledContraction(op) ||
                  snapkv::isQ41Product(op);
    bool oneRow = llvm::all_of(llvm::enumerate(ranges), [&](auto it) {
      auto [d, range] = it;
      return d == *vectorDim || d == *reduction || range == 1 ||
             (scaled && iters[d] == IteratorType::reduction);
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
    unsigned blocks = std::distance(iters.begin(),
                                    llvm::find(iters, IteratorType::reduction));
    if (oneRow && !batchDim &&
        splitReduction(rewriter, op, scaled ? blocks : *reduction,
                       scaled ? 1 : 32))
      return true;
    if (batchDim) {
      sizes[*batchDim] = 1;
    } else if (width > block) {
      sizes[*vectorDim] = block;
      // Rows in blocks too: more, equal pieces for the threads (three column
      // blocks over two threads: one does two), and each block's partial
      // sums stay in the caches between the passes over the reduction.
      if (rowDim && rowBlock > 0 &&
          (ShapedType::isDynamic(ranges[*rowDim]) ||
           ranges[*rowDim] > rowBlock))
        sizes[*rowDim] = rowBlock;
    } else {
      return false;
    }
    linalg::LinalgOp tiled =
        batchDim
            ? tileFusingPacks(rewriter, op, getAsIndexOpFoldResult(ctx, sizes))
            : tile(rewriter, op, getAsIndexOpFoldResult(ctx, sizes),
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

  /// Tiles `op` into an scf.forall like `tile`, and fuses into it the
  /// transposes that produce its inputs (snapkv-pack-weights' weight panels):
  /// each thread packs the panels it multiplies, while they are in its
  /// caches, instead of one thread packing the whole weight first.
  linalg::LinalgOp tileFusingPacks(RewriterBase &rewriter, linalg::LinalgOp op,
                                   ArrayRef<OpFoldResult> tileSizes) {
    scf::SCFTileAndFuseOptions options;
    options.tilingOptions.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp)
        .setTileSizes(tileSizes);
    options.setFusionControlFn(
        [&](tensor::ExtractSliceOp, OpResult producer, bool isDestination)
            -> std::optional<scf::SCFTileAndFuseOptions::ControlFnResult> {
          if (isDestination || !isa<linalg::TransposeOp>(producer.getOwner()))
            return std::nullopt;
          return scf::SCFTileAndFuseOptions::ControlFnResult{};
        });
    rewriter.setInsertionPoint(op);
    FailureOr<scf::SCFTileAndFuseResult> result =
        scf::tileConsumerAndFuseProducersUsingSCF(
            rewriter, cast<TilingInterface>(op.getOperation()), options);
    if (failed(result) || result->tiledAndFusedOps.empty())
      return nullptr;
    for (OpResult value : op->getResults())
      rewriter.replaceAllUsesWith(value, result->replacements.lookup(value));
    for (Operation *producer : result->fusedProducers)
      if (producer->use_empty())
        rewriter.eraseOp(producer);
    rewriter.eraseOp(op);
    // A fused transpose writes a slice of a whole-weight tensor.empty: a
    // tile-sized empty instead, so the whole packed copy is never allocated.
    for (Operation *fused : llvm::drop_begin(result->tiledAndFusedOps)) {
      auto transpose = dyn_cast<linalg::TransposeOp>(fused);
      if (!transpose)
        continue;
      auto slice = transpose.getInit().getDefiningOp<tensor::ExtractSliceOp>();
      if (!slice || !slice.getSource().getDefiningOp<tensor::EmptyOp>())
        continue;
      rewriter.setInsertionPoint(slice);
      rewriter.replaceOpWithNewOp<tensor::EmptyOp>(
          slice, slice.getType().getShape(), slice.getType().getElementType(),
          slice.getDynamicSizes());
    }
    return dyn_cast<linalg::LinalgOp>(result->tiledAndFusedOps.front());
  }

  /// A one-row contraction (a decode step's vector x matrix product) split
  /// along its reduction into `reductionParts` parallel parts, each a
  /// contiguous block of the matrix's rows summed into its own zeroed row of
  /// a `[parts, ...result]` tensor; the parts are then added to the op's init
  /// in part order. A thread streams contiguous blocks of the matrix instead
  /// of a column block of every row. The number of parts is fixed, so the
  /// result does not depend on the number of threads. Upstream's
  /// partial-reduction tiling (PartialReductionOuterParallel) puts the parts
  /// innermost (`[...result, parts]`): each part's row is strided and its
  /// vector accumulation falls apart (test/Codegen/parallelize.mlir).
  /// False (nothing changed) if no number of parts from `reductionParts`
  /// down to 2 divides the reduction into parts of at least `minSteps` steps.
  bool splitReduction(RewriterBase &rewriter, linalg::LinalgOp op,
                      unsigned reduction, int64_t minSteps) {
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    int64_t depth = ranges[reduction];
    if (ShapedType::isDynamic(depth) || op->getNumResults() != 1 ||
        llvm::any_of(ranges, ShapedType::isDynamic))
      return false;
    int64_t parts = reductionParts;
    while (parts >= 2 && (depth % parts != 0 || depth / parts < minSteps))
      --parts;
    if (parts < 2)
      return false;
    Location loc = op.getLoc();
    auto resultTy = cast<RankedTensorType>(op->getResult(0).getType());
    Type elem = resultTy.getElementType();
    SmallVector<int64_t> partialShape = {parts};
    llvm::append_range(partialShape, resultTy.getShape());
    rewriter.setInsertionPoint(op);
    Value partials = tensor::EmptyOp::create(rewriter, loc, partialShape, elem);
    auto forall = scf::ForallOp::create(
        rewriter, loc, ArrayRef<OpFoldResult>{rewriter.getIndexAttr(parts)},
        ValueRange{partials}, /*mapping=*/std::nullopt);
    {
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPoint(forall.getTerminator());
      Value part = forall.getInductionVar(0);
      int64_t rank = resultTy.getRank();
      SmallVector<OpFoldResult> rowOffsets(rank + 1, rewriter.getIndexAttr(0));
      rowOffsets[0] = part;
      SmallVector<OpFoldResult> rowSizes = {rewriter.getIndexAttr(1)};
      for (int64_t size : resultTy.getShape())
        rowSizes.push_back(rewriter.getIndexAttr(size));
      SmallVector<OpFoldResult> strides(rank + 1, rewriter.getIndexAttr(1));
      Value row = tensor::ExtractSliceOp::create(rewriter, loc, resultTy,
                                                 forall.getRegionIterArgs()[0],
                                                 rowOffsets, rowSizes, strides);
      Value zero =
          arith::ConstantOp::create(rewriter, loc, rewriter.getZeroAttr(elem));
      Value zeroed =
          linalg::FillOp::create(rewriter, loc, zero, row).getResult(0);
      SmallVector<OpFoldResult> offsets(ranges.size(),
                                        rewriter.getIndexAttr(0));
      SmallVector<OpFoldResult> sizes;
      for (int64_t range : ranges)
        sizes.push_back(rewriter.getIndexAttr(range));
      offsets[reduction] = affine::makeComposedFoldedAffineApply(
          rewriter, loc, rewriter.getAffineDimExpr(0) * (depth / parts),
          {part});
      sizes[reduction] = rewriter.getIndexAttr(depth / parts);
      FailureOr<TilingResult> tiled =
          cast<TilingInterface>(op.getOperation())
              .getTiledImplementation(rewriter, offsets, sizes);
      if (failed(tiled) || tiled->tiledOps.size() != 1) {
        rewriter.eraseOp(forall);
        return false;
      }
      auto tiledOp = cast<linalg::LinalgOp>(tiled->tiledOps.front());
      rewriter.modifyOpInPlace(
          tiledOp, [&] { tiledOp.getDpsInitsMutable()[0].assign(zeroed); });
      rewriter.setInsertionPointToStart(forall.getTerminator().getBody());
      tensor::ParallelInsertSliceOp::create(
          rewriter, loc, tiledOp->getResult(0), forall.getRegionIterArgs()[0],
          rowOffsets, rowSizes, strides);
    }
    // init + part 0 + part 1 + ...: the parts in order, whatever thread
    // computed them.
    SmallVector<AffineExpr> rowDims;
    for (int64_t d = 1; d <= resultTy.getRank(); ++d)
      rowDims.push_back(rewriter.getAffineDimExpr(d));
    MLIRContext *ctx = &getContext();
    unsigned numDims = resultTy.getRank() + 1;
    SmallVector<AffineMap> maps = {
        AffineMap::getMultiDimIdentityMap(numDims, ctx),
        AffineMap::get(numDims, 0, rowDims, ctx)};
    SmallVector<IteratorType> iters(numDims, IteratorType::parallel);
    iters[0] = IteratorType::reduction;
    auto merge = linalg::GenericOp::create(
        rewriter, loc, resultTy, forall.getResult(0),
        op.getDpsInitOperand(0)->get(), maps, iters,
        [](OpBuilder &b, Location l, ValueRange args) {
          Value sum = arith::AddFOp::create(b, l, args[1], args[0]);
          linalg::YieldOp::create(b, l, sum);
        });
    rewriter.replaceOp(op, merge->getResults());
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
