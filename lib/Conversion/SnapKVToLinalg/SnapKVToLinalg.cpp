//===- SnapKVToLinalg.cpp - snapkv ops to tensor-level linalg -------------===//
//
// Replaces snapkv.select / snapkv.score with the formulation of
// Formulation.h, and snapkv.attention tiled through its TilingInterface and
// decomposed (AttentionDecomposition.cpp). On the CPU (a `forall`
// configuration) a select is lowered as its stage ops, each tiled through
// TilingInterface; on GPU blocks the pass writes each kernel's tiling into
// the IR (#snapkv.tile on the root, snapkv.fuse on the producers fused into
// its tile), for snapkv-tile-and-fuse.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Conversion/SnapKVToLinalg/SnapKVToLinalg.h"
#include "Formulation.h"
#include "snapkv/Dialect/SnapKV/IR/SelectDecomposition.h"
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
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_CONVERTSNAPKVTOLINALG
#include "snapkv/Conversion/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

namespace {

/// What each op of the selection emits through the formulation.
SmallVector<Value> emit(Formulation &f, SelectOp op, SelectOp::Adaptor a) {
  return f.select(a.getQueries(), a.getKeys(), a.getValues(),
                  op->getResultTypes());
}
SmallVector<Value> emit(Formulation &f, ScoreOp op, ScoreOp::Adaptor a) {
  return f.score(a.getQueries(), a.getKeys(), op->getResultTypes());
}
SmallVector<Value> emit(Formulation &f, TopPositionsOp,
                        TopPositionsOp::Adaptor a) {
  return {f.topPositions(a.getScores(), a.getInit())};
}
SmallVector<Value> emit(Formulation &f, GatherOp, GatherOp::Adaptor a) {
  return {f.gatherRows(a.getSource(), a.getIndices(), a.getInit())};
}

constexpr StringLiteral kConfigName = "snapkv.lowering_config";

/// How each op is lowered: as its own snapkv.lowering_config says, else
/// untiled with the pass's sizes; and the numbers of the tile groups the ops
/// record (one sequence for the module, after any group already in the IR).
class Lowerings {
public:
  /// `tiles`: stage ops tiled into parallel loops, whose checks precede
  /// their loops and whose lowering is one tile's, untiled.
  Lowerings(const FormulationOptions &defaults, int64_t firstGroup,
            llvm::SmallPtrSet<Operation *, 8> tiles = {})
      : defaults(defaults), nextGroup(firstGroup), tiles(std::move(tiles)) {}

  /// The op's configuration (null: untiled, with the pass's sizes).
  LoweringConfigAttr config(Operation *op) const {
    return op->getAttrOfType<LoweringConfigAttr>(kConfigName);
  }
  FormulationOptions options(Operation *op) const {
    LoweringConfigAttr c = config(op);
    FormulationOptions options = c ? getLoweringOptions(c) : defaults;
    options.checked = tiles.contains(op);
    return options;
  }
  /// The recorder of the op's tile groups: only GPU blocks record them (the
  /// CPU tiles the stage ops through TilingInterface).
  std::optional<TileRecorder> recorder(Operation *op) const {
    LoweringConfigAttr c = config(op);
    if (!c || c.getMapping() != TileMapping::gpu_blocks)
      return std::nullopt;
    return TileRecorder(nextGroup, c);
  }

private:
  FormulationOptions defaults;
  mutable int64_t nextGroup;
  llvm::SmallPtrSet<Operation *, 8> tiles;
};

/// Whether the op has a `forall` (CPU) configuration.
bool onCPU(const Lowerings &lowerings, Operation *op) {
  LoweringConfigAttr config = lowerings.config(op);
  return config && config.getMapping() == TileMapping::forall;
}

/// The ops that lowering `op` created (between `before` and `op`) get its
/// configuration, so that they are lowered as it would have been.
void inheritConfig(Operation *op, Operation *before) {
  Operation *first = before ? before->getNextNode() : &op->getBlock()->front();
  inheritLoweringConfig(
      op, llvm::make_range(first->getIterator(), op->getIterator()));
}

/// snapkv.select, snapkv.score and the stage ops of a decomposed select, each
/// through the formulation, which records its tile groups as its
/// configuration says.
template <typename OpTy>
struct FormulationLowering : OpConversionPattern<OpTy> {
  FormulationLowering(MLIRContext *ctx,
                      std::shared_ptr<const Lowerings> lowerings)
      : OpConversionPattern<OpTy>(ctx), lowerings(std::move(lowerings)) {}
  LogicalResult
  matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    std::optional<TileRecorder> tiles = lowerings->recorder(op);
    Formulation f(rewriter, op.getLoc(), SelectShape::get(op),
                  lowerings->options(op), tiles ? &*tiles : nullptr);
    rewriter.replaceOp(op, emit(f, op, adaptor));
    return success();
  }
  std::shared_ptr<const Lowerings> lowerings;
};

