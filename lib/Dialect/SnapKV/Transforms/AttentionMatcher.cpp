//===- AttentionMatcher.cpp - find decomposed attention in imported IR ---===//
//
// The shapes matched here are documented op by op in docs/model-ir.md; the
// masks and positions they compare are read in CausalMask.cpp.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/Transforms/AttentionMatcher.h"
#include "GenericMatchers.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::matchers;

namespace {

/// Parallel over every dim but the last, which is reduced.
bool reducesLastDim(linalg::GenericOp generic) {
  auto types = generic.getIteratorTypesArray();
  if (types.empty() || types.back() != utils::IteratorType::reduction)
    return false;
  return llvm::all_of(ArrayRef(types).drop_back(), [](auto type) {
    return type == utils::IteratorType::parallel;
  });
}

/// Map `(d0, d1, d2, d3) -> (d0, d1, d2, 0)`: one statistic per row.
bool isRowStatisticMap(AffineMap map) {
  if (map.getNumDims() != 4 || map.getNumResults() != 4)
    return false;
  for (unsigned i = 0; i < 3; ++i)
    if (map.getResult(i) != getAffineDimExpr(i, map.getContext()))
      return false;
  auto zero = dyn_cast<AffineConstantExpr>(map.getResult(3));
  return zero && zero.getValue() == 0;
}

/// The value `linalg.fill` writes into `init`.
std::optional<double> fillValue(Value init) {
  auto fill = init.getDefiningOp<linalg::FillOp>();
  if (!fill)
    return std::nullopt;
  return floatConstant(fill.getInputs()[0]);
}

/// Whether a `tensor.reshape` from `collapsed` to `expanded` (or back) can be
/// read as the expand/collapse with `groups`: every multi-dim group is static
/// with the right product and every single-dim group keeps its extent kind.
/// The importer emits such reshapes for torch's `view` of a leading unit
/// batch in dynamic modules; the program's own broadcast checks pin the
/// dynamic extents at run time.
bool reshapeFits(RankedTensorType collapsed, RankedTensorType expanded,
                 ArrayRef<ReassociationIndices> groups) {
  if (collapsed.getRank() != static_cast<int64_t>(groups.size()))
    return false;
  for (auto [i, group] : llvm::enumerate(groups)) {
    if (group.back() >= expanded.getRank())
      return false;
    if (group.size() == 1) {
      if (collapsed.getDimSize(i) != expanded.getDimSize(group[0]))
        return false;
      continue;
    }
    int64_t product = 1;
    for (int64_t d : group) {
      if (expanded.isDynamicDim(d))
        return false;
      product *= expanded.getDimSize(d);
    }
    if (collapsed.isDynamicDim(i) || collapsed.getDimSize(i) != product)
      return false;
  }
  return groups.back().back() + 1 == expanded.getRank();
}

/// `tensor.collapse_shape` with the given reassociation (or a reshape that
/// fits it); its source or null.
Value collapsedFrom(Value value, ArrayRef<ReassociationIndices> groups) {
  if (auto reshape = value.getDefiningOp<tensor::ReshapeOp>()) {
    if (reshapeFits(cast<RankedTensorType>(reshape.getResult().getType()),
                    cast<RankedTensorType>(reshape.getSource().getType()),
                    groups))
      return reshape.getSource();
    return nullptr;
  }
  auto collapse = value.getDefiningOp<tensor::CollapseShapeOp>();
  if (!collapse || collapse.getReassociationIndices() !=
                       SmallVector<ReassociationIndices>(groups))
    return nullptr;
  return collapse.getSrc();
}

Value expandedFrom(Value value, ArrayRef<ReassociationIndices> groups) {
  if (auto reshape = value.getDefiningOp<tensor::ReshapeOp>()) {
    auto source = dyn_cast<RankedTensorType>(reshape.getSource().getType());
    if (source &&
        reshapeFits(source,
                    cast<RankedTensorType>(reshape.getResult().getType()),
                    groups))
      return reshape.getSource();
    return nullptr;
  }
  auto expand = value.getDefiningOp<tensor::ExpandShapeOp>();
  if (!expand || expand.getReassociationIndices() !=
                     SmallVector<ReassociationIndices>(groups))
    return nullptr;
  return expand.getSrc();
}

/// `linalg.index dim`, or the importer's broadcast guard
/// `select(cmpi eq(size, 1), 0, linalg.index dim)`.
bool isIterationIndex(Value index, unsigned dim) {
  if (auto op = index.getDefiningOp<linalg::IndexOp>())
    return op.getDim() == dim;
  auto select = index.getDefiningOp<arith::SelectOp>();
  if (!select)
    return false;
  auto cmp = select.getCondition().getDefiningOp<arith::CmpIOp>();
  if (!cmp || cmp.getPredicate() != arith::CmpIPredicate::eq ||
      !matchPattern(cmp.getRhs(), m_One()) ||
      !matchPattern(select.getTrueValue(), m_Zero()))
    return false;
  auto op = select.getFalseValue().getDefiningOp<linalg::IndexOp>();
  return op && op.getDim() == dim;
}

/// The `tensor.extract` a generic without inputs yields, if it has that form.
tensor::ExtractOp extractBody(Value value, linalg::GenericOp &generic) {
  generic = value.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 ||
      generic.getNumDpsInputs() != 0 || !allParallel(generic) ||
      !isIdentity(generic.getIndexingMapsArray()[0]))
    return nullptr;
  return yielded<tensor::ExtractOp>(generic);
}

