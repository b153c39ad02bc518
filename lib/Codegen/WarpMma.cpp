//===- WarpMma.cpp - a block's f16/bf16 contraction as warp-level MMA -----===//
//
// A key tile's logits (keys x window rows, summed over the head dim) are a
// matrix product. With f16 or bf16 operands each warp computes 16 keys of it
// as vector.contracts of the m16n8k16 shape, keys as the left operand, which
// snapkv-gpu-mma-sync lowers to mma.sync. The same vector code runs on the
// CPU in the kernels' emulation.
//
//===----------------------------------------------------------------------===//

#include "WarpMma.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Vector/Transforms/LoweringPatterns.h"
#include "mlir/Dialect/Vector/Transforms/VectorRewritePatterns.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;
using namespace mlir::snapkv;

namespace {

/// The loops of an MMA contraction: `m` (rhs only, the MMA's rows, split
/// over the warps), `n` (lhs only, the MMA's columns) and `k` (reduction).
struct MmaLoops {
  unsigned m, n, k;
};

std::optional<MmaLoops> mmaLoops(linalg::LinalgOp op) {
  if (op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 ||
      !op.hasPureTensorSemantics() || !linalg::isaContractionOpInterface(op))
    return std::nullopt;
  auto elem = [](Value v) { return getElementTypeOrSelf(v.getType()); };
  Type lhs = elem(op.getDpsInputs()[0]);
  if (!isa<Float16Type, BFloat16Type>(lhs) ||
      lhs != elem(op.getDpsInputs()[1]) || !elem(op.getDpsInits()[0]).isF32())
    return std::nullopt;
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (llvm::any_of(ranges, ShapedType::isDynamic))
    return std::nullopt;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  if (failed(dims) || dims->k.size() != 1 || dims->m.empty() || dims->n.empty())
    return std::nullopt;
  MmaLoops loops{dims->n.back(), dims->m.back(), dims->k.front()};
  if (ranges[loops.m] % kMmaM || ranges[loops.n] % kMmaN ||
      ranges[loops.k] % kMmaK)
    return std::nullopt;
  // One warp per 16 rows, at most 1024 threads per block.
  if (ranges[loops.m] / kMmaM * 32 > 1024)
    return std::nullopt;
  return loops;
}

/// Tensor-core instruction shapes: contractions [m, n, k] -> [16, 8, 16];
/// the accumulators they write, [16, 8]; a read, the slices its users take.
std::optional<SmallVector<int64_t>> nativeShape(Operation *op) {
  if (auto contract = dyn_cast<vector::ContractionOp>(op)) {
    AffineMap acc = contract.getIndexingMapsArray()[2];
    if (contract.getIteratorTypes().size() != 3 || acc.getNumResults() != 2)
      return std::nullopt;
    SmallVector<int64_t> shape(3, kMmaK);
    shape[acc.getDimPosition(0)] = kMmaM;
    shape[acc.getDimPosition(1)] = kMmaN;
    return shape;
  }
  if (auto write = dyn_cast<vector::TransferWriteOp>(op)) {
    if (write.getVectorType().getRank() != 2)
      return std::nullopt;
    return SmallVector<int64_t>{kMmaM, kMmaN};
  }
  if (auto read = dyn_cast<vector::TransferReadOp>(op)) {
    VectorType slice;
    for (Operation *user : read->getUsers()) {
      auto extract = dyn_cast<vector::ExtractStridedSliceOp>(user);
      if (!extract || (slice && slice != extract.getType()))
        return std::nullopt;
      slice = extract.getType();
    }
    if (!slice)
      return std::nullopt;
    return llvm::to_vector(slice.getShape());
  }
  return std::nullopt;
}

/// The MMA's rows come from its left operand: swap the operands of a
/// contraction whose lhs does not index the accumulator's first dimension.
struct KeysAsLhs : OpRewritePattern<vector::ContractionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(vector::ContractionOp op,
                                PatternRewriter &rewriter) const override {
    SmallVector<AffineMap> maps = op.getIndexingMapsArray();
    if (maps[2].getNumResults() != 2 ||
        maps[0].isFunctionOfDim(maps[2].getDimPosition(0)))
      return failure();
    rewriter.replaceOpWithNewOp<vector::ContractionOp>(
        op, op.getRhs(), op.getLhs(), op.getAcc(),
        rewriter.getAffineMapArrayAttr({maps[1], maps[0], maps[2]}),
        op.getIteratorTypes(), op.getKind());
    return success();
  }
};

} // namespace

bool snapkv::isWarpMmaContraction(linalg::LinalgOp op) {
  return mmaLoops(op).has_value();
}