/// Lays the ops that select_adaptive's decomposition created (`created`, in
/// program order) out for GPU blocks: its linalg ops (the floor's threshold
/// and ties, the counts, offsets and placement of each head's rows) become
/// kernels of one block per batch row, as every one of them has the batch
/// as its first, parallel loop. Without a floor, the flattened scores are
/// the pooled scores themselves, a slice of the chunk-padded ones whose
/// flattening would copy on the host: a kernel copies them instead.
void layOutAdaptiveInBlocks(RewriterBase &rewriter,
                            ArrayRef<Operation *> created,
                            TileRecorder &tiles) {
  for (Operation *op : created) {
    if (auto flatten = dyn_cast<tensor::CollapseShapeOp>(op);
        flatten && flatten.getSrc().getDefiningOp<ScoreOp>()) {
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPoint(flatten);
      Location loc = flatten.getLoc();
      Value src = flatten.getSrc();
      Value init = tensor::EmptyOp::create(
          rewriter, loc, tensor::getMixedSizes(rewriter, loc, src),
          flatten.getSrcType().getElementType());
      auto copy = linalg::CopyOp::create(rewriter, loc, src, init);
      rewriter.modifyOpInPlace(
          flatten, [&] { flatten.getSrcMutable().assign(copy.getResult(0)); });
      tiles.record(copy, {1}, {});
      continue;
    }
    auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
    // Fills are fused into the kernel of the op they initialise.
    if (!linalgOp || isa<linalg::FillOp>(op) || linalgOp.getNumLoops() == 0 ||
        linalgOp.getIteratorTypesArray().front() !=
            utils::IteratorType::parallel)
      continue;
    tiles.record(linalgOp, {1}, {});
  }
}

/// snapkv.select_adaptive through its stage ops, which this conversion then
/// lowers like a decomposed select's: on GPU blocks or untiled (the CPU's
/// were decomposed and tiled before, decomposeSelects).
struct AdaptiveLowering : OpConversionPattern<SelectAdaptiveOp> {
  AdaptiveLowering(MLIRContext *ctx, std::shared_ptr<const Lowerings> lowerings)
      : OpConversionPattern(ctx), lowerings(std::move(lowerings)) {}
  LogicalResult
  matchAndRewrite(SelectAdaptiveOp op, OpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Operation *before = op->getPrevNode();
    FailureOr<SmallVector<Value>> stages = op.decomposeOperation(rewriter);
    if (failed(stages))
      return failure();
    inheritConfig(op, before);
    if (std::optional<TileRecorder> tiles = lowerings->recorder(op)) {
      Operation *first =
          before ? before->getNextNode() : &op->getBlock()->front();
      SmallVector<Operation *> created;
      for (Operation &top :
           llvm::make_range(first->getIterator(), op->getIterator()))
        top.walk([&](Operation *nested) { created.push_back(nested); });
      layOutAdaptiveInBlocks(rewriter, created, *tiles);
    }
    rewriter.replaceOp(op, *stages);
    return success();
  }
  std::shared_ptr<const Lowerings> lowerings;
};