/// The GQA repeat [B, Hkv, T, D] -> [B, Hkv, G, T, D] in either importer
/// form; returns its source.
Value repeatSource(linalg::GenericOp repeat) {
  auto resultType = cast<RankedTensorType>(repeat.getResult(0).getType());
  if (resultType.getRank() != 5 || !allParallel(repeat))
    return nullptr;
  MLIRContext *ctx = repeat.getContext();
  if (repeat.getNumDpsInputs() == 1) {
    // Static form: ins(src) with (d0, d1, d2, d3, d4) -> (d0, d1, d3, d4).
    auto maps = repeat.getIndexingMapsArray();
    auto expected =
        AffineMap::get(5, 0,
                       {getAffineDimExpr(0, ctx), getAffineDimExpr(1, ctx),
                        getAffineDimExpr(3, ctx), getAffineDimExpr(4, ctx)},
                       ctx);
    auto yield = cast<linalg::YieldOp>(repeat.getBody()->getTerminator());
    if (maps[0] != expected || !maps[1].isIdentity() ||
        !isBlockArg(yield.getOperand(0), repeat, 0))
      return nullptr;
    return repeat.getDpsInputs()[0];
  }
  // Dynamic form: extract %e[0|i0, i1, 0, i3, i4] from
  // %e = expand_shape %src [[0], [1], [2, 3], [4]] (a unit group dim).
  linalg::GenericOp generic;
  tensor::ExtractOp extract = extractBody(repeat.getResult(0), generic);
  if (!extract || extract.getIndices().size() != 5)
    return nullptr;
  Value source = expandedFrom(extract.getTensor(), {{0}, {1}, {2, 3}, {4}});
  if (!source)
    return nullptr;
  auto indices = extract.getIndices();
  auto sourceType = cast<RankedTensorType>(source.getType());
  bool batchOk =
      isIterationIndex(indices[0], 0) ||
      (matchPattern(indices[0], m_Zero()) && sourceType.getDimSize(0) == 1);
  if (!batchOk || !isIterationIndex(indices[1], 1) ||
      !matchPattern(indices[2], m_Zero()) || !isIterationIndex(indices[3], 3) ||
      !isIterationIndex(indices[4], 4))
    return nullptr;
  return source;
}

/// Folds a scalar float computed from constants, in the arithmetic of its
/// type: `arith.constant`, a splat constant read through an input of
/// `generic`, `truncf`/`extf` (round to nearest even) and `mulf`/`divf`.
/// std::nullopt when anything else is involved.
std::optional<APFloat> foldFloat(Value value, linalg::GenericOp generic,
                                 unsigned depth = 0) {
  if (depth > 16)
    return std::nullopt;
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    if (!generic || arg.getOwner() != generic.getBody() ||
        arg.getArgNumber() >= generic.getNumDpsInputs())
      return std::nullopt;
    DenseFPElementsAttr dense;
    if (matchPattern(generic.getDpsInputs()[arg.getArgNumber()],
                     m_Constant(&dense)) &&
        dense.isSplat())
      return dense.getSplatValue<APFloat>();
    return std::nullopt;
  }
  FloatAttr scalar;
  if (matchPattern(value, m_Constant(&scalar)))
    return scalar.getValue();
  Operation *op = value.getDefiningOp();
  auto type = dyn_cast<FloatType>(value.getType());
  if (!op || !type)
    return std::nullopt;
  if (auto rounding = dyn_cast<arith::ArithRoundingModeInterface>(op)) {
    arith::RoundingModeAttr mode = rounding.getRoundingModeAttr();
    if (mode && mode.getValue() != arith::RoundingMode::to_nearest_even)
      return std::nullopt;
  }
  if (isa<arith::TruncFOp, arith::ExtFOp>(op)) {
    std::optional<APFloat> in =
        foldFloat(op->getOperand(0), generic, depth + 1);
    if (!in)
      return std::nullopt;
    bool lost;
    in->convert(type.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    return in;
  }
  if (isa<arith::MulFOp, arith::DivFOp>(op)) {
    std::optional<APFloat> lhs =
        foldFloat(op->getOperand(0), generic, depth + 1);
    std::optional<APFloat> rhs =
        foldFloat(op->getOperand(1), generic, depth + 1);
    if (!lhs || !rhs)
      return std::nullopt;
    if (isa<arith::MulFOp>(op))
      lhs->multiply(*rhs, APFloat::rmNearestTiesToEven);
    else
      lhs->divide(*rhs, APFloat::rmNearestTiesToEven);
    return lhs;
  }
  return std::nullopt;
}

/// An elementwise generic `x * f` over a tensor `x` of the result's shape,
/// with `f` anything but `x` itself.
struct ScaleStep {
  Value input;
  /// `f` folded to a constant, if it is one.
  std::optional<APFloat> factor;
};

