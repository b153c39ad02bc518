//===- CausalMask.cpp - causal masks and positions in imported IR ---------===//
//
// Which keys a recognised attention's mask hides (causal, optionally a
// sliding window) and the positions it compares (AttentionMatcher.h).
//
//===----------------------------------------------------------------------===//

#include "GenericMatchers.h"
#include "snapkv/Dialect/SnapKV/Transforms/AttentionMatcher.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::matchers;

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

Value withoutExpands(Value value) {
  while (auto expand = value.getDefiningOp<tensor::ExpandShapeOp>())
    value = expand.getSrc();
  return value;
}

/// A generic over two inputs whose result is `cmpi(arg0, arg1)`.
arith::CmpIOp compareBody(Value value, linalg::GenericOp &generic) {
  generic = skipCopies(value).getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 ||
      generic.getNumDpsInputs() != 2 || !allParallel(generic) ||
      !isIdentity(generic.getIndexingMapsArray()[2]))
    return nullptr;
  auto cmp = yielded<arith::CmpIOp>(generic);
  if (!cmp || !isBlockArg(cmp.getLhs(), generic, 0) ||
      !isBlockArg(cmp.getRhs(), generic, 1))
    return nullptr;
  return cmp;
}

/// The terms of a conjunction built from elementwise `andi` generics, with
/// splat `true` constants dropped (the importer's `true & x`).
void collectConjuncts(Value value, SmallVectorImpl<Value> &terms,
                      unsigned depth = 0) {
  auto generic = skipCopies(value).getDefiningOp<linalg::GenericOp>();
  bool isAnd = depth < 8 && generic &&
               elementwise<arith::AndIOp>(generic.getResult(0), 2, 0, 1) &&
               llvm::all_of(
                   generic.getIndexingMapsArray(),
                   [](AffineMap map) {
                     return map.isIdentity() || map.getNumResults() == 0;
                   });
  if (!isAnd) {
    terms.push_back(value);
    return;
  }
  for (Value input : generic.getDpsInputs()) {
    DenseIntElementsAttr dense;
    if (matchPattern(input, m_Constant(&dense)) && dense.isSplat() &&
        dense.getSplatValue<APInt>().isOne())
      continue;
    collectConjuncts(input, terms, depth + 1);
  }
}

/// `query - c` (or `query + (-c)`) computed elementwise from `query`;
/// returns `query` and sets `offset = c`.
Value shiftedPosition(Value value, int64_t &offset) {
  auto generic = skipCopies(value).getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 ||
      generic.getNumDpsInputs() != 1 || !allParallel(generic) ||
      !llvm::all_of(generic.getIndexingMapsArray(), isIdentity))
    return nullptr;
  APInt constant;
  if (auto sub = yielded<arith::SubIOp>(generic)) {
    if (!isBlockArg(sub.getLhs(), generic, 0) ||
        !matchPattern(sub.getRhs(), m_ConstantInt(&constant)))
      return nullptr;
    offset = constant.getSExtValue();
  } else if (auto add = yielded<arith::AddIOp>(generic)) {
    if (!isBlockArg(add.getLhs(), generic, 0) ||
        !matchPattern(add.getRhs(), m_ConstantInt(&constant)))
      return nullptr;
    offset = -constant.getSExtValue();
  } else {
    return nullptr;
  }
  return generic.getDpsInputs()[0];
}
} // namespace

StringRef mlir::snapkv::maskMismatchMessage(MaskMismatch kind) {
  switch (kind) {
  case MaskMismatch::NotRowColumn:
    return "the mask is not indexed by score row and column";
  case MaskMismatch::NotSelect:
    return "the mask is not select(condition, 0, a very negative value)";
  case MaskMismatch::NotCausal:
    return "the mask condition is not `key position <= query position` "
           "(optionally and a sliding window `key position > query position "
           "- W`)";
  case MaskMismatch::KeysNotArange:
    return "the mask's key positions are not 0, 1, 2, ... along the score "
           "columns";
  case MaskMismatch::QueriesNotRows:
    return "the mask's query positions do not vary along the score rows";
  case MaskMismatch::SlidingWindowKeys:
    return "the mask has a sliding window and its key positions are not 0, 1, "
           "2, ... (HuggingFace's sliding-window cache dropped keys)";
  }
  llvm_unreachable("unknown MaskMismatch");
}

