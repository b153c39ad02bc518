//===- GPUDistribute.cpp - ops of a GPU block loop over its threads -------===//
//
// Inside each scf.forall mapped to GPU blocks, every linalg op is tiled into
// an scf.forall mapped to threads with the upstream TilingInterface tiling:
// parallel loops over the threads (innermost loop on consecutive threads),
// or, for a long reduction with little parallel work, a partial reduction
// whose per-thread results are merged in thread order. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/GPUUtils.h"
#include "snapkv/Codegen/Passes.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "WarpMma.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_GPUDISTRIBUTE
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {

using utils::IteratorType;

/// Threads per loop of `op`, 0 for a loop that is not split: from the
/// innermost parallel loop outwards, each takes as many of the remaining
/// threads as it has iterations (a dynamic loop takes all). An op without
/// parallel work still gets a one-thread loop, so that one thread (not
/// every thread of the block) runs it.
SmallVector<int64_t> parallelThreads(linalg::LinalgOp op, int64_t threads) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  SmallVector<IteratorType> iters = op.getIteratorTypesArray();
  SmallVector<int64_t> numThreads(ranges.size(), 0);
  int64_t remaining = threads;
  for (int64_t d = ranges.size() - 1; d >= 0 && remaining > 1; --d) {
    if (iters[d] != IteratorType::parallel || ranges[d] == 1)
      continue;
    int64_t t = ShapedType::isDynamic(ranges[d])
                    ? remaining
                    : std::min(ranges[d], remaining);
    numThreads[d] = t;
    remaining /= t;
  }
  if (llvm::all_of(numThreads, [](int64_t t) { return t == 0; }))
    for (auto [d, it] : llvm::enumerate(iters))
      if (it == IteratorType::parallel) {
        numThreads[d] = 1;
        break;
      }
  return numThreads;
}

/// The reduction loop to split over the threads, if `op` has little
/// parallel work and one long (or dynamic) reduction.
std::optional<unsigned> partialReductionLoop(linalg::LinalgOp op,
                                             int64_t threads) {
  if (!isa<PartialReductionOpInterface>(op.getOperation()) ||
      op.getNumDpsInits() != 1)
    return std::nullopt;
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  SmallVector<IteratorType> iters = op.getIteratorTypesArray();
  int64_t parallel = 1;
  std::optional<unsigned> reduction;
  for (auto [d, it] : llvm::enumerate(iters)) {
    if (it == IteratorType::parallel) {
      if (ShapedType::isDynamic(ranges[d]))
        return std::nullopt;
      parallel *= ranges[d];
    } else if (reduction) {
      return std::nullopt; // one reduction loop only
    } else {
      reduction = d;
    }
  }
  if (!reduction || parallel * 4 > threads)
    return std::nullopt;
  int64_t extent = ranges[*reduction];
  if (!ShapedType::isDynamic(extent) && extent < 2 * threads)
    return std::nullopt;
  return reduction;
}

/// `#gpu.thread<linear_dim_*>` for the split loops, the innermost one on
/// linear_dim_0 (consecutive threads).
SmallVector<Attribute> threadMapping(MLIRContext *ctx,
                                     ArrayRef<int64_t> numThreads) {
  int64_t split = llvm::count_if(numThreads, [](int64_t t) { return t != 0; });
  SmallVector<Attribute> mapping;
  for (int64_t i = split - 1; i >= 0; --i)
    mapping.push_back(gpu::GPUThreadMappingAttr::get(
        ctx, static_cast<gpu::MappingId>(
                 static_cast<int64_t>(gpu::MappingId::LinearDim0) + i)));
  return mapping;
}

LogicalResult distributeOp(RewriterBase &rewriter, linalg::LinalgOp op,
                           int64_t threads) {
  MLIRContext *ctx = rewriter.getContext();
  rewriter.setInsertionPoint(op);
  scf::SCFTilingOptions tiling;
  tiling.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp);
  if (std::optional<unsigned> reduction = partialReductionLoop(op, threads)) {
    SmallVector<int64_t> numThreads(op.getNumLoops(), 0);
    numThreads[*reduction] = threads;
    tiling.setNumThreads(getAsIndexOpFoldResult(ctx, numThreads));
    tiling.setMapping(threadMapping(ctx, numThreads));
    tiling.setReductionTilingStrategy(
        ReductionTilingStrategy::PartialReductionOuterParallel);
    tiling.setReductionDims({*reduction});
    FailureOr<scf::SCFTilingResult> result = scf::tileUsingSCF(
        rewriter, cast<TilingInterface>(op.getOperation()), tiling);
    if (failed(result))
      return op->emitError("snapkv-gpu-distribute: could not split the "
                           "reduction over the threads");
    rewriter.replaceOp(op, result->replacements);
    return success();
  }
  SmallVector<int64_t> numThreads = parallelThreads(op, threads);
  if (llvm::all_of(numThreads, [](int64_t t) { return t == 0; }))
    return op->emitError(
        "snapkv-gpu-distribute: an op without parallel loops cannot be "
        "given to one thread");
  tiling.setNumThreads(getAsIndexOpFoldResult(ctx, numThreads));
  tiling.setMapping(threadMapping(ctx, numThreads));
  // The fills that initialise the op's outputs run in the same thread loop
  // (one phase, no extra barrier).
  llvm::SmallPtrSet<Operation *, 2> fills;
  for (Value init : op.getDpsInits())
    if (auto fill = init.getDefiningOp<linalg::FillOp>();
        fill && fill->hasOneUse())
      fills.insert(fill);
  scf::SCFTileAndFuseOptions options;
  options.setTilingOptions(tiling);
  options.setFusionControlFn(
      [&](tensor::ExtractSliceOp, OpResult producer,
          bool) -> std::optional<scf::SCFTileAndFuseOptions::ControlFnResult> {
        if (!fills.contains(producer.getOwner()))
          return std::nullopt;
        return scf::SCFTileAndFuseOptions::ControlFnResult{false};
      });
  FailureOr<scf::SCFTileAndFuseResult> result =
      scf::tileConsumerAndFuseProducersUsingSCF(
          rewriter, cast<TilingInterface>(op.getOperation()), options);
  if (failed(result))
    return op->emitError(
        "snapkv-gpu-distribute: could not split the op over the threads");
  for (auto [original, replacement] : result->replacements)
    rewriter.replaceAllUsesWith(original, replacement);
  for (Operation *dead : result->fusedProducers)
    if (dead->use_empty())
      rewriter.eraseOp(dead);
  if (op->use_empty())
    rewriter.eraseOp(op);
  return success();
}