std::optional<ScaleStep> matchScaleStep(Value value) {
  auto generic = value.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 ||
      generic.getNumDpsInputs() < 1 || !allParallel(generic) ||
      generic.getDpsInputs()[0].getType() != value.getType())
    return std::nullopt;
  auto maps = generic.getIndexingMapsArray();
  if (!maps.front().isIdentity() || !maps.back().isIdentity())
    return std::nullopt;
  auto mul = yielded<arith::MulFOp>(generic);
  if (!mul)
    return std::nullopt;
  Value factor;
  if (isBlockArg(mul.getLhs(), generic, 0))
    factor = mul.getRhs();
  else if (isBlockArg(mul.getRhs(), generic, 0))
    factor = mul.getLhs();
  if (!factor || isBlockArg(factor, generic, 0))
    return std::nullopt;
  return ScaleStep{generic.getDpsInputs()[0], foldFloat(factor, generic)};
}

/// Multiplies `scale` by the constant factors in front of `value` and returns
/// what they scale. `requireConstant`: a factor that does not fold is a
/// mismatch (ScaleNotConstant); otherwise the walk stops in front of it (the
/// value with that factor is then what the attention reads, which is exact).
FailureOr<Value> peelScales(Value value, double &scale, bool requireConstant,
                            AttentionFailure &why) {
  for (unsigned i = 0; i < 8; ++i) {
    Value inner = skipCopies(value);
    std::optional<ScaleStep> step = matchScaleStep(inner);
    if (!step)
      return value;
    if (!step->factor) {
      if (!requireConstant)
        return value;
      why = {AttentionMismatch::ScaleNotConstant, ""};
      return mlir::failure();
    }
    scale *= step->factor->convertToDouble();
    value = step->input;
  }
  return value;
}

/// True when one of the elementwise single-input generics in front of
/// `value` computes a tanh (logit softcapping: cap * tanh(x / cap)).
bool isSoftcapped(Value value) {
  for (unsigned i = 0; i < 8; ++i) {
    auto generic = skipCopies(value).getDefiningOp<linalg::GenericOp>();
    if (!generic || generic.getNumDpsInputs() < 1 || !allParallel(generic))
      return false;
    bool tanh = false;
    generic.getBody()->walk([&](math::TanhOp) { tanh = true; });
    if (tanh)
      return true;
    value = generic.getDpsInputs()[0];
  }
  return false;
}

/// A splat float constant, directly or broadcast by a generic that yields
/// its only input.
std::optional<double> splatValue(Value value) {
  value = skipCopies(value);
  if (std::optional<double> constant = floatConstant(value))
    return constant;
  auto generic = value.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 ||
      generic.getNumDpsInputs() != 1 || !allParallel(generic))
    return std::nullopt;
  auto yield = cast<linalg::YieldOp>(generic.getBody()->getTerminator());
  if (!isBlockArg(yield.getOperand(0), generic, 0))
    return std::nullopt;
  return floatConstant(generic.getDpsInputs()[0]);
}

bool isNegativeInfinity(Value value) {
  FloatAttr constant;
  return matchPattern(value, m_Constant(&constant)) &&
         constant.getValue().isInfinity() && constant.getValue().isNegative();
}

/// SDPA's fully-masked-row guard: `guard = select(r, 0, probs)` with
/// `r[b, h, i, 0] = and_j (x[b, h, i, j] == -inf)` (an `andi` reduction
/// initialised to true). Returns `x`, which must be the softmax's input.
Value guardedScores(linalg::GenericOp guard) {
  auto maps = guard.getIndexingMapsArray();
  if (!isRowStatisticMap(maps[0]) || !maps[2].isIdentity() ||
      !maps[3].isIdentity() || splatValue(guard.getDpsInputs()[1]) != 0.0)
    return nullptr;
  auto all =
      skipCopies(guard.getDpsInputs()[0]).getDefiningOp<linalg::GenericOp>();
  if (!all || all.getNumDpsInputs() != 1 || !reducesLastDim(all) ||
      !all.getIndexingMapsArray()[0].isIdentity() ||
      !isRowStatisticMap(all.getIndexingMapsArray()[1]))
    return nullptr;
  auto andi = yielded<arith::AndIOp>(all);
  auto fill = all.getDpsInits()[0].getDefiningOp<linalg::FillOp>();
  bool reducesAnd = andi && ((isBlockArg(andi.getLhs(), all, 0) &&
                              isBlockArg(andi.getRhs(), all, 1)) ||
                             (isBlockArg(andi.getLhs(), all, 1) &&
                              isBlockArg(andi.getRhs(), all, 0)));
  if (!reducesAnd || !fill || !matchPattern(fill.getInputs()[0], m_One()))
    return nullptr;
  auto compare =
      skipCopies(all.getDpsInputs()[0]).getDefiningOp<linalg::GenericOp>();
  if (!compare || compare.getNumResults() != 1 ||
      compare.getNumDpsInputs() != 1 || !allParallel(compare) ||
      !llvm::all_of(compare.getIndexingMapsArray(), isIdentity))
    return nullptr;
  auto cmp = yielded<arith::CmpFOp>(compare);
  if (!cmp || cmp.getPredicate() != arith::CmpFPredicate::OEQ)
    return nullptr;
  auto isScore = [&](Value v) {
    if (auto ext = v.getDefiningOp<arith::ExtFOp>())
      v = ext.getIn();
    return isBlockArg(v, compare, 0);
  };
  bool minusInf = (isScore(cmp.getLhs()) && isNegativeInfinity(cmp.getRhs())) ||
                  (isScore(cmp.getRhs()) && isNegativeInfinity(cmp.getLhs()));
  return minusInf ? compare.getDpsInputs()[0] : nullptr;
}