/// snapkv.ragged_attention: an scf.for nest over (batch, cache head), each a
/// snapkv.attention of the head's query heads over its own rows, which this
/// conversion then lowers as a decode step (parallel over key splits). The
/// heads run one after another so that the run-time checks stay outside
/// parallel regions (they may return to the caller).
struct RaggedAttentionLowering : OpConversionPattern<RaggedAttentionOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(RaggedAttentionOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Operation *before = op->getPrevNode();
    auto qTy = cast<RankedTensorType>(op.getQueries().getType());
    auto rowsTy = cast<RankedTensorType>(op.getStarts().getType());
    int64_t batch = qTy.getDimSize(0), heads = rowsTy.getDimSize(1);
    int64_t group = qTy.getDimSize(1) / heads, dim = qTy.getDimSize(3);
    Type elem = qTy.getElementType();
    auto cIndex = [&](OpBuilder &b, int64_t v) -> Value {
      return arith::ConstantIndexOp::create(b, loc, v);
    };
    Value init = tensor::EmptyOp::create(rewriter, loc, qTy.getShape(), elem);
    FloatAttr scale = op.getScaleAttr()
                          ? op.getScaleAttr()
                          : rewriter.getF32FloatAttr(op.getEffectiveScale());
    scf::LoopNest nest = scf::buildLoopNest(
        rewriter, loc, {cIndex(rewriter, 0), cIndex(rewriter, 0)},
        {cIndex(rewriter, batch), cIndex(rewriter, heads)},
        {cIndex(rewriter, 1), cIndex(rewriter, 1)}, ValueRange{init},
        [&](OpBuilder &b, Location l, ValueRange ivs, ValueRange iters) {
          Value bi = ivs[0], head = ivs[1];
          auto read = [&](Value rows) -> Value {
            Value v = tensor::ExtractOp::create(b, l, rows, ivs);
            return arith::IndexCastOp::create(b, l, b.getIndexType(), v);
          };
          Value start = read(adaptor.getStarts());
          Value length = read(adaptor.getLengths());
          auto check = [&](arith::CmpIPredicate pred, Value lhs, Value rhs,
                           StringRef message) {
            cf::AssertOp::create(
                b, l, arith::CmpIOp::create(b, l, pred, lhs, rhs), message);
          };
          check(arith::CmpIPredicate::sge, length, cIndex(b, 1),
                "snapkv.ragged_attention: a head has no rows");
          check(arith::CmpIPredicate::sge, start, cIndex(b, 0),
                "snapkv.ragged_attention: a head's rows start before row 0");
          Value end = arith::AddIOp::create(b, l, start, length);
          SmallVector<Value> slices;
          for (Value rows : {adaptor.getKeys(), adaptor.getValues()}) {
            check(arith::CmpIPredicate::sle, end,
                  tensor::DimOp::create(b, l, rows, 1),
                  "snapkv.ragged_attention: a head's rows end past the cache");
            Value slice = tensor::ExtractSliceOp::create(
                b, l,
                RankedTensorType::get({1, ShapedType::kDynamic, dim}, elem),
                rows, ArrayRef<OpFoldResult>{bi, start, b.getIndexAttr(0)},
                ArrayRef<OpFoldResult>{b.getIndexAttr(1), length,
                                       b.getIndexAttr(dim)},
                ArrayRef<OpFoldResult>(
                    SmallVector<OpFoldResult>(3, b.getIndexAttr(1))));
            slices.push_back(tensor::ExpandShapeOp::create(
                b, l,
                RankedTensorType::get({1, 1, ShapedType::kDynamic, dim}, elem),
                slice, SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}},
                ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(1),
                                       length, b.getIndexAttr(dim)}));
          }
          SmallVector<OpFoldResult> offsets = {
              bi,
              arith::MulIOp::create(b, l, head, cIndex(b, group)).getResult(),
              b.getIndexAttr(0), b.getIndexAttr(0)};
          SmallVector<OpFoldResult> sizes = {
              b.getIndexAttr(1), b.getIndexAttr(group), b.getIndexAttr(1),
              b.getIndexAttr(dim)};
          SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
          auto tileTy = RankedTensorType::get({1, group, 1, dim}, elem);
          Value queries = tensor::ExtractSliceOp::create(
              b, l, tileTy, adaptor.getQueries(), offsets, sizes, strides);
          Value out = AttentionOp::create(
              b, l, tileTy, queries, slices[0], slices[1], /*offset=*/Value(),
              tensor::EmptyOp::create(b, l, tileTy.getShape(), elem), scale,
              /*softcap=*/FloatAttr(), /*sliding_window=*/IntegerAttr());
          return scf::ValueVector{tensor::InsertSliceOp::create(
              b, l, out, iters[0], offsets, sizes, strides)};
        });
    inheritConfig(op, before);
    rewriter.replaceOp(op, nest.results);
    return success();
  }
};