/// Data movement that bufferisation would turn into copies outside any
/// thread loop becomes ops that the threads share: a pad becomes a fill
/// and an insert; an insert becomes a linalg.copy into the slice (which
/// bufferises in place, so the insert itself moves nothing).
LogicalResult makeMovesStructured(RewriterBase &rewriter, scf::ForallOp block) {
  SmallVector<tensor::PadOp> pads;
  block.walk([&](tensor::PadOp pad) { pads.push_back(pad); });
  for (tensor::PadOp pad : pads) {
    rewriter.setInsertionPoint(pad);
    if (failed(linalg::rewriteInDestinationPassingStyle(rewriter, pad)))
      return pad->emitError("snapkv-gpu-distribute: cannot rewrite the pad");
  }
  SmallVector<tensor::InsertSliceOp> inserts;
  block.walk([&](tensor::InsertSliceOp insert) { inserts.push_back(insert); });
  for (tensor::InsertSliceOp insert : inserts) {
    rewriter.setInsertionPoint(insert);
    Location loc = insert.getLoc();
    Value slice = tensor::ExtractSliceOp::create(
        rewriter, loc, insert.getSourceType(), insert.getDest(),
        insert.getMixedOffsets(), insert.getMixedSizes(),
        insert.getMixedStrides());
    Value copied =
        linalg::CopyOp::create(rewriter, loc, insert.getSource(), slice)
            .getResult(0);
    rewriter.modifyOpInPlace(insert,
                             [&] { insert.getSourceMutable().assign(copied); });
  }
  return success();
}

/// Gives every use of a fill or empty tensor in `block` its own copy of the
/// op. CSE merges identical fills; shared by two ops they would be fused
/// into neither thread loop, and bufferisation would copy them.
void unshareInits(RewriterBase &rewriter, scf::ForallOp block) {
  SmallVector<Operation *> shared;
  block.walk([&](Operation *op) {
    if (isa<linalg::FillOp, tensor::EmptyOp>(op) && !op->hasOneUse() &&
        !isInThreadLoop(op))
      shared.push_back(op);
  });
  for (Operation *op : shared) {
    SmallVector<OpOperand *> uses;
    for (OpOperand &use : op->getUses())
      uses.push_back(&use);
    for (OpOperand *use : llvm::drop_begin(uses)) {
      rewriter.setInsertionPoint(op);
      Operation *clone = rewriter.clone(*op);
      rewriter.modifyOpInPlace(use->getOwner(), [&] {
        use->set(
            clone->getResult(cast<OpResult>(use->get()).getResultNumber()));
      });
    }
  }
}

struct GPUDistributePass : snapkv::impl::GPUDistributeBase<GPUDistributePass> {
  using Base::Base;

  void runOnOperation() override {
    if (threads < 1 || threads > 1024) {
      emitError(getOperation().getLoc())
          << "snapkv-gpu-distribute: threads must be in [1, 1024], got "
          << static_cast<int64_t>(threads);
      return signalPassFailure();
    }
    // A slice of an empty tensor is an empty tensor of the slice's size: no
    // full-size scratch for what a block only needs a tile of.
    {
      RewritePatternSet patterns(&getContext());
      tensor::populateFoldTensorEmptyPatterns(patterns);
      if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
        return signalPassFailure();
    }
    IRRewriter rewriter(&getContext());
    for (scf::ForallOp block : blockLoops(getOperation())) {
      // The block's own configuration (convert-snapkv-to-linalg puts its
      // op's on it), else the pass's options.
      int64_t blockThreads = threads;
      bool useTensorCores = tensorCores;
      if (auto config = block->getAttrOfType<LoweringConfigAttr>(
              "snapkv.lowering_config")) {
        blockThreads = config.getThreads();
        useTensorCores = config.getTensorCores().getValue();
      }
      // Unshared first: an insert and the slice its copy writes read the
      // same destination, and must keep doing so.
      unshareInits(rewriter, block);
      if (failed(makeMovesStructured(rewriter, block)))
        return signalPassFailure();
      // Last op first, so that a consumer takes its fills along; tiling
      // creates ops (fills and merges of partial reductions) that need
      // distributing as well: repeat until every op is in a thread loop.
      while (true) {
        linalg::LinalgOp last;
        block.walk([&](linalg::LinalgOp op) {
          if (!isInThreadLoop(op))
            last = op;
        });
        if (!last)
          break;
        LogicalResult distributed =
            useTensorCores && isWarpMmaContraction(last)
                ? distributeToWarps(rewriter, last)
                : distributeOp(rewriter, last, blockThreads);
        if (failed(distributed))
          return signalPassFailure();
      }
    }
  }
};

} // namespace