/// Traces an attention operand back through the GQA repeat. `value` is
/// [B, Hq, T, D] or [B * Hq, T, D].
FailureOr<RepeatedKV> matchRepeat(Value value, int64_t queryHeads,
                                  AttentionFailure &why) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<ReassociationIndices> heads =
      type.getRank() == 4
          ? SmallVector<ReassociationIndices>{{0}, {1, 2}, {3}, {4}}
          : SmallVector<ReassociationIndices>{{0, 1, 2}, {3}, {4}};
  if (Value repeated = collapsedFrom(value, heads)) {
    auto repeat = repeated.getDefiningOp<linalg::GenericOp>();
    Value source = repeat ? repeatSource(repeat) : Value();
    if (!source) {
      why = {AttentionMismatch::NotGqaRepeat, ""};
      return mlir::failure();
    }
    return RepeatedKV{source, value, repeat};
  }
  // No repeat: only right when every query head has its own kv head.
  if (type.getRank() == 4 && type.getDimSize(1) == queryHeads)
    return RepeatedKV{value, value, nullptr};
  why = {AttentionMismatch::NoRepeatNorHeadPerQuery, ""};
  return mlir::failure();
}

/// The key operand of Q . K^T: collapse(transpose(K, [0, 1, 3, 2])), with
/// SDPA's constant factor on either side of the transpose folded into
/// `scale`. Between the collapse and the transpose only a constant factor can
/// stand; in front of the transpose a factor that does not fold is part of K
/// (whose use as the cache is checked later).
FailureOr<Value> keysBeforeTranspose(Value rhs, double &scale,
                                     AttentionFailure &why) {
  Value transposed = collapsedFrom(rhs, {{0, 1}, {2}, {3}});
  if (!transposed) {
    why = {AttentionMismatch::KeysNotTransposed, ""};
    return mlir::failure();
  }
  FailureOr<Value> unscaled =
      peelScales(transposed, scale, /*requireConstant=*/true, why);
  if (failed(unscaled))
    return mlir::failure();
  auto transpose = skipCopies(*unscaled).getDefiningOp<linalg::TransposeOp>();
  if (!transpose ||
      transpose.getPermutation() != ArrayRef<int64_t>{0, 1, 3, 2}) {
    why = {AttentionMismatch::KeysNotTransposed, ""};
    return mlir::failure();
  }
  return peelScales(transpose.getInput(), scale, /*requireConstant=*/false,
                    why);
}

/// Whether `ext` widens f16 or bf16 to f32 (exactly).
bool widensToF32(arith::ExtFOp ext) {
  if (!ext || !ext.getType().isF32())
    return false;
  Type in = ext.getIn().getType();
  return in.isF16() || in.isBF16();
}

/// `x` when `value` is an elementwise generic yielding `extf(x)` from f16 or
/// bf16 to f32, else `value`: SDPA's decomposition of a bf16/f16 model widens
/// the queries, keys and values before its f32 products, which
/// snapkv.select and snapkv.attention make themselves from the narrow ones.
Value skipWidening(Value value) {
  auto generic = skipCopies(value).getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 ||
      generic.getNumDpsInputs() != 1 || !allParallel(generic) ||
      !llvm::all_of(generic.getIndexingMapsArray(), isIdentity))
    return value;
  auto ext = yielded<arith::ExtFOp>(generic);
  if (!widensToF32(ext) || !isBlockArg(ext.getIn(), generic, 0))
    return value;
  return generic.getDpsInputs()[0];
}

/// The mask add `scores + mask` (an elementwise generic); the mask may be
/// widened inside the body (a bf16/f16 model's mask added to f32 scores).
linalg::GenericOp maskAddOf(Value scores) {
  if (linalg::GenericOp add = elementwise<arith::AddFOp>(scores, 2, 0, 1))
    return add;
  auto generic = scores.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 ||
      generic.getNumDpsInputs() != 2 || !allParallel(generic))
    return nullptr;
  auto add = yielded<arith::AddFOp>(generic);
  if (!add || !isBlockArg(add.getLhs(), generic, 0))
    return nullptr;
  auto ext = add.getRhs().getDefiningOp<arith::ExtFOp>();
  if (!widensToF32(ext) || !isBlockArg(ext.getIn(), generic, 1))
    return nullptr;
  return generic;
}

/// The value operand of P . V in either importer form.
Value valuesOperand(Value rhs) {
  if (collapsedFrom(rhs, {{0, 1, 2}, {3}, {4}}))
    return rhs;
  if (Value heads = collapsedFrom(rhs, {{0, 1}, {2}, {3}}))
    return skipCopies(heads);
  return nullptr;
}

} // namespace