/// snapkv.attention through its interfaces: tiled (TilingInterface) into an
/// scf.forall over (batch, query head, tile of `queryTile` rows), each tile
/// decomposed into its online softmax over tiles of `keyTile` keys. The
/// run-time check of dynamic lengths comes first, once: a check inside the
/// parallel loop could not return to the caller (asserts=report).
/// Parts a decode step's keys are split into (FlashDecoding).
constexpr int64_t kDecodeSplits = 4;

LogicalResult tileAndDecompose(RewriterBase &rewriter, AttentionOp op,
                               const FormulationOptions &options) {
  rewriter.setInsertionPoint(op);
  attentionLengths(rewriter, op.getLoc(), op.getQueries(), op.getKeys(),
                   op.getValues(), op.getOffset());
  // A decode step (one static row per head): a tile of each kv head's group
  // of query heads, so that its keys and values are read once for them, the
  // tiles one after another, each over kDecodeSplits parts of the keys in
  // parallel (a model's few kv heads alone would leave cores idle).
  RankedTensorType qTy = op.getQueries().getType();
  int64_t group = qTy.getDimSize(1) / op.getKeys().getType().getDimSize(1);
  bool decode = qTy.getDimSize(2) == 1;
  scf::SCFTilingOptions tiling;
  tiling.setLoopType(decode ? scf::SCFTilingOptions::LoopType::ForOp
                            : scf::SCFTilingOptions::LoopType::ForallOp);
  tiling.setTileSizes(getAsIndexOpFoldResult(
      op.getContext(),
      {1, decode ? group : 1, decode ? 1 : options.queryTile}));
  FailureOr<scf::SCFTilingResult> tiled = scf::tileUsingSCF(
      rewriter, cast<TilingInterface>(op.getOperation()), tiling);
  if (failed(tiled))
    return op.emitOpError("could not be tiled through TilingInterface");
  rewriter.replaceOp(op, tiled->replacements);
  for (Operation *tiledOp : tiled->tiledOps) {
    auto tile = cast<AttentionOp>(tiledOp);
    rewriter.setInsertionPoint(tile);
    FailureOr<SmallVector<Value>> decomposed =
        tile.decompose(rewriter, options.keyTile, /*lengthsChecked=*/true,
                       decode ? kDecodeSplits : 1);
    if (failed(decomposed))
      return tile.emitOpError("could not be decomposed");
    rewriter.replaceOp(tile, *decomposed);
  }
  return success();
}

