//===- SnapKVToLinalg.cpp - snapkv ops to tensor-level linalg -------------===//
//
// Replaces snapkv.select / snapkv.score with the formulation of
// Formulation.h. With `tiling=cpu` the pass then tiles each group of
// formulation ops into an scf.forall over its outer parallel axes and fuses
// the group's producers (above all the logits) into the tile, so the logits
// of all heads never exist at once (with keep-logits, those of one (batch,
// query head) do); the loops carry no target-specific attributes and
// become OpenMP loops in --snapkv-cpu-pipeline.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Conversion/SnapKVToLinalg/SnapKVToLinalg.h"
#include "Formulation.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_CONVERTSNAPKVTOLINALG
#include "snapkv/Conversion/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

namespace {

struct SelectLowering : OpConversionPattern<SelectOp> {
  SelectLowering(MLIRContext *ctx, const FormulationOptions &options,
                 SmallVectorImpl<TileGroup> *groups)
      : OpConversionPattern(ctx), options(options), groups(groups) {}
  LogicalResult
  matchAndRewrite(SelectOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Formulation f(rewriter, op.getLoc(), SelectShape::get(op), options);
    SmallVector<Value> results =
        f.select(adaptor.getQueries(), adaptor.getKeys(), adaptor.getValues(),
                 op->getResultTypes());
    if (groups)
      llvm::append_range(*groups, f.groups());
    rewriter.replaceOp(op, results);
    return success();
  }
  FormulationOptions options;
  SmallVectorImpl<TileGroup> *groups;
};

struct ScoreLowering : OpConversionPattern<ScoreOp> {
  ScoreLowering(MLIRContext *ctx, const FormulationOptions &options,
                SmallVectorImpl<TileGroup> *groups)
      : OpConversionPattern(ctx), options(options), groups(groups) {}
  LogicalResult
  matchAndRewrite(ScoreOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Formulation f(rewriter, op.getLoc(), SelectShape::get(op), options);
    SmallVector<Value> results =
        f.score(adaptor.getQueries(), adaptor.getKeys(), op->getResultTypes());
    if (groups)
      llvm::append_range(*groups, f.groups());
    rewriter.replaceOp(op, results);
    return success();
  }
  FormulationOptions options;
  SmallVectorImpl<TileGroup> *groups;
};

/// Whether `l` and `r` hold the same values: the same SSA value, fills of
/// the same constant (into any tensor of one type), or the same slice.
bool sameValues(Value l, Value r) {
  if (l == r)
    return true;
  if (l.getType() != r.getType())
    return false;
  auto lf = l.getDefiningOp<linalg::FillOp>(),
       rf = r.getDefiningOp<linalg::FillOp>();
  if (lf && rf)
    return lf.getInputs()[0] == rf.getInputs()[0];
  auto ls = l.getDefiningOp<tensor::ExtractSliceOp>(),
       rs = r.getDefiningOp<tensor::ExtractSliceOp>();
  return ls && rs &&
         OperationEquivalence::isEquivalentTo(
             ls, rs, OperationEquivalence::exactValueMatch, nullptr,
             OperationEquivalence::IgnoreLocations);
}

/// Tile-and-fuse fuses a producer once per slice that reads it. CSE merges
/// identical copies, but not the copy that writes the loop's output (a
/// producer yielded for users outside the tile: the logits kept for the
/// votes) and one that writes a fresh tensor, which would compute the tile
/// twice. Same op, same inputs, inits with the same values: the first copy
/// whose value reaches all users of the other replaces it.
void mergeFusedCopies(RewriterBase &rewriter, Block &body) {
  SmallVector<linalg::GenericOp> ops(body.getOps<linalg::GenericOp>());
  DominanceInfo dominance;
  llvm::DenseMap<Value, Value> inRegion;
  auto equivalent = [&](Value l, Value r) {
    return success(sameValues(l, r) || inRegion.lookup(l) == r);
  };
  auto mark = [&](Value l, Value r) { inRegion[l] = r; };
  auto reachesUsers = [&](Operation *from, Operation *to) {
    return llvm::all_of(to->getUsers(), [&](Operation *user) {
      return dominance.properlyDominates(from, user);
    });
  };
  llvm::SmallPtrSet<Operation *, 8> erased;
  for (auto [i, a] : llvm::enumerate(ops)) {
    for (linalg::GenericOp c : ArrayRef(ops).drop_front(i + 1)) {
      if (erased.contains(a) || erased.contains(c))
        continue;
      inRegion.clear();
      if (!OperationEquivalence::isEquivalentTo(
              a, c, equivalent, mark, OperationEquivalence::IgnoreLocations))
        continue;
      auto [keep, drop] =
          reachesUsers(c, a) ? std::pair{c, a} : std::pair{a, c};
      if (!reachesUsers(keep, drop))
        continue;
      rewriter.replaceOp(drop, keep->getResults());
      erased.insert(drop);
    }
  }
}

/// Tiles `group.root` into an scf.forall and fuses the group's producers.
/// A producer that is also used outside the group is yielded by the loop
/// (computed once, in its tile, and used from there). With `blocks` the loop
/// is mapped to GPU blocks, its innermost tiled loop to x (the largest grid
/// dimension).
LogicalResult tileGroup(RewriterBase &rewriter, const TileGroup &group,
                        bool blocks) {
  llvm::SmallPtrSet<Operation *, 8> members(group.fuse.begin(),
                                            group.fuse.end());
  members.insert(group.root);
  llvm::SmallPtrSet<Operation *, 4> usedOutside;
  // A tensor.dim is no use of the values: it is redirected to the init
  // operand below.
  for (Operation *op : group.fuse)
    for (Operation *user : op->getUsers())
      if (!members.contains(user) && !isa<tensor::DimOp>(user))
        usedOutside.insert(op);

  scf::SCFTilingOptions tiling;
  tiling.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp);
  tiling.setTileSizes(
      getAsIndexOpFoldResult(rewriter.getContext(), group.tileSizes));
  if (blocks) {
    int64_t tiled =
        llvm::count_if(group.tileSizes, [](int64_t size) { return size != 0; });
    if (tiled > 3)
      return group.root->emitError(
          "snapkv: a GPU block group tiles more than 3 loops");
    SmallVector<Attribute> mapping;
    for (int64_t i = tiled - 1; i >= 0; --i)
      mapping.push_back(gpu::GPUBlockMappingAttr::get(
          rewriter.getContext(), static_cast<gpu::MappingId>(i)));
    tiling.setMapping(mapping);
  }
  scf::SCFTileAndFuseOptions options;
  options.setTilingOptions(tiling);
  options.setFusionControlFn(
      [&](tensor::ExtractSliceOp, OpResult producer,
          bool) -> std::optional<scf::SCFTileAndFuseOptions::ControlFnResult> {
        if (!group.fuse.contains(producer.getOwner()))
          return std::nullopt;
        return scf::SCFTileAndFuseOptions::ControlFnResult{
            usedOutside.contains(producer.getOwner())};
      });
  rewriter.setInsertionPoint(group.root);
  FailureOr<scf::SCFTileAndFuseResult> result =
      scf::tileConsumerAndFuseProducersUsingSCF(
          rewriter, cast<TilingInterface>(group.root), options);
  if (failed(result))
    return group.root->emitError("snapkv: could not tile the formulation");
  // Fusion leaves the slices it fused through in place; drop the dead ones
  // before the loop's results replace the producers they slice.
  for (LoopLikeOpInterface loop : result->loops) {
    SmallVector<Operation *> deadSlices;
    loop->walk([&](tensor::ExtractSliceOp slice) {
      if (slice->use_empty())
        deadSlices.push_back(slice);
    });
    for (Operation *slice : deadSlices)
      rewriter.eraseOp(slice);
  }
  if (!result->loops.empty())
    mergeFusedCopies(rewriter, *result->loops.back()->getRegion(0).begin());
  for (auto [original, replacement] : result->replacements) {
    // Sizes of a fused producer's result are the sizes of its init operand;
    // read them there, so that nothing before the loop uses the loop.
    auto dps = original.getDefiningOp<DestinationStyleOpInterface>();
    for (OpOperand &use : llvm::make_early_inc_range(original.getUses()))
      if (auto dim = dyn_cast<tensor::DimOp>(use.getOwner()); dim && dps)
        rewriter.modifyOpInPlace(dim, [&] {
          use.set(
              dps.getDpsInitOperand(cast<OpResult>(use.get()).getResultNumber())
                  ->get());
        });
    rewriter.replaceAllUsesWith(original, replacement);
  }
  // The untiled ops are dead now (a yielded producer's other users read the
  // loop's result); erase them so nothing refers back into the loop.
  SmallVector<Operation *> dead = {group.root};
  for (Operation *op : result->fusedProducers)
    dead.push_back(op);
  for (Operation *op : dead)
    if (op->use_empty())
      rewriter.eraseOp(op);
  return success();
}