unsigned mlir::snapkv::attentionMismatchStage(AttentionMismatch kind) {
  switch (kind) {
  case AttentionMismatch::OnBuffers:
  case AttentionMismatch::ExplicitMaps:
  case AttentionMismatch::ProbabilitiesNotCollapsed:
  case AttentionMismatch::NoSoftmaxDivision:
  case AttentionMismatch::NoSoftmaxExp:
    return 0;
  case AttentionMismatch::SoftmaxDenominator:
  case AttentionMismatch::SoftmaxNoMaxShift:
  case AttentionMismatch::SoftmaxRowMax:
  case AttentionMismatch::NotMaskedRowGuard:
    return 1;
  case AttentionMismatch::NoMaskAdd:
  case AttentionMismatch::Softcapping:
  case AttentionMismatch::ScaleNotConstant:
  case AttentionMismatch::ScaleNotPositive:
  case AttentionMismatch::ScoresNotMatmul:
    return 2;
  case AttentionMismatch::QueriesNotCollapsed:
  case AttentionMismatch::DynamicQueryDims:
  case AttentionMismatch::KeysNotTransposed:
  case AttentionMismatch::NotGqaRepeat:
  case AttentionMismatch::NoRepeatNorHeadPerQuery:
  case AttentionMismatch::ValuesNotCollapsed:
  case AttentionMismatch::KVTypesDiffer:
  case AttentionMismatch::DynamicKVHeads:
  case AttentionMismatch::HeadCountMismatch:
  case AttentionMismatch::ElementTypesDiffer:
  case AttentionMismatch::RepeatCopiesMismatch:
  case AttentionMismatch::SdpaNotCollapsed:
  case AttentionMismatch::SdpaMaskNotRowColumn:
    return 3;
  }
  llvm_unreachable("unknown AttentionMismatch");
}

StringRef mlir::snapkv::attentionMismatchMessage(AttentionMismatch kind) {
  switch (kind) {
  case AttentionMismatch::OnBuffers:
    return "batch_matmul on buffers (the rewrite works on tensors, before "
           "bufferization)";
  case AttentionMismatch::ExplicitMaps:
    return "batch_matmul with explicit indexing maps";
  case AttentionMismatch::ProbabilitiesNotCollapsed:
    return "the left operand of the second batch_matmul is not a [B*H, Lq, "
           "Lk] collapse of attention probabilities";
  case AttentionMismatch::NoSoftmaxDivision:
    return "attention probabilities are not a softmax (no row-sum division)";
  case AttentionMismatch::NoSoftmaxExp:
    return "attention probabilities are not a softmax (no exp)";
  case AttentionMismatch::SoftmaxDenominator:
    return "the softmax denominator is not a zero-initialised row sum of the "
           "exponentials";
  case AttentionMismatch::SoftmaxNoMaxShift:
    return "the softmax does not subtract the row maximum";
  case AttentionMismatch::SoftmaxRowMax:
    return "the softmax row maximum is not a max-reduction of the scores";
  case AttentionMismatch::NotMaskedRowGuard:
    return "the select after the softmax is not SDPA's fully-masked-row guard "
           "(rows whose scores are all -inf set to 0)";
  case AttentionMismatch::NoMaskAdd:
    return "no additive mask in front of the softmax";
  case AttentionMismatch::Softcapping:
    return "the scores are soft-capped (cap * tanh(scores / cap), Gemma-2's "
           "attn_logit_softcapping), which snapkv.select does not compute";
  case AttentionMismatch::ScaleNotConstant:
    return "the scores are scaled by a factor that is not a constant";
  case AttentionMismatch::ScaleNotPositive:
    return "the scores are not scaled by a positive finite constant";
  case AttentionMismatch::ScoresNotMatmul:
    return "the masked scores are not a constant multiple of a Q . K^T "
           "batch_matmul";
  case AttentionMismatch::QueriesNotCollapsed:
    return "the queries are not a [B, Hq, Lq, D] tensor collapsed to "
           "[B*Hq, Lq, D]";
  case AttentionMismatch::DynamicQueryDims:
    return "the batch, head count or head dim of the queries is dynamic";
  case AttentionMismatch::KeysNotTransposed:
    return "the right operand of Q . K^T is not the keys transposed on their "
           "last two dims";
  case AttentionMismatch::NotGqaRepeat:
    return "the 5-D tensor collapsed into the attention heads is not a GQA "
           "repeat (HuggingFace repeat_kv)";
  case AttentionMismatch::NoRepeatNorHeadPerQuery:
    return "keys/values reach the attention neither through a GQA repeat nor "
           "with one kv head per query head";
  case AttentionMismatch::ValuesNotCollapsed:
    return "the right operand of P . V is not a collapse of the values";
  case AttentionMismatch::KVTypesDiffer:
    return "keys and values before the repeat are not 4-D tensors of one type";
  case AttentionMismatch::DynamicKVHeads:
    return "the kv head count is dynamic";
  case AttentionMismatch::HeadCountMismatch:
    return "query heads are not a multiple of kv heads of the same batch and "
           "head dim";
  case AttentionMismatch::ElementTypesDiffer:
    return "queries and keys have different element types";
  case AttentionMismatch::RepeatCopiesMismatch:
    return "the GQA repeat does not produce one copy per query head";
  case AttentionMismatch::SdpaNotCollapsed:
    return "an operand of snapkv.sdpa is not a [B, H, L, D] tensor with "
           "batch and heads collapsed";
  case AttentionMismatch::SdpaMaskNotRowColumn:
    return "the mask of snapkv.sdpa is not a [B, H, Lq, Lk] tensor (or its "
           "broadcast over batch and heads) with batch and heads collapsed";
  }
  llvm_unreachable("unknown AttentionMismatch");
}