FailureOr<CausalMask> mlir::snapkv::matchCausalMask(const AttentionMatch &match,
                                                    MaskMismatch &failure) {
  auto fail = [&](MaskMismatch kind) -> FailureOr<CausalMask> {
    failure = kind;
    return FailureOr<CausalMask>(mlir::failure());
  };
  // A kept SDPA's mask is the condition itself, indexed by row and column
  // (matchSdpa); an additive mask selects 0 or a very negative value by it.
  Value condition = match.mask;
  if (!match.sdpa) {
    // The mask add broadcasts mask[b|0, 0|h, i, j] onto scores[b, h, i, j].
    linalg::GenericOp maskAdd = match.maskAdd;
    if (!maskAdd)
      return fail(MaskMismatch::NotRowColumn);
    AffineMap map = maskAdd.getIndexingMapsArray()[1];
    MLIRContext *ctx = map.getContext();
    if (map.getNumResults() != 4 ||
        map.getResult(2) != getAffineDimExpr(2, ctx) ||
        map.getResult(3) != getAffineDimExpr(3, ctx))
      return fail(MaskMismatch::NotRowColumn);
    linalg::GenericOp select = selectGeneric(skipCopies(match.mask));
    std::optional<double> visible, hidden;
    if (select && isIdentity(select.getIndexingMapsArray()[0]) &&
        isIdentity(select.getIndexingMapsArray()[3])) {
      visible = floatConstant(select.getDpsInputs()[1]);
      hidden = floatConstant(select.getDpsInputs()[2]);
    }
    if (!visible || *visible != 0.0 || !hidden || *hidden > -1.0e30)
      return fail(MaskMismatch::NotSelect);
    condition = select.getDpsInputs()[0];
  }
  if (!condition)
    return fail(MaskMismatch::NotRowColumn);

  // The condition: the causal term, and-ed with a sliding-window term or not.
  SmallVector<Value, 2> terms;
  collectConjuncts(condition, terms);
  if (terms.empty() || terms.size() > 2)
    return fail(MaskMismatch::NotCausal);
  CausalMask mask;
  linalg::GenericOp compare;
  unsigned keyInput = 0;
  std::optional<unsigned> causalTerm;
  for (auto [t, term] : llvm::enumerate(terms)) {
    arith::CmpIOp cmp = compareBody(term, compare);
    // key <= query, written either way round.
    if (cmp && cmp.getPredicate() == arith::CmpIPredicate::sle)
      keyInput = 0;
    else if (cmp && cmp.getPredicate() == arith::CmpIPredicate::sge)
      keyInput = 1;
    else
      continue;
    causalTerm = t;
    break;
  }
  if (!causalTerm)
    return fail(MaskMismatch::NotCausal);
  unsigned queryInput = 1 - keyInput;
  mask.keyPositions = compare.getDpsInputs()[keyInput];
  mask.queryPositions = compare.getDpsInputs()[queryInput];

  if (terms.size() == 2) {
    // key > query - c (or query - c < key): visible iff query - key < c;
    // key >= query - c: visible iff query - key < c + 1.
    linalg::GenericOp windowCompare;
    arith::CmpIOp cmp = compareBody(terms[1 - *causalTerm], windowCompare);
    if (!cmp)
      return fail(MaskMismatch::NotCausal);
    unsigned windowKey = 0;
    int64_t extra = 0;
    switch (cmp.getPredicate()) {
    case arith::CmpIPredicate::sgt:
      break;
    case arith::CmpIPredicate::slt:
      windowKey = 1;
      break;
    case arith::CmpIPredicate::sge:
      extra = 1;
      break;
    case arith::CmpIPredicate::sle:
      windowKey = 1;
      extra = 1;
      break;
    default:
      return fail(MaskMismatch::NotCausal);
    }
    int64_t offset = 0;
    Value query =
        shiftedPosition(windowCompare.getDpsInputs()[1 - windowKey], offset);
    if (!query ||
        withoutExpands(query) != withoutExpands(mask.queryPositions) ||
        withoutExpands(windowCompare.getDpsInputs()[windowKey]) !=
            withoutExpands(mask.keyPositions) ||
        varyingDim(windowCompare, windowKey) != varyingDim(compare, keyInput) ||
        offset + extra < 1)
      return fail(MaskMismatch::NotCausal);
    mask.window = offset + extra;
    if (!isArange(mask.keyPositions))
      return fail(MaskMismatch::SlidingWindowKeys);
  }

  if (!isArange(mask.keyPositions) || varyingDim(compare, keyInput) != 3u)
    return fail(MaskMismatch::KeysNotArange);
  auto queryType = cast<RankedTensorType>(mask.queryPositions.getType());
  if (!queryType.hasStaticShape() || queryType.getNumElements() != 1) {
    mask.queryIsRow = varyingDim(compare, queryInput) == 2u;
    if (!mask.queryIsRow)
      return fail(MaskMismatch::QueriesNotRows);
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
std::optional<PositionValue>
evaluateInBody(Value value, linalg::GenericOp generic, unsigned depth) {
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

std::optional<PositionValue> mlir::snapkv::shiftedArange(Value value) {
  value = withoutExpands(skipCopies(value));
  if (isArange(value))
    return PositionValue{PositionValue::Base::Zero, 0, {}};
  auto generic = value.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 || generic.getNumLoops() != 1 ||
      !allParallel(generic) || generic.getNumDpsInputs() < 1 ||
      generic.getNumDpsInputs() > 2 ||
      !generic.getIndexingMapsArray().back().isIdentity())
    return std::nullopt;
  auto add = yielded<arith::AddIOp>(generic);
  if (!add)
    return std::nullopt;
  // The arange is an input read element by element; the shift is the same
  // for every element.
  SmallVector<AffineMap> maps = generic.getIndexingMapsArray();
  auto isArangeInput = [&](unsigned i) {
    return maps[i].isIdentity() && isArange(generic.getDpsInputs()[i]);
  };
  Value row, shift;
  for (auto [a, b] : {std::pair(add.getLhs(), add.getRhs()),
                      std::pair(add.getRhs(), add.getLhs())}) {
    auto arg = dyn_cast<BlockArgument>(a);
    if (!arg || arg.getOwner() != generic.getBody() ||
        arg.getArgNumber() >= generic.getNumDpsInputs() ||
        !isArangeInput(arg.getArgNumber()))
      continue;
    row = a;
    shift = b;
    break;
  }
  if (!row)
    return std::nullopt;
  if (generic.getNumDpsInputs() == 1) {
    // `arange + s`, `s` a scalar defined outside the body.
    if (generic->isAncestor(shift.getParentBlock()->getParentOp()))
      return std::nullopt;
    return evaluatePosition(shift);
  }
  // `arange + t[0]`, the other input a one-element tensor broadcast over
  // the loop (HuggingFace's `cache_position` from the position argument).
  auto other = dyn_cast<BlockArgument>(shift);
  if (!other || other.getOwner() != generic.getBody() ||
      other.getArgNumber() >= generic.getNumDpsInputs() || other == row ||
      !maps[other.getArgNumber()].isConstant() ||
      maps[other.getArgNumber()].getSingleConstantResult() != 0)
    return std::nullopt;
  return evaluatePosition(generic.getDpsInputs()[other.getArgNumber()]);
}