/// A snapkv.attention left to the conversion: untiled (no configuration),
/// the op's own decomposition, the form a compiler that tiles linalg itself
/// takes (one loop over key tiles, no scf.forall); with a CPU configuration,
/// a ragged attention's per-head op (already one tile: one batch, one kv
/// head), decomposed as a tile, its keys in parallel parts when it is a
/// decode step.
struct AttentionLowering : OpConversionPattern<AttentionOp> {
  AttentionLowering(MLIRContext *ctx,
                    std::shared_ptr<const Lowerings> lowerings)
      : OpConversionPattern(ctx), lowerings(std::move(lowerings)) {}
  LogicalResult
  matchAndRewrite(AttentionOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    FormulationOptions options = lowerings->options(op);
    if (options.mapping == TileMapping::gpu_blocks)
      return rewriter.notifyMatchFailure(op, "no GPU lowering");
    bool decode =
        lowerings->config(op) && op.getQueries().getType().getDimSize(2) == 1;
    FailureOr<SmallVector<Value>> decomposed =
        op.decompose(rewriter, options.keyTile, /*lengthsChecked=*/false,
                     decode ? kDecodeSplits : 1);
    if (failed(decomposed))
      return failure();
    rewriter.replaceOp(op, *decomposed);
    return success();
  }
  std::shared_ptr<const Lowerings> lowerings;
};

/// The selects with a `forall` configuration left whole (the comparison
/// scorings) lowered through the formulation, each of its steps (a linalg op
/// over [B, H, ...] rows, none of which reads another row) then tiled through
/// TilingInterface into an scf.forall over its (batch, head) rows, or its
/// batch rows where only its first loop is parallel. Every step is a few
/// passes over the keys, no logits, so nothing is fused. The run-time checks
/// come before the loops.
LogicalResult tileWholeSelects(RewriterBase &rewriter, Operation *scope,
                               const Lowerings &lowerings) {
  SmallVector<SelectOp> selects;
  scope->walk([&](SelectOp op) {
    if (onCPU(lowerings, op))
      selects.push_back(op);
  });
  for (SelectOp op : selects) {
    rewriter.setInsertionPoint(op);
    Operation *before = op->getPrevNode();
    Formulation f(rewriter, op.getLoc(), SelectShape::get(op),
                  lowerings.options(op));
    SmallVector<Value> results = f.select(op.getQueries(), op.getKeys(),
                                          op.getValues(), op->getResultTypes());
    Operation *first =
        before ? before->getNextNode() : &op->getBlock()->front();
    SmallVector<linalg::LinalgOp> steps;
    for (Operation &top :
         llvm::make_range(first->getIterator(), op->getIterator()))
      top.walk([&](linalg::LinalgOp step) {
        if (!isa<linalg::FillOp>(step))
          steps.push_back(step);
      });
    rewriter.replaceOp(op, results);
    for (linalg::LinalgOp step : steps) {
      SmallVector<utils::IteratorType> iters = step.getIteratorTypesArray();
      SmallVector<int64_t> sizes(iters.size(), 0);
      for (size_t d = 0; d < std::min<size_t>(2, iters.size()) &&
                         iters[d] == utils::IteratorType::parallel;
           ++d)
        sizes[d] = 1;
      if (sizes.empty() || sizes[0] == 0)
        continue;
      scf::SCFTilingOptions tiling;
      tiling.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp);
      tiling.setTileSizes(getAsIndexOpFoldResult(rewriter.getContext(), sizes));
      rewriter.setInsertionPoint(step);
      FailureOr<scf::SCFTilingResult> tiled = scf::tileUsingSCF(
          rewriter, cast<TilingInterface>(step.getOperation()), tiling);
      if (failed(tiled))
        return step->emitOpError("could not be tiled through TilingInterface");
      rewriter.replaceOp(step, tiled->replacements);
    }
  }
  return success();
}

SelectShape stageShape(Operation *op) {
  return llvm::TypeSwitch<Operation *, SelectShape>(op)
      .Case<ScoreOp, TopPositionsOp, GatherOp>(
          [](auto stage) { return SelectShape::get(stage); });
}