std::string AttentionFailure::message() const {
  std::string text = attentionMismatchMessage(kind).str();
  if (!detail.empty())
    text += " (" + detail + ")";
  return text;
}

/// The model's `[1, 1, Lq, Lk]` mask condition when `value` is the
/// importer's broadcast of it over the batch (`[B, 1, Lq, Lk]`, a generic
/// re-reading it at batch 0: a batched decode step, where every sequence's
/// one query sees all its keys); else `value`.
static Value skipBatchBroadcast(Value value) {
  linalg::GenericOp generic;
  tensor::ExtractOp extract = extractBody(value, generic);
  if (!extract)
    return value;
  auto type = cast<RankedTensorType>(value.getType());
  auto source = cast<RankedTensorType>(extract.getTensor().getType());
  if (type.getRank() != 4 || source.getRank() != 4 ||
      source.getDimSize(0) != 1 ||
      !matchPattern(extract.getIndices()[0], m_Zero()))
    return value;
  for (unsigned dim = 1; dim < 4; ++dim) {
    Value index = extract.getIndices()[dim];
    bool unitZero = type.getDimSize(dim) == 1 && matchPattern(index, m_Zero());
    if (source.getDimSize(dim) != type.getDimSize(dim) ||
        (!unitZero && !isIterationIndex(index, dim)))
      return value;
  }
  return extract.getTensor();
}

Value mlir::snapkv::skipCopies(Value value) {
  while (true) {
    linalg::GenericOp generic;
    tensor::ExtractOp extract = extractBody(value, generic);
    if (!extract || extract.getTensor().getType() != value.getType())
      return value;
    auto indices = extract.getIndices();
    auto type = cast<RankedTensorType>(value.getType());
    for (auto [dim, index] : llvm::enumerate(indices)) {
      bool unitZero =
          type.getDimSize(dim) == 1 && matchPattern(index, m_Zero());
      if (!unitZero && !isIterationIndex(index, dim))
        return value;
    }
    value = extract.getTensor();
  }
}

bool mlir::snapkv::isArange(Value value) {
  while (auto expand = value.getDefiningOp<tensor::ExpandShapeOp>())
    value = expand.getSrc();
  auto generic = value.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 ||
      generic.getNumDpsInputs() != 0 || generic.getNumLoops() != 1 ||
      !allParallel(generic) || !isIdentity(generic.getIndexingMapsArray()[0]))
    return false;
  auto cast = yielded<arith::IndexCastOp>(generic);
  if (!cast)
    return false;
  auto index = cast.getIn().getDefiningOp<linalg::IndexOp>();
  return index && index.getDim() == 0;
}

static LogicalResult matchKeysValues(AttentionMatch &m, Value keys,
                                     Value values, AttentionFailure &failure);

/// Sets `m`'s queries [B, Hq, Lq, D] and their static dims.
static LogicalResult setQueries(AttentionMatch &m, Value queries,
                                AttentionFailure &failure) {
  m.queries = queries;
  auto qType = cast<RankedTensorType>(queries.getType());
  if (qType.isDynamicDim(0) || qType.isDynamicDim(1) || qType.isDynamicDim(3)) {
    failure = {AttentionMismatch::DynamicQueryDims, ""};
    return mlir::failure();
  }
  m.batch = qType.getDimSize(0);
  m.queryHeads = qType.getDimSize(1);
  m.headDim = qType.getDimSize(3);
  return success();
}

