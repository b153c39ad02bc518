//===- FuseAttention.cpp - imported attention to snapkv.attention ---------===//
//
// The imported attention materialises every head's [Lq, Lk] scores, runs
// five full passes over them (mask, max, exp, sum, divide) and copies the
// keys and values for the GQA repeat; as one snapkv.attention it lowers to
// a tiled online softmax that does none of that. Recognition is the model
// rewrite's (AttentionMatcher.h), so both see the same attentions.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/AttentionMatcher.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/RegionUtils.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_FUSEATTENTION
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

/// The 1-D tensor an expand_shape chain starts from.
static Value expandSource(Value value) {
  while (auto e = value.getDefiningOp<tensor::ExpandShapeOp>())
    value = e.getSrc();
  return value;
}

/// Whether `m` is a prompt's self-attention: a causal mask that compares
/// one arange of positions with itself. A sliding window counts only when
/// it covers every query-key distance of a static prompt (as for
/// snapkv-compress-kv-cache).
static bool isPromptSelfAttention(const AttentionMatch &m,
                                  const CausalMask &mask) {
  if (!mask.queryIsRow ||
      expandSource(mask.keyPositions) != expandSource(mask.queryPositions))
    return false;
  if (!mask.window)
    return true;
  auto qType = cast<RankedTensorType>(m.queries.getType());
  return !qType.isDynamicDim(2) && qType.getDimSize(2) <= *mask.window;
}

/// Whether `keys` is `cache` with one row appended (tensor.concat on the
/// position axis): then the keys number the cache's length plus one.
static bool appendsOneRow(Value keys, Value cache) {
  auto concat = keys.getDefiningOp<tensor::ConcatOp>();
  if (!concat || concat.getDim() != 2 || concat.getInputs().size() != 2 ||
      (cache && concat.getInputs()[0] != cache))
    return false;
  auto row = cast<RankedTensorType>(concat.getInputs()[1].getType());
  return row.getDimSize(2) == 1;
}

/// How a fusable attention's query rows sit among its keys.
struct Alignment {
  /// The op's default: row 0 at Lk - Lq.
  bool lastKey = true;
  /// Otherwise row 0 sits at `offset` plus the function argument `position`
  /// (a scalar or one-element tensor), or with `cacheLength`, plus the
  /// length (dim 2) of that argument.
  BlockArgument position;
  bool cacheLength = false;
  int64_t offset = 0;
};

/// Row 0 at an integer argument (a scalar or one-element tensor) plus a
/// constant.
static std::optional<Alignment> argumentAlignment(const PositionValue &query) {
  Type type = query.argument.getType();
  if (auto tensor = dyn_cast<RankedTensorType>(type))
    type = tensor.getElementType();
  if (!type.isSignlessInteger() && !type.isIndex())
    return std::nullopt;
  return Alignment{false, query.argument, false, query.offset};
}

/// A decode step's alignment: its one query's position, when the mask
/// compares the keys' positions with the length of the cache the keys append
/// to (`tensor.dim` of the cache, or the static length: every key is
/// visible, the default), or with another cache's length or an argument
/// (the `position` input): snapkv.attention then gets that value as its
/// offset, so that keys past it stay hidden whatever the caller passes.
static std::optional<Alignment> decodeAlignment(const AttentionMatch &m,
                                                const CausalMask &mask) {
  auto qType = cast<RankedTensorType>(m.queries.getType());
  if (mask.queryIsRow || mask.window || qType.getDimSize(2) != 1)
    return std::nullopt;
  std::optional<PositionValue> query = evaluatePosition(mask.queryPositions);
  if (!query)
    return std::nullopt;
  switch (query->base) {
  case PositionValue::Base::CacheLength:
    if (query->offset == 0 && appendsOneRow(m.keys.source, query->argument))
      return Alignment{};
    return Alignment{false, query->argument, true, query->offset};
  case PositionValue::Base::Zero: {
    auto concat = m.keys.source.getDefiningOp<tensor::ConcatOp>();
    if (!concat || !appendsOneRow(m.keys.source, Value()))
      return std::nullopt;
    auto cache = cast<RankedTensorType>(concat.getInputs()[0].getType());
    if (!cache.isDynamicDim(2) && query->offset == cache.getDimSize(2))
      return Alignment{};
    return std::nullopt;
  }
  case PositionValue::Base::Argument:
    return argumentAlignment(*query);
  }
  return std::nullopt;
}