/// The selects with a `forall` configuration as their stage ops (their
/// AggregatedOpInterface decomposition), which inherit the configuration:
/// the CPU tiles the stage ops, never a whole select. A select the stage ops
/// cannot express (the comparison scorings recent, random and keydiff, whose
/// keys rank without votes and take no logits) stays whole (tileWholeSelects).
void decomposeSelects(RewriterBase &rewriter, Operation *scope,
                      const Lowerings &lowerings) {
  SmallVector<linalg::AggregatedOpInterface> selects;
  scope->walk([&](Operation *op) {
    if (isa<SelectOp, SelectAdaptiveOp>(op) && onCPU(lowerings, op))
      selects.push_back(cast<linalg::AggregatedOpInterface>(op));
  });
  for (linalg::AggregatedOpInterface op : selects)
    (void)decomposeSelect(rewriter, op);
}

/// The stage ops with a `forall` configuration, tiled through
/// TilingInterface into one scf.forall over their (batch, head) rows each: a
/// snapkv.top_positions with the snapkv.score it ranks fused into its tile
/// (unless something else reads the scores: then the score is tiled on its
/// own), each snapkv.gather on its own. An op of one row
/// (select_adaptive's flattened ranking and its gathers) would be a loop of
/// one iteration: its gathers are tiled by slots instead, its ranking is
/// lowered whole. Each tile is lowered whole inside the loop with its
/// configuration's sizes (its key tiles and chunks); the checks of dynamic
/// sizes come first, once, outside the loop (a check in it could not return
/// to the caller, asserts=report). Adds the tiles to `tiles`.
LogicalResult tileStages(RewriterBase &rewriter, Operation *scope,
                         const Lowerings &lowerings,
                         llvm::SmallPtrSet<Operation *, 8> &tiles) {
  SmallVector<Operation *> stages;
  scope->walk([&](Operation *op) {
    if (!isa<ScoreOp, TopPositionsOp, GatherOp>(op) ||
        op->getParentOfType<scf::ForallOp>() || !onCPU(lowerings, op))
      return;
    auto rows = cast<ShapedType>(op->getResult(0).getType());
    if (rows.getDimSize(0) * rows.getDimSize(1) > 1 || isa<GatherOp>(op))
      stages.push_back(op);
  });
  // A score whose only reader is the ranking of its rows.
  auto fusedScore = [&](Operation *op) -> ScoreOp {
    auto top = dyn_cast<TopPositionsOp>(op);
    auto score = top ? top.getScores().getDefiningOp<ScoreOp>() : ScoreOp();
    if (!score || !llvm::is_contained(stages, score.getOperation()) ||
        !llvm::all_of(score->getUsers(), [&](Operation *user) {
          return user == op || isa<tensor::DimOp>(user);
        }))
      return {};
    return score;
  };
  llvm::SmallPtrSet<Operation *, 4> fused;
  for (Operation *op : stages)
    if (ScoreOp score = fusedScore(op))
      fused.insert(score);
  for (Operation *op : stages) {
    if (fused.contains(op))
      continue;
    ScoreOp score = fusedScore(op);
    for (Operation *checked : {score.getOperation(), op}) {
      if (!checked)
        continue;
      rewriter.setInsertionPoint(checked);
      Formulation(rewriter, checked->getLoc(), stageShape(checked),
                  lowerings.options(checked))
          .checkStage(checked);
    }
    auto tileable = cast<TilingInterface>(op);
    SmallVector<int64_t> sizes(tileable.getLoopIteratorTypes().size(), 0);
    sizes[0] = sizes[1] = 1;
    auto rows = cast<ShapedType>(op->getResult(0).getType());
    if (rows.getDimSize(0) * rows.getDimSize(1) == 1)
      sizes[2] = 1;
    scf::SCFTilingOptions tiling;
    tiling.setLoopType(scf::SCFTilingOptions::LoopType::ForallOp);
    tiling.setTileSizes(getAsIndexOpFoldResult(op->getContext(), sizes));
    scf::SCFTileAndFuseOptions options;
    options.setTilingOptions(tiling);
    options.setFusionControlFn(
        [&](tensor::ExtractSliceOp, OpResult producer, bool)
            -> std::optional<scf::SCFTileAndFuseOptions::ControlFnResult> {
          if (producer.getOwner() != score.getOperation())
            return std::nullopt;
          return scf::SCFTileAndFuseOptions::ControlFnResult{false};
        });
    rewriter.setInsertionPoint(op);
    FailureOr<scf::SCFTileAndFuseResult> result =
        scf::tileConsumerAndFuseProducersUsingSCF(rewriter, tileable, options);
    if (failed(result))
      return op->emitOpError("could not be tiled through TilingInterface");
    for (Operation *tile : result->tiledAndFusedOps) {
      if (!isa<ScoreOp, TopPositionsOp, GatherOp>(tile))
        continue;
      // A tile is configured as the op it is a tile of.
      Operation *original =
          isa<ScoreOp>(tile) && score ? score.getOperation() : op;
      tile->setDiscardableAttrs(original->getDiscardableAttrDictionary());
      tiles.insert(tile);
    }
    for (auto [original, replacement] : result->replacements)
      rewriter.replaceAllUsesWith(original, replacement);
    rewriter.eraseOp(op);
    if (!score)
      continue;
    // Fusion leaves the slices of the scores it fused through in place.
    for (LoopLikeOpInterface loop : result->loops)
      loop->walk([&](tensor::ExtractSliceOp slice) {
        if (slice->use_empty() && slice.getSource().getDefiningOp() == score)
          rewriter.eraseOp(slice);
      });
    // The sizes of the scores' slices: read them off the inits, so that
    // nothing reads the untiled score.
    for (OpResult scores : score->getResults())
      for (OpOperand &use : llvm::make_early_inc_range(scores.getUses()))
        if (auto dim = dyn_cast<tensor::DimOp>(use.getOwner()))
          rewriter.modifyOpInPlace(dim, [&] {
            use.set(score.getDpsInitOperand(scores.getResultNumber())->get());
          });
    if (!score->use_empty())
      return score.emitOpError("is still read after its tiles were fused");
    rewriter.eraseOp(score);
  }
  return success();
}