FailureOr<AttentionMatch>
mlir::snapkv::matchAttention(linalg::BatchMatmulOp outputMatmul,
                             AttentionFailure &failure, bool maskOptional) {
  auto fail = [&](AttentionMismatch kind,
                  std::string detail = "") -> FailureOr<AttentionMatch> {
    failure = {kind, std::move(detail)};
    return FailureOr<AttentionMatch>(mlir::failure());
  };
  AttentionMatch m;
  m.outputMatmul = outputMatmul;
  if (!outputMatmul.hasPureTensorSemantics())
    return fail(AttentionMismatch::OnBuffers);
  if (outputMatmul.hasUserDefinedMaps())
    return fail(AttentionMismatch::ExplicitMaps);

  // Softmax: P = exp(x - max(x)) / sum(exp(x - max(x))) over the key dim,
  // under SDPA's guard when there is one.
  Value probs =
      collapsedFrom(outputMatmul.getDpsInputs()[0], {{0, 1}, {2}, {3}});
  if (!probs)
    return fail(AttentionMismatch::ProbabilitiesNotCollapsed);
  probs = skipCopies(probs);
  Value guarded;
  if (linalg::GenericOp guard = selectGeneric(probs)) {
    // Only a select of softmax rows is a guard candidate.
    if (!elementwise<arith::DivFOp>(skipCopies(guard.getDpsInputs()[2]), 2, 0,
                                    1))
      return fail(AttentionMismatch::NoSoftmaxDivision);
    guarded = guardedScores(guard);
    if (!guarded)
      return fail(AttentionMismatch::NotMaskedRowGuard);
    m.maskedRowGuard = guard;
    probs = skipCopies(guard.getDpsInputs()[2]);
  }
  auto divide = elementwise<arith::DivFOp>(probs, 2, 0, 1);
  if (!divide || !isRowStatisticMap(divide.getIndexingMapsArray()[1]))
    return fail(AttentionMismatch::NoSoftmaxDivision);
  Value exps = divide.getDpsInputs()[0];
  auto exp = exps.getDefiningOp<linalg::GenericOp>();
  if (!exp || exp.getNumDpsInputs() != 1 || !allParallel(exp) ||
      !yielded<math::ExpOp>(exp) ||
      !isBlockArg(yielded<math::ExpOp>(exp).getOperand(), exp, 0))
    return fail(AttentionMismatch::NoSoftmaxExp);
  auto sum =
      skipCopies(divide.getDpsInputs()[1]).getDefiningOp<linalg::GenericOp>();
  if (!sum || sum.getNumDpsInputs() != 1 || sum.getDpsInputs()[0] != exps ||
      !reducesLastDim(sum) || !yielded<arith::AddFOp>(sum) ||
      fillValue(sum.getDpsInits()[0]) != 0.0)
    return fail(AttentionMismatch::SoftmaxDenominator);
  auto shifted = elementwise<arith::SubFOp>(exp.getDpsInputs()[0], 2, 0, 1);
  if (!shifted || !isRowStatisticMap(shifted.getIndexingMapsArray()[1]))
    return fail(AttentionMismatch::SoftmaxNoMaxShift);
  Value scores = shifted.getDpsInputs()[0];
  Value rowMax = shifted.getDpsInputs()[1];
  if (Value collapsed = expandedFrom(rowMax, {{0}, {1}, {2, 3}}))
    rowMax = collapsed;
  auto maxOp = rowMax.getDefiningOp<linalg::GenericOp>();
  auto maxResult = dyn_cast<OpResult>(rowMax);
  std::optional<double> maxInit =
      maxOp ? fillValue(maxOp.getDpsInits()[maxResult.getResultNumber()])
            : std::nullopt;
  if (!maxOp || maxOp.getNumDpsInputs() != 1 ||
      maxOp.getDpsInputs()[0] != scores || !reducesLastDim(maxOp) ||
      !yielded<arith::MaximumFOp>(maxOp, maxResult.getResultNumber()) ||
      !maxInit || *maxInit > -3.0e38)
    return fail(AttentionMismatch::SoftmaxRowMax);
  // The guard must test the very scores the softmax normalises.
  if (guarded && skipCopies(guarded) != skipCopies(scores))
    return fail(AttentionMismatch::NotMaskedRowGuard);

  // Scores: (Q . K^T) * scale + mask; the scale may also be split into
  // factors on Q and on K^T (SDPA's decomposition).
  m.maskAdd = maskAddOf(scores);
  if (m.maskAdd && !isIdentity(m.maskAdd.getIndexingMapsArray()[0]))
    m.maskAdd = nullptr;
  if (!m.maskAdd && !maskOptional)
    return fail(AttentionMismatch::NoMaskAdd);
  m.mask = m.maskAdd ? m.maskAdd.getDpsInputs()[1] : Value();
  double scale = 1.0;
  FailureOr<Value> unscaled =
      peelScales(m.maskAdd ? m.maskAdd.getDpsInputs()[0] : scores, scale,
                 /*requireConstant=*/true, failure);
  if (failed(unscaled))
    return mlir::failure();
  Value product = expandedFrom(*unscaled, {{0, 1}, {2}, {3}});
  m.scoresMatmul =
      product ? product.getDefiningOp<linalg::BatchMatmulOp>() : nullptr;
  if (!m.scoresMatmul || m.scoresMatmul.hasUserDefinedMaps())
    return fail(isSoftcapped(*unscaled) ? AttentionMismatch::Softcapping
                                        : AttentionMismatch::ScoresNotMatmul);

  // Operands: queries, then keys and values through the GQA repeat.
  Value queries =
      collapsedFrom(m.scoresMatmul.getDpsInputs()[0], {{0, 1}, {2}, {3}});
  if (!queries)
    return fail(AttentionMismatch::QueriesNotCollapsed);
  // A Q-side factor that does not fold stays part of the queries: the select
  // then reads exactly what the attention reads.
  if (failed(
          setQueries(m,
                     skipWidening(*peelScales(
                         queries, scale, /*requireConstant=*/false, failure)),
                     failure)))
    return mlir::failure();

  FailureOr<Value> keys =
      keysBeforeTranspose(m.scoresMatmul.getDpsInputs()[1], scale, failure);
  if (failed(keys))
    return mlir::failure();
  auto effective = static_cast<float>(scale);
  if (!(effective > 0.0f) || !std::isfinite(effective))
    return fail(AttentionMismatch::ScaleNotPositive,
                "the factors multiply to " + std::to_string(scale));
  m.scale = effective;
  Value values = valuesOperand(outputMatmul.getDpsInputs()[1]);
  if (!values)
    return fail(AttentionMismatch::ValuesNotCollapsed);
  if (failed(matchKeysValues(m, *keys, values, failure)))
    return mlir::failure();
  return m;
}