/// A prompt chunk's alignment (chunked prefill): query row i at position
/// `s + i` where `s` is a cache argument's length (HuggingFace's
/// cache_position) or an integer argument, plus a constant. snapkv.attention
/// gets `s` plus the constant as its offset, which is exact whatever the keys
/// are.
static std::optional<Alignment> chunkAlignment(const CausalMask &mask) {
  if (!mask.queryIsRow || mask.window)
    return std::nullopt;
  std::optional<PositionValue> query = shiftedArange(mask.queryPositions);
  if (!query)
    return std::nullopt;
  switch (query->base) {
  case PositionValue::Base::CacheLength:
    return Alignment{false, query->argument, true, query->offset};
  case PositionValue::Base::Argument:
    return argumentAlignment(*query);
  case PositionValue::Base::Zero:
    return std::nullopt;
  }
  return std::nullopt;
}

/// Whether every use of `value` (through reshapes) only reads its shape or
/// rounds it elementwise to `type` (`arith.truncf`).
static bool onlyRoundedTo(Value value, Type type, unsigned depth = 0) {
  if (depth > 4 || value.use_empty())
    return false;
  return llvm::all_of(value.getUses(), [&](OpOperand &use) {
    Operation *user = use.getOwner();
    if (isa<tensor::DimOp>(user))
      return true;
    if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::ReshapeOp>(
            user) &&
        use.getOperandNumber() == 0)
      return onlyRoundedTo(user->getResult(0), type, depth + 1);
    auto generic = dyn_cast<linalg::GenericOp>(user);
    if (!generic || generic.getNumDpsInputs() != 1 ||
        generic.getNumResults() != 1 || use.getOperandNumber() != 0 ||
        generic.getNumParallelLoops() != generic.getNumLoops() ||
        !llvm::all_of(generic.getIndexingMapsArray(),
                      [](AffineMap map) { return map.isIdentity(); }))
      return false;
    auto yield = cast<linalg::YieldOp>(generic.getBody()->getTerminator());
    auto trunc = yield.getOperand(0).getDefiningOp<arith::TruncFOp>();
    return trunc && trunc.getType() == type &&
           trunc.getIn() == generic.getBody()->getArgument(0);
  });
}

/// `value` widened elementwise to `element` (exact).
static Value widen(OpBuilder &b, Location loc, Value value, Type element) {
  auto type = cast<RankedTensorType>(value.getType());
  Value init = tensor::EmptyOp::create(
      b, loc, tensor::getMixedSizes(b, loc, value), element);
  AffineMap identity = b.getMultiDimIdentityMap(type.getRank());
  SmallVector<utils::IteratorType> parallel(type.getRank(),
                                            utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, ValueRange{value}, ValueRange{init},
      ArrayRef<AffineMap>{identity, identity}, parallel,
      [&](OpBuilder &nested, Location at, ValueRange args) {
        Value wide = arith::ExtFOp::create(nested, at, element, args[0]);
        linalg::YieldOp::create(nested, at, wide);
      });
  return generic.getResult(0);
}

/// How `m` maps onto snapkv.attention, if it computes exactly what that op
/// computes.
static std::optional<Alignment> fusable(const AttentionMatch &m) {
  auto qType = cast<RankedTensorType>(m.queries.getType());
  // bf16/f16 queries, keys and values that SDPA widened to f32: the op's
  // result has the queries' type, which is exact only where the imported
  // f32 result is rounded to that type before anything else reads it.
  Value result = m.root()->getResult(0);
  if (qType.getElementType() != getElementTypeOrSelf(result.getType()) &&
      !onlyRoundedTo(result, qType.getElementType()))
    return std::nullopt;
  // Without a mask every key is visible: causal only for one query row.
  if (!m.mask) {
    if (qType.getDimSize(2) == 1)
      return Alignment{};
    return std::nullopt;
  }
  MaskMismatch failure;
  FailureOr<CausalMask> mask = matchCausalMask(m, failure);
  if (failed(mask))
    return std::nullopt;
  if (isPromptSelfAttention(m, *mask))
    return Alignment{};
  if (std::optional<Alignment> chunk = chunkAlignment(*mask))
    return chunk;
  return decodeAlignment(m, *mask);
}