LogicalResult snapkv::distributeToWarps(RewriterBase &rewriter,
                                        linalg::LinalgOp op) {
  std::optional<MmaLoops> loops = mmaLoops(op);
  if (!loops)
    return op->emitError(
        "snapkv-gpu-distribute: not an f16/bf16 MMA contraction");
  MLIRContext *ctx = rewriter.getContext();
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();

  // 16 rows per warp.
  rewriter.setInsertionPoint(op);
  SmallVector<OpFoldResult> warpCounts(ranges.size(), rewriter.getIndexAttr(0));
  warpCounts[loops->m] = rewriter.getIndexAttr(ranges[loops->m] / kMmaM);
  scf::SCFTilingOptions perWarp;
  perWarp.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp);
  perWarp.setNumThreads(warpCounts);
  perWarp.setMapping(
      {gpu::GPUWarpMappingAttr::get(ctx, gpu::MappingId::LinearDim0)});
  FailureOr<scf::SCFTilingResult> warps = scf::tileUsingSCF(
      rewriter, cast<TilingInterface>(op.getOperation()), perWarp);
  if (failed(warps))
    return op->emitError("snapkv-gpu-distribute: could not split the "
                         "contraction over the warps");
  rewriter.replaceOp(op, warps->replacements);

  // One position of every other parallel loop at a time.
  auto warpOp = cast<linalg::LinalgOp>(warps->tiledOps.front());
  SmallVector<OpFoldResult> steps(ranges.size(), rewriter.getIndexAttr(0));
  for (auto [d, it] : llvm::enumerate(op.getIteratorTypesArray()))
    if (it == utils::IteratorType::parallel && d != loops->m && d != loops->n &&
        ranges[d] != 1)
      steps[d] = rewriter.getIndexAttr(1);
  linalg::LinalgOp stepOp = warpOp;
  if (llvm::any_of(steps, [](OpFoldResult s) { return !isZeroInteger(s); })) {
    rewriter.setInsertionPoint(warpOp);
    scf::SCFTilingOptions perStep;
    perStep.setTileSizes(steps);
    FailureOr<scf::SCFTilingResult> stepped = scf::tileUsingSCF(
        rewriter, cast<TilingInterface>(warpOp.getOperation()), perStep);
    if (failed(stepped))
      return warpOp->emitError("snapkv-gpu-distribute: could not step "
                               "through the contraction's other loops");
    rewriter.replaceOp(warpOp, stepped->replacements);
    stepOp = cast<linalg::LinalgOp>(stepped->tiledOps.front());
  }

  // A 2-D product [16, n] x k: unit loops dropped, then vector.contract.
  auto generic = dyn_cast<linalg::GenericOp>(stepOp.getOperation());
  if (!generic)
    return stepOp->emitError("snapkv-gpu-distribute: expected a generic "
                             "contraction");
  linalg::ControlDropUnitDims dropUnits;
  dropUnits.rankReductionStrategy =
      linalg::ControlDropUnitDims::RankReductionStrategy::ExtractInsertSlice;
  rewriter.setInsertionPoint(generic);
  FailureOr<linalg::DropUnitDimsResult> dropped =
      linalg::dropUnitDims(rewriter, generic, dropUnits);
  if (succeeded(dropped)) {
    rewriter.replaceOp(generic, dropped->replacements);
    generic = cast<linalg::GenericOp>(dropped->resultOp.getOperation());
  }
  if (generic.getNumLoops() != 3)
    return generic->emitError("snapkv-gpu-distribute: the contraction's "
                              "step is not a 2-D product");
  rewriter.setInsertionPoint(generic);
  FailureOr<linalg::VectorizationResult> vectorized =
      linalg::vectorize(rewriter, generic, {}, {}, false, false, false,
                        /*createNamedContraction=*/true);
  if (failed(vectorized))
    return generic->emitError("snapkv-gpu-distribute: could not vectorise "
                              "the contraction");
  rewriter.replaceOp(generic, vectorized->replacements);

  // 16-bit operands straight into the contraction, broadcasts and transposes
  // folded into its maps, keys as its lhs; then the tensor-core shape.
  auto warpLoop = cast<scf::ForallOp>(warps->loops.front());
  RewritePatternSet contract(ctx);
  vector::populateFoldArithExtensionPatterns(contract);
  vector::populateVectorTransferPermutationMapLoweringPatterns(contract);
  vector::populateVectorReductionToContractPatterns(contract);
  contract.add<KeysAsLhs>(ctx);
  if (failed(applyPatternsGreedily(warpLoop, std::move(contract))))
    return warpLoop->emitError("snapkv-gpu-distribute: the contraction "
                               "patterns did not converge");
  RewritePatternSet unroll(ctx);
  vector::populateVectorUnrollPatterns(
      unroll, vector::UnrollVectorOptions().setNativeShapeFn(nativeShape));
  vector::ExtractStridedSliceOp::getCanonicalizationPatterns(unroll, ctx);
  vector::InsertStridedSliceOp::getCanonicalizationPatterns(unroll, ctx);
  vector::TransferReadOp::getCanonicalizationPatterns(unroll, ctx);
  if (failed(applyPatternsGreedily(warpLoop, std::move(unroll))))
    return warpLoop->emitError("snapkv-gpu-distribute: the MMA unrolling "
                               "did not converge");
  return success();
}
