//===- AttentionMatcher.cpp - find decomposed attention in imported IR ---===//
//
// The shapes matched here are documented op by op in docs/model-ir.md.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/Transforms/AttentionMatcher.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace mlir::snapkv;

namespace {

/// The op that produces yield operand `result` of `generic`, if it is an OpTy.
template <typename OpTy>
OpTy yielded(linalg::GenericOp generic, unsigned result = 0) {
  auto yield = cast<linalg::YieldOp>(generic.getBody()->getTerminator());
  if (result >= yield.getNumOperands())
    return nullptr;
  return yield.getOperand(result).getDefiningOp<OpTy>();
}

bool isBlockArg(Value value, linalg::GenericOp generic, unsigned number) {
  auto arg = dyn_cast<BlockArgument>(value);
  return arg && arg.getOwner() == generic.getBody() &&
         arg.getArgNumber() == number;
}

bool allParallel(linalg::GenericOp generic) {
  return llvm::all_of(generic.getIteratorTypesArray(), [](auto type) {
    return type == utils::IteratorType::parallel;
  });
}

/// Parallel over every dim but the last, which is reduced.
bool reducesLastDim(linalg::GenericOp generic) {
  auto types = generic.getIteratorTypesArray();
  if (types.empty() || types.back() != utils::IteratorType::reduction)
    return false;
  return llvm::all_of(ArrayRef(types).drop_back(), [](auto type) {
    return type == utils::IteratorType::parallel;
  });
}

/// An elementwise generic with `inputs` inputs whose single result is
/// `OpTy(arg lhsArg, arg rhsArg)`.
template <typename OpTy>
linalg::GenericOp elementwise(Value value, unsigned inputs, unsigned lhsArg,
                              unsigned rhsArg) {
  auto generic = value.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 ||
      generic.getNumDpsInputs() != inputs || !allParallel(generic))
    return nullptr;
  auto op = yielded<OpTy>(generic);
  if (!op || op->getNumOperands() != 2 ||
      !isBlockArg(op->getOperand(0), generic, lhsArg) ||
      !isBlockArg(op->getOperand(1), generic, rhsArg))
    return nullptr;
  return generic;
}

bool isIdentity(AffineMap map) { return map.isIdentity(); }

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