/// The index value of `alignment`'s position at the builder's point.
static Value positionIndex(OpBuilder &b, Location loc,
                           const Alignment &alignment) {
  Value position = alignment.position;
  if (alignment.cacheLength)
    position = tensor::DimOp::create(b, loc, position, 2);
  else if (auto tensor = dyn_cast<RankedTensorType>(position.getType())) {
    SmallVector<Value> zeros(tensor.getRank(),
                             arith::ConstantIndexOp::create(b, loc, 0));
    position = tensor::ExtractOp::create(b, loc, position, zeros);
  }
  if (!position.getType().isIndex())
    position = arith::IndexCastOp::create(b, loc, b.getIndexType(), position);
  if (alignment.offset != 0)
    position = arith::AddIOp::create(
        b, loc, position,
        arith::ConstantIndexOp::create(b, loc, alignment.offset));
  return position;
}

unsigned mlir::snapkv::fuseAttentions(Operation *root) {
  MLIRContext *ctx = root->getContext();
  SmallVector<std::pair<AttentionMatch, Alignment>> matches;
  root->walk([&](Operation *op) {
    AttentionFailure failure;
    FailureOr<AttentionMatch> m = mlir::failure();
    if (auto sdpa = dyn_cast<SdpaOp>(op))
      m = matchSdpa(sdpa, failure);
    else if (auto matmul = dyn_cast<linalg::BatchMatmulOp>(op))
      m = matchAttention(matmul, failure, /*maskOptional=*/true);
    if (succeeded(m))
      if (std::optional<Alignment> alignment = fusable(*m))
        matches.push_back({*m, *alignment});
  });
  IRRewriter rewriter(ctx);
  for (auto &[m, alignment] : matches) {
    Operation *out = m.root();
    rewriter.setInsertionPoint(out);
    Location loc = out->getLoc();
    auto qTy = cast<RankedTensorType>(m.queries.getType());
    Value offset =
        alignment.lastKey ? Value() : positionIndex(rewriter, loc, alignment);
    Value init = tensor::EmptyOp::create(
        rewriter, loc, tensor::getMixedSizes(rewriter, loc, m.queries),
        qTy.getElementType());
    auto attention = AttentionOp::create(
        rewriter, loc, qTy, m.queries, m.keys.source, m.values.source, offset,
        init, rewriter.getF32FloatAttr(m.scale), /*softcap=*/FloatAttr(),
        /*sliding_window=*/IntegerAttr());
    // [B, Hq, L, D] -> the P x V product's [B * Hq, L, D].
    Value result = tensor::CollapseShapeOp::create(
        rewriter, loc, attention.getResult(),
        ArrayRef<ReassociationIndices>{{0, 1}, {2}, {3}});
    auto expected = cast<RankedTensorType>(out->getResult(0).getType());
    // Widened back for the importer's rounding (see fusable): exact.
    if (qTy.getElementType() != expected.getElementType())
      result = widen(rewriter, loc, result, expected.getElementType());
    if (result.getType() != expected)
      result = tensor::CastOp::create(rewriter, loc, expected, result);
    rewriter.replaceOp(out, result);
  }
  if (matches.empty())
    return 0;
  // The importer's shape checks read tensor.dim of the scores; read off
  // their destinations instead, the scores, mask and softmax are dead.
  RewritePatternSet patterns(ctx);
  tensor::DimOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::CollapseShapeOp::getCanonicalizationPatterns(patterns, ctx);
  tensor::ExpandShapeOp::getCanonicalizationPatterns(patterns, ctx);
  GreedyRewriteConfig config;
  config.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
  (void)applyPatternsGreedily(root, std::move(patterns), config);
  (void)runRegionDCE(rewriter, root->getRegions());
  return matches.size();
}

namespace {
struct FuseAttention
    : public mlir::snapkv::impl::FuseAttentionBase<FuseAttention> {
  using FuseAttentionBase::FuseAttentionBase;

  void runOnOperation() override { numFused += fuseAttentions(getOperation()); }
};
} // namespace