struct ConvertSnapKVToLinalgPass
    : snapkv::impl::ConvertSnapKVToLinalgBase<ConvertSnapKVToLinalgPass> {
  using Base::Base;

  void runOnOperation() override {
    if (keyTile < 1 || chunk < 0) {
      emitError(getOperation()->getLoc())
          << "convert-snapkv-to-linalg: key-tile must be positive and chunk "
             "non-negative";
      return signalPassFailure();
    }
    if (tiling != "none" && tiling != "cpu" && tiling != "gpu") {
      emitError(getOperation()->getLoc())
          << "convert-snapkv-to-linalg: tiling must be 'none', 'cpu' or "
             "'gpu', got '"
          << tiling << "'";
      return signalPassFailure();
    }
    bool gpu = tiling == "gpu";
    FormulationOptions options;
    options.gpu = gpu;
    options.keepLogits = tiling == "cpu" && keepLogits;
    options.keyTile = keyTile;
    options.autoChunk = chunk == 0;
    if (chunk != 0)
      options.chunk = chunk;
    SmallVector<TileGroup> groups;
    RewritePatternSet patterns(&getContext());
    patterns.add<SelectLowering, ScoreLowering>(
        &getContext(), options, tiling == "none" ? nullptr : &groups);
    ConversionTarget target(getContext());
    target.addIllegalDialect<SnapKVDialect>();
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      return signalPassFailure();

    IRRewriter rewriter(&getContext());
    for (const TileGroup &group : llvm::reverse(groups))
      if (failed(tileGroup(rewriter, group, gpu)))
        return signalPassFailure();
  }
};

} // namespace

void mlir::snapkv::populateSnapKVToLinalgPatterns(
    RewritePatternSet &patterns, const SnapKVToLinalgOptions &options) {
  patterns.add<SelectLowering, ScoreLowering>(patterns.getContext(), options,
                                              nullptr);
}