void addSnapKVPatterns(RewritePatternSet &patterns,
                       std::shared_ptr<const Lowerings> lowerings) {
  MLIRContext *ctx = patterns.getContext();
  patterns
      .add<FormulationLowering<SelectOp>, FormulationLowering<ScoreOp>,
           FormulationLowering<TopPositionsOp>, FormulationLowering<GatherOp>,
           AdaptiveLowering, AttentionLowering>(ctx, lowerings);
  patterns.add<RaggedAttentionLowering>(ctx);
  populateSdpaLowering(patterns);
}

struct ConvertSnapKVToLinalgPass
    : snapkv::impl::ConvertSnapKVToLinalgBase<ConvertSnapKVToLinalgPass> {
  using Base::Base;

  void runOnOperation() override {
    if (keyTile < 0 || queryTile < 0 || chunk < 0) {
      emitError(getOperation()->getLoc())
          << "convert-snapkv-to-linalg: key-tile, query-tile and chunk must "
             "be non-negative (0: chosen per op)";
      return signalPassFailure();
    }
    // tiling=cpu|gpu is snapkv-configure-lowering for that target with these
    // sizes and no CPU features (no microkernel) on the ops without a
    // configuration: the strategy is the one place sizes are chosen.
    if (tiling != LoweringTarget::none) {
      ConfigureLoweringOptions strategy;
      strategy.target = tiling;
      strategy.keyTile = keyTile;
      strategy.queryTile = queryTile;
      strategy.chunk = chunk;
      strategy.keepLogits = keepLogits;
      strategy.cpuFeatures = "";
      WalkResult refused = getOperation()->walk([&](Operation *op) {
        if (op->hasAttr(kConfigName))
          return WalkResult::advance();
        FailureOr<LoweringConfigAttr> config =
            chooseLoweringConfig(op, strategy);
        if (failed(config))
          return WalkResult::interrupt();
        if (*config)
          op->setAttr(kConfigName, *config);
        return WalkResult::advance();
      });
      if (refused.wasInterrupted())
        return signalPassFailure();
    }
    // Untiled ops (no configuration): the CPU layout, recomputing each
    // tile's logits, with the given sizes or the lowering's defaults.
    FormulationOptions defaults;
    if (keyTile)
      defaults.keyTile = keyTile;
    if (queryTile)
      defaults.queryTile = queryTile;
    defaults.autoChunk = chunk == 0;
    if (chunk)
      defaults.chunk = chunk;
    // Numbered after any group already in the IR (a second run on a module
    // whose other selects were lowered before).
    int64_t first = 0;
    getOperation()->walk([&](Operation *op) {
      if (auto tile = op->getAttrOfType<TileAttr>("snapkv.tile"))
        first = std::max(first, tile.getGroup() + 1);
      if (auto fuse = op->getAttrOfType<DenseI64ArrayAttr>("snapkv.fuse"))
        for (int64_t id : fuse.asArrayRef())
          first = std::max(first, id + 1);
    });
    IRRewriter rewriter(&getContext());
    // The selects with a CPU configuration as stage ops, tiled through
    // TilingInterface.
    decomposeSelects(rewriter, getOperation(), Lowerings(defaults, first));
    if (failed(tileWholeSelects(rewriter, getOperation(),
                                Lowerings(defaults, first))))
      return signalPassFailure();
    llvm::SmallPtrSet<Operation *, 8> tiles;
    if (failed(::tileStages(rewriter, getOperation(),
                            Lowerings(defaults, first), tiles)))
      return signalPassFailure();
    auto lowerings =
        std::make_shared<const Lowerings>(defaults, first, std::move(tiles));
    // With a CPU configuration: tiled through TilingInterface and each tile
    // decomposed.
    SmallVector<AttentionOp> attentions;
    getOperation()->walk([&](AttentionOp op) {
      if (LoweringConfigAttr config = lowerings->config(op))
        if (config.getMapping() == TileMapping::forall)
          attentions.push_back(op);
    });
    for (AttentionOp op : attentions)
      if (failed(tileAndDecompose(rewriter, op, lowerings->options(op))))
        return signalPassFailure();
    RewritePatternSet patterns(&getContext());
    addSnapKVPatterns(patterns, lowerings);
    ConversionTarget conversion(getContext());
    conversion.addIllegalDialect<SnapKVDialect>();
    conversion.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    if (failed(applyPartialConversion(getOperation(), conversion,
                                      std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

LoweringConfigAttr
mlir::snapkv::getLoweringConfig(MLIRContext *ctx, LoweringTarget target,
                                const SnapKVToLinalgOptions &options) {
  if (target == LoweringTarget::none)
    return {};
  bool cpu = target == LoweringTarget::cpu;
  return LoweringConfigAttr::get(
      ctx, cpu ? TileMapping::forall : TileMapping::gpu_blocks, options.keyTile,
      options.queryTile, options.autoChunk ? 0 : options.chunk,
      BoolAttr::get(ctx, cpu && options.keepLogits), cpu ? 0 : options.threads,
      cpu ? BoolAttr() : BoolAttr::get(ctx, options.tensorCores),
      cpu ? options.microkernel : Microkernel::none);
}

SnapKVToLinalgOptions
mlir::snapkv::getLoweringOptions(LoweringConfigAttr config) {
  SnapKVToLinalgOptions options;
  options.mapping = config.getMapping();
  options.keyTile = config.getKeyTile();
  options.queryTile = config.getQueryTile();
  options.autoChunk = config.getChunk() == 0;
  if (config.getChunk() != 0)
    options.chunk = config.getChunk();
  options.keepLogits = config.getKeepLogits().getValue();
  options.microkernel = config.getMicrokernel();
  if (options.mapping == TileMapping::gpu_blocks) {
    options.threads = config.getThreads();
    options.tensorCores = config.getTensorCores().getValue();
  }
  return options;
}