/// A splat float constant, as a scalar or as a (0-d) tensor.
std::optional<double> floatConstant(Value value) {
  FloatAttr scalar;
  if (matchPattern(value, m_Constant(&scalar)))
    return scalar.getValueAsDouble();
  DenseFPElementsAttr dense;
  if (matchPattern(value, m_Constant(&dense)) && dense.isSplat())
    return dense.getSplatValue<APFloat>().convertToDouble();
  return std::nullopt;
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
    if (source && reshapeFits(source,
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
    auto expected = AffineMap::get(
        5, 0,
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
  bool batchOk = isIterationIndex(indices[0], 0) ||
                 (matchPattern(indices[0], m_Zero()) &&
                  sourceType.getDimSize(0) == 1);
  if (!batchOk || !isIterationIndex(indices[1], 1) ||
      !matchPattern(indices[2], m_Zero()) ||
      !isIterationIndex(indices[3], 3) || !isIterationIndex(indices[4], 4))
    return nullptr;
  return source;
}

/// Traces an attention operand back through the GQA repeat. `value` is
/// [B, Hq, T, D] or [B * Hq, T, D].
std::optional<RepeatedKV> matchRepeat(Value value, int64_t queryHeads,
                                      std::string &why) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<ReassociationIndices> heads =
      type.getRank() == 4
          ? SmallVector<ReassociationIndices>{{0}, {1, 2}, {3}, {4}}
          : SmallVector<ReassociationIndices>{{0, 1, 2}, {3}, {4}};
  if (Value repeated = collapsedFrom(value, heads)) {
    auto repeat = repeated.getDefiningOp<linalg::GenericOp>();
    Value source = repeat ? repeatSource(repeat) : Value();
    if (!source) {
      why = "the 5-D tensor collapsed into the attention heads is not a GQA "
            "repeat (HuggingFace repeat_kv)";
      return std::nullopt;
    }
    return RepeatedKV{source, value, repeat};
  }
  // No repeat: only right when every query head has its own kv head.
  if (type.getRank() == 4 && type.getDimSize(1) == queryHeads)
    return RepeatedKV{value, value, nullptr};
  why = "keys/values reach the attention neither through a GQA repeat nor "
        "with one kv head per query head";
  return std::nullopt;
}

/// The key operand of Q . K^T: collapse(transpose(K, [0, 1, 3, 2])).
Value keysBeforeTranspose(Value rhs) {
  Value transposed = collapsedFrom(rhs, {{0, 1}, {2}, {3}});
  if (!transposed)
    return nullptr;
  auto transpose = skipCopies(transposed).getDefiningOp<linalg::TransposeOp>();
  if (!transpose ||
      transpose.getPermutation() != ArrayRef<int64_t>{0, 1, 3, 2})
    return nullptr;
  return transpose.getInput();
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

std::optional<AttentionMatch>
mlir::snapkv::matchAttention(linalg::BatchMatmulOp outputMatmul,
                             std::string &why) {
  AttentionMatch m;
  m.outputMatmul = outputMatmul;
  if (!outputMatmul.hasPureTensorSemantics()) {
    why = "batch_matmul on buffers (the rewrite works on tensors, before "
          "bufferization)";
    return std::nullopt;
  }
  if (outputMatmul.hasUserDefinedMaps()) {
    why = "batch_matmul with explicit indexing maps";
    return std::nullopt;
  }

  // Softmax: P = exp(x - max(x)) / sum(exp(x - max(x))) over the key dim.
  Value probs = collapsedFrom(outputMatmul.getDpsInputs()[0], {{0, 1}, {2}, {3}});
  if (!probs) {
    why = "the left operand of the second batch_matmul is not a [B*H, Lq, Lk] "
          "collapse of attention probabilities";
    return std::nullopt;
  }
  auto divide = elementwise<arith::DivFOp>(skipCopies(probs), 2, 0, 1);
  if (!divide || !isRowStatisticMap(divide.getIndexingMapsArray()[1])) {
    why = "attention probabilities are not a softmax (no row-sum division)";
    return std::nullopt;
  }
  Value exps = divide.getDpsInputs()[0];
  auto exp = exps.getDefiningOp<linalg::GenericOp>();
  if (!exp || exp.getNumDpsInputs() != 1 || !allParallel(exp) ||
      !yielded<math::ExpOp>(exp) ||
      !isBlockArg(yielded<math::ExpOp>(exp).getOperand(), exp, 0)) {
    why = "attention probabilities are not a softmax (no exp)";
    return std::nullopt;
  }
  auto sum = skipCopies(divide.getDpsInputs()[1]).getDefiningOp<linalg::GenericOp>();
  if (!sum || sum.getNumDpsInputs() != 1 || sum.getDpsInputs()[0] != exps ||
      !reducesLastDim(sum) || !yielded<arith::AddFOp>(sum) ||
      fillValue(sum.getDpsInits()[0]) != 0.0) {
    why = "the softmax denominator is not a zero-initialised row sum of the "
          "exponentials";
    return std::nullopt;
  }
  auto shifted = elementwise<arith::SubFOp>(exp.getDpsInputs()[0], 2, 0, 1);
  if (!shifted || !isRowStatisticMap(shifted.getIndexingMapsArray()[1])) {
    why = "the softmax does not subtract the row maximum";
    return std::nullopt;
  }
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
      !maxInit || *maxInit > -3.0e38) {
    why = "the softmax row maximum is not a max-reduction of the scores";
    return std::nullopt;
  }

  // Scores: (Q . K^T) * scale + mask.
  m.maskAdd = elementwise<arith::AddFOp>(scores, 2, 0, 1);
  if (!m.maskAdd || !isIdentity(m.maskAdd.getIndexingMapsArray()[0])) {
    why = "no additive mask in front of the softmax";
    return std::nullopt;
  }
  m.mask = m.maskAdd.getDpsInputs()[1];
  auto scaleOp = m.maskAdd.getDpsInputs()[0].getDefiningOp<linalg::GenericOp>();
  auto mul = scaleOp && scaleOp.getNumDpsInputs() == 1 && allParallel(scaleOp)
                 ? yielded<arith::MulFOp>(scaleOp)
                 : nullptr;
  std::optional<double> scale;
  if (mul && isBlockArg(mul.getLhs(), scaleOp, 0))
    scale = floatConstant(mul.getRhs());
  else if (mul && isBlockArg(mul.getRhs(), scaleOp, 0))
    scale = floatConstant(mul.getLhs());
  if (!scale || !(*scale > 0) || !std::isfinite(*scale)) {
    why = "the scores are not scaled by a positive constant before the mask";
    return std::nullopt;
  }
  m.scale = *scale;
  Value product = expandedFrom(scaleOp.getDpsInputs()[0], {{0, 1}, {2}, {3}});
  m.scoresMatmul = product ? product.getDefiningOp<linalg::BatchMatmulOp>()
                           : nullptr;
  if (!m.scoresMatmul || m.scoresMatmul.hasUserDefinedMaps()) {
    why = "the scaled scores do not come from a Q . K^T batch_matmul";
    return std::nullopt;
  }

  // Operands: queries, then keys and values through the GQA repeat.
  m.queries = collapsedFrom(m.scoresMatmul.getDpsInputs()[0], {{0, 1}, {2}, {3}});
  if (!m.queries) {
    why = "the queries are not a [B, Hq, Lq, D] tensor collapsed to "
          "[B*Hq, Lq, D]";
    return std::nullopt;
  }
  auto qType = cast<RankedTensorType>(m.queries.getType());
  if (qType.isDynamicDim(0) || qType.isDynamicDim(1) || qType.isDynamicDim(3)) {
    why = "the batch, head count or head dim of the queries is dynamic";
    return std::nullopt;
  }
  m.batch = qType.getDimSize(0);
  m.queryHeads = qType.getDimSize(1);
  m.headDim = qType.getDimSize(3);

  Value keys = keysBeforeTranspose(m.scoresMatmul.getDpsInputs()[1]);
  if (!keys) {
    why = "the right operand of Q . K^T is not the keys transposed on their "
          "last two dims";
    return std::nullopt;
  }
  std::optional<RepeatedKV> k = matchRepeat(keys, m.queryHeads, why);
  if (!k)
    return std::nullopt;
  Value values = valuesOperand(outputMatmul.getDpsInputs()[1]);
  if (!values) {
    why = "the right operand of P . V is not a collapse of the values";
    return std::nullopt;
  }
  std::optional<RepeatedKV> v = matchRepeat(values, m.queryHeads, why);
  if (!v)
    return std::nullopt;
  m.keys = *k;
  m.values = *v;
  auto kType = cast<RankedTensorType>(m.keys.source.getType());
  auto vType = cast<RankedTensorType>(m.values.source.getType());
  if (kType.getRank() != 4 || kType != vType) {
    why = "keys and values before the repeat are not 4-D tensors of one type";
    return std::nullopt;
  }
  if (kType.isDynamicDim(1)) {
    why = "the kv head count is dynamic";
    return std::nullopt;
  }
  m.kvHeads = kType.getDimSize(1);
  if (kType.getDimSize(0) != m.batch || kType.getDimSize(3) != m.headDim ||
      m.kvHeads == 0 || m.queryHeads % m.kvHeads != 0) {
    why = "query heads (" + std::to_string(m.queryHeads) +
          ") are not a multiple of kv heads (" + std::to_string(m.kvHeads) +
          ") of the same batch and head dim";
    return std::nullopt;
  }
  if (qType.getElementType() != kType.getElementType()) {
    why = "queries and keys have different element types";
    return std::nullopt;
  }
  if (m.keys.repeatOp) {
    auto repeated = cast<RankedTensorType>(m.keys.repeatOp.getResult(0).getType());
    if (repeated.getDimSize(1) * repeated.getDimSize(2) != m.queryHeads) {
      why = "the GQA repeat does not produce one copy per query head";
      return std::nullopt;
    }
  }
  if (m.values.repeatOp) {
    auto repeated =
        cast<RankedTensorType>(m.values.repeatOp.getResult(0).getType());
    if (repeated.getDimSize(1) * repeated.getDimSize(2) != m.queryHeads) {
      why = "the GQA repeat does not produce one copy per query head";
      return std::nullopt;
    }
  }
  return m;
}

namespace {
/// Which iteration dim of `generic` indexes the one non-unit dim of operand
/// `input` (a 1-D tensor expanded to the generic's rank).
std::optional<unsigned> varyingDim(linalg::GenericOp generic, unsigned input) {
  auto type = cast<RankedTensorType>(generic.getDpsInputs()[input].getType());
  std::optional<unsigned> data;
  for (int64_t i = 0; i < type.getRank(); ++i) {
    if (type.getDimSize(i) == 1)
      continue;
    if (data)
      return std::nullopt;
    data = i;
  }
  if (!data)
    return std::nullopt;
  auto dim = dyn_cast<AffineDimExpr>(
      generic.getIndexingMapsArray()[input].getResult(*data));
  if (!dim)
    return std::nullopt;
  return dim.getPosition();
}
} // namespace

std::optional<CausalMask>
mlir::snapkv::matchCausalMask(AttentionMatch match, std::string &why) {
  // The mask add broadcasts mask[b|0, 0|h, i, j] onto scores[b, h, i, j].
  AffineMap map = match.maskAdd.getIndexingMapsArray()[1];
  MLIRContext *ctx = map.getContext();
  if (map.getNumResults() != 4 ||
      map.getResult(2) != getAffineDimExpr(2, ctx) ||
      map.getResult(3) != getAffineDimExpr(3, ctx)) {
    why = "the mask is not indexed by score row and column";
    return std::nullopt;
  }
  auto select = skipCopies(match.mask).getDefiningOp<linalg::GenericOp>();
  auto pick = select && select.getNumDpsInputs() == 3 && allParallel(select)
                  ? yielded<arith::SelectOp>(select)
                  : nullptr;
  std::optional<double> visible, hidden;
  if (pick && isBlockArg(pick.getCondition(), select, 0) &&
      isBlockArg(pick.getTrueValue(), select, 1) &&
      isBlockArg(pick.getFalseValue(), select, 2) &&
      isIdentity(select.getIndexingMapsArray()[0]) &&
      isIdentity(select.getIndexingMapsArray()[3])) {
    visible = floatConstant(select.getDpsInputs()[1]);
    hidden = floatConstant(select.getDpsInputs()[2]);
  }
  if (!visible || *visible != 0.0 || !hidden || *hidden > -1.0e30) {
    why = "the mask is not select(condition, 0, a very negative value)";
    return std::nullopt;
  }
  auto compare = skipCopies(select.getDpsInputs()[0])
                     .getDefiningOp<linalg::GenericOp>();
  auto cmp = compare && compare.getNumDpsInputs() == 2 && allParallel(compare) &&
                     isIdentity(compare.getIndexingMapsArray()[2])
                 ? yielded<arith::CmpIOp>(compare)
                 : nullptr;
  // key <= query, written either way round.
  unsigned keyInput = 0;
  bool causal = false;
  if (cmp && cmp.getPredicate() == arith::CmpIPredicate::sle &&
      isBlockArg(cmp.getLhs(), compare, 0) &&
      isBlockArg(cmp.getRhs(), compare, 1)) {
    causal = true;
    keyInput = 0;
  } else if (cmp && cmp.getPredicate() == arith::CmpIPredicate::sge &&
             isBlockArg(cmp.getLhs(), compare, 0) &&
             isBlockArg(cmp.getRhs(), compare, 1)) {
    causal = true;
    keyInput = 1;
  }
  if (!causal) {
    why = "the mask condition is not `key position <= query position`";
    return std::nullopt;
  }
  unsigned queryInput = 1 - keyInput;
  CausalMask mask;
  mask.keyPositions = compare.getDpsInputs()[keyInput];
  mask.queryPositions = compare.getDpsInputs()[queryInput];
  if (!isArange(mask.keyPositions) || varyingDim(compare, keyInput) != 3u) {
    why = "the mask's key positions are not 0, 1, 2, ... along the score "
          "columns";
    return std::nullopt;
  }
  auto queryType = cast<RankedTensorType>(mask.queryPositions.getType());
  if (!queryType.hasStaticShape() || queryType.getNumElements() != 1) {
    mask.queryIsRow = varyingDim(compare, queryInput) == 2u;
    if (!mask.queryIsRow) {
      why = "the mask's query positions do not vary along the score rows";
      return std::nullopt;
    }
  }
  return mask;
}

namespace {
std::optional<PositionValue> add(std::optional<PositionValue> a,
                                 std::optional<PositionValue> b) {
  if (!a || !b)
    return std::nullopt;
  if (a->base != PositionValue::Base::Zero &&
      b->base != PositionValue::Base::Zero)
    return std::nullopt;
  PositionValue sum = a->base == PositionValue::Base::Zero ? *b : *a;
  sum.offset = a->offset + b->offset;
  return sum;
}

std::optional<PositionValue> evaluate(Value value, unsigned depth);

/// A scalar computed inside a generic's body, with block arguments standing
/// for the (one-element) operands.
std::optional<PositionValue> evaluateInBody(Value value,
                                            linalg::GenericOp generic,
                                            unsigned depth) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    if (arg.getOwner() != generic.getBody() ||
        arg.getArgNumber() >= generic.getNumDpsInputs())
      return std::nullopt;
    return evaluate(generic.getDpsInputs()[arg.getArgNumber()], depth + 1);
  }
  Operation *op = value.getDefiningOp();
  if (!op)
    return std::nullopt;
  if (!generic->isProperAncestor(op))
    return evaluate(value, depth + 1);
  if (auto addi = dyn_cast<arith::AddIOp>(op))
    return add(evaluateInBody(addi.getLhs(), generic, depth + 1),
               evaluateInBody(addi.getRhs(), generic, depth + 1));
  if (isa<arith::IndexCastOp, arith::ExtSIOp>(op))
    return evaluateInBody(op->getOperand(0), generic, depth + 1);
  return evaluate(value, depth + 1);
}

std::optional<PositionValue> evaluate(Value value, unsigned depth) {
  if (depth > 64)
    return std::nullopt;
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    if (!isa<func::FuncOp>(arg.getOwner()->getParentOp()))
      return std::nullopt;
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (type && (!type.hasStaticShape() || type.getNumElements() != 1))
      return std::nullopt;
    PositionValue result;
    result.base = PositionValue::Base::Argument;
    result.argument = arg;
    return result;
  }
  Operation *op = value.getDefiningOp();
  if (!op)
    return std::nullopt;
  IntegerAttr constant;
  if (matchPattern(value, m_Constant(&constant)))
    return PositionValue{PositionValue::Base::Zero, constant.getInt(), {}};
  if (auto addi = dyn_cast<arith::AddIOp>(op))
    return add(evaluate(addi.getLhs(), depth + 1),
               evaluate(addi.getRhs(), depth + 1));
  if (isa<arith::IndexCastOp, arith::ExtSIOp>(op))
    return evaluate(op->getOperand(0), depth + 1);
  if (auto dim = dyn_cast<tensor::DimOp>(op)) {
    auto arg = dyn_cast<BlockArgument>(dim.getSource());
    std::optional<int64_t> index = dim.getConstantIndex();
    if (!arg || !isa<func::FuncOp>(arg.getOwner()->getParentOp()) || !index ||
        *index != 2)
      return std::nullopt;
    PositionValue result;
    result.base = PositionValue::Base::CacheLength;
    result.argument = arg;
    return result;
  }
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op))
    return evaluate(op->getOperand(0), depth + 1);
  if (auto fill = dyn_cast<linalg::FillOp>(op))
    return evaluate(fill.getInputs()[0], depth + 1);
  if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || !type.hasStaticShape() || type.getNumElements() != 1 ||
        generic.getNumResults() != 1)
      return std::nullopt;
    auto yield = cast<linalg::YieldOp>(generic.getBody()->getTerminator());
    return evaluateInBody(yield.getOperand(0), generic, depth + 1);
  }
  return std::nullopt;
}
} // namespace

std::optional<PositionValue> mlir::snapkv::evaluatePosition(Value value) {
  return evaluate(value, 0);
}