/// Sets `m`'s keys and values from the operands attention reads (through the
/// GQA repeat) and checks them against its queries.
static LogicalResult matchKeysValues(AttentionMatch &m, Value keys,
                                     Value values, AttentionFailure &failure) {
  auto fail = [&](AttentionMismatch kind, std::string detail = "") {
    failure = {kind, std::move(detail)};
    return mlir::failure();
  };
  FailureOr<RepeatedKV> k =
      matchRepeat(skipWidening(keys), m.queryHeads, failure);
  if (failed(k))
    return mlir::failure();
  FailureOr<RepeatedKV> v =
      matchRepeat(skipWidening(values), m.queryHeads, failure);
  if (failed(v))
    return mlir::failure();
  auto qType = cast<RankedTensorType>(m.queries.getType());
  m.keys = *k;
  m.values = *v;
  auto kType = cast<RankedTensorType>(m.keys.source.getType());
  auto vType = cast<RankedTensorType>(m.values.source.getType());
  if (kType.getRank() != 4 || kType != vType)
    return fail(AttentionMismatch::KVTypesDiffer);
  if (kType.isDynamicDim(1))
    return fail(AttentionMismatch::DynamicKVHeads);
  m.kvHeads = kType.getDimSize(1);
  if (kType.getDimSize(0) != m.batch || kType.getDimSize(3) != m.headDim ||
      m.kvHeads == 0 || m.queryHeads % m.kvHeads != 0)
    return fail(AttentionMismatch::HeadCountMismatch,
                std::to_string(m.queryHeads) + " query heads, " +
                    std::to_string(m.kvHeads) + " kv heads");
  if (qType.getElementType() != kType.getElementType())
    return fail(AttentionMismatch::ElementTypesDiffer);
  for (linalg::GenericOp repeat : {m.keys.repeatOp, m.values.repeatOp}) {
    if (!repeat)
      continue;
    auto repeated = cast<RankedTensorType>(repeat.getResult(0).getType());
    if (repeated.getDimSize(1) * repeated.getDimSize(2) != m.queryHeads)
      return fail(AttentionMismatch::RepeatCopiesMismatch);
  }
  return success();
}

FailureOr<AttentionMatch> mlir::snapkv::matchSdpa(SdpaOp op,
                                                  AttentionFailure &failure) {
  auto fail = [&](AttentionMismatch kind,
                  std::string detail = "") -> FailureOr<AttentionMatch> {
    failure = {kind, std::move(detail)};
    return FailureOr<AttentionMatch>(mlir::failure());
  };
  AttentionMatch m;
  m.sdpa = op;
  SmallVector<ReassociationIndices> heads{{0, 1}, {2}, {3}};
  Value queries = collapsedFrom(op.getQueries(), heads);
  Value keys = collapsedFrom(op.getKeys(), heads);
  Value values = collapsedFrom(op.getValues(), heads);
  if (!queries || !keys || !values)
    return fail(AttentionMismatch::SdpaNotCollapsed);
  if (failed(setQueries(m, skipWidening(queries), failure)))
    return mlir::failure();
  auto scale = static_cast<float>(op.getEffectiveScale());
  if (!(scale > 0.0f) || !std::isfinite(scale))
    return fail(AttentionMismatch::ScaleNotPositive,
                "the scale is " + std::to_string(scale));
  m.scale = scale;
  if (Value mask = op.getMask()) {
    // The importer broadcasts the model's [B|1, 1, Lq, Lk] condition over
    // the heads before collapsing them: read through the broadcast.
    m.mask = collapsedFrom(mask, heads);
    if (!m.mask)
      return fail(AttentionMismatch::SdpaMaskNotRowColumn);
    auto broadcast = m.mask.getDefiningOp<linalg::GenericOp>();
    if (broadcast && broadcast.getNumDpsInputs() == 1 &&
        allParallel(broadcast) &&
        isBlockArg(broadcast.getBody()->getTerminator()->getOperand(0),
                   broadcast, 0)) {
      AffineMap map = broadcast.getIndexingMapsArray()[0];
      MLIRContext *ctx = map.getContext();
      if (map.getNumResults() != 4 ||
          map.getResult(2) != getAffineDimExpr(2, ctx) ||
          map.getResult(3) != getAffineDimExpr(3, ctx))
        return fail(AttentionMismatch::SdpaMaskNotRowColumn);
      m.mask = skipBatchBroadcast(broadcast.getDpsInputs()[0]);
    }
  }
  if (failed(matchKeysValues(m, keys, values, failure)))
    return mlir::failure();
  return m;
}
