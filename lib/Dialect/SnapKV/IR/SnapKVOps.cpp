#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::snapkv;

#include "snapkv/Dialect/SnapKV/IR/SnapKVEnums.cpp.inc"

#define GET_OP_CLASSES
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.cpp.inc"

namespace {
/// The sizes both selects' results are made of: `kept = min(L, capacity)`
/// rows per head (dynamic with L), `heads` = Hq for gqa expand, else Hkv.
struct SelectionShape {
  RankedTensorType keys;
  int64_t batch, heads, kept, dim;

  static FailureOr<SelectionShape> get(Type queries, Type keys,
                                       int64_t capacity, GqaPolicy gqa) {
    auto qTy = dyn_cast<RankedTensorType>(queries);
    auto kTy = dyn_cast<RankedTensorType>(keys);
    if (!qTy || !kTy || qTy.getRank() != 4 || kTy.getRank() != 4)
      return failure();
    int64_t length = kTy.getDimSize(2);
    return SelectionShape{
        kTy, qTy.getDimSize(0),
        gqa == GqaPolicy::expand ? qTy.getDimSize(1) : kTy.getDimSize(1),
        ShapedType::isDynamic(length) ? ShapedType::kDynamic
                                      : std::min(length, capacity),
        qTy.getDimSize(3)};
  }
};
} // namespace

FailureOr<SmallVector<Type, 3>> SelectOp::inferResultTypes(Type queries,
                                                           Type keys,
                                                           int64_t capacity,
                                                           GqaPolicy gqa) {
  FailureOr<SelectionShape> shape =
      SelectionShape::get(queries, keys, capacity, gqa);
  if (failed(shape))
    return failure();
  auto [kTy, batch, heads, kept, dim] = *shape;
  Type rows =
      RankedTensorType::get({batch, heads, kept, dim}, kTy.getElementType());
  Type indices = RankedTensorType::get(
      {batch, heads, kept}, IntegerType::get(queries.getContext(), 64));
  return SmallVector<Type, 3>{rows, rows, indices};
}

void SelectOp::build(OpBuilder &builder, OperationState &state, Value queries,
                     Value keys, Value values, int64_t window, int64_t capacity,
                     int64_t kernel, PoolingKind pooling, GqaPolicy gqa,
                     Order order, FloatAttr scale, Scoring scoring,
                     std::optional<int64_t> sinks, std::optional<int64_t> seed,
                     int64_t block) {
  auto i64 = [&](std::optional<int64_t> v) {
    return v ? builder.getI64IntegerAttr(*v) : IntegerAttr();
  };
  build(builder, state, queries, keys, values, window, capacity, kernel,
        pooling, gqa, order, scale, scoring, i64(sinks), i64(seed), block);
}

LogicalResult SelectOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto qTy = cast<RankedTensorType>(adaptor.getQueries().getType());
  auto kTy = cast<RankedTensorType>(adaptor.getKeys().getType());
  for (auto [name, ty] : {std::pair{"queries", qTy}, std::pair{"keys", kTy}})
    if (ty.getRank() != 4)
      return emitOptionalError(location, "'snapkv.select' op '", name,
                               "' must be a rank-4 tensor, got rank ",
                               ty.getRank());
  FailureOr<SmallVector<Type, 3>> inferred =
      inferResultTypes(qTy, kTy, adaptor.getCapacity(), adaptor.getGqa());
  if (failed(inferred))
    return failure();
  types.assign(inferred->begin(), inferred->end());
  return success();
}

// The exact result types are checked by the verifier, whose messages name
// the result; here only that each is a ranked tensor.
bool SelectOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return inferred.size() == actual.size() &&
         llvm::all_of(actual, llvm::IsaPred<RankedTensorType>);
}

static double effectiveScale(std::optional<APFloat> scale,
                             RankedTensorType queries) {
  if (scale)
    return scale->convertToDouble();
  return 1.0 / std::sqrt(static_cast<double>(queries.getDimSize(3)));
}

double SelectOp::getEffectiveScale() {
  return effectiveScale(getScale(), getQueries().getType());
}

double ScoreOp::getEffectiveScale() {
  return effectiveScale(getScale(), getQueries().getType());
}

double RaggedAttentionOp::getEffectiveScale() {
  return effectiveScale(getScale(), getQueries().getType());
}

double AttentionOp::getEffectiveScale() {
  return effectiveScale(getScale(), getQueries().getType());
}
/// Dims of `type` that must be static: all but those in `dynamicDims`.
static LogicalResult checkStaticDims(Operation *op, StringRef name,
                                     RankedTensorType type,
                                     ArrayRef<int64_t> dynamicDims) {
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.isDynamicDim(d) && !llvm::is_contained(dynamicDims, d))
      return op->emitOpError()
             << "'" << name << "' dim " << d << " must be static";
  return success();
}

/// The rules of docs/semantics.md (the op) that ODS cannot state (ranks,
/// element types and attribute ranges are in SnapKVOps.td), shared by select
/// and score. `vTy` is null for score, `capacity` empty for score.
/// `accumulated` (scoring sum / norm_sum): the queries are the last Q >=
/// window prompt queries, Q possibly dynamic, rather than the window's.
static LogicalResult verifyInputs(Operation *op, RankedTensorType qTy,
                                  RankedTensorType kTy, RankedTensorType vTy,
                                  int64_t window,
                                  std::optional<int64_t> capacity,
                                  bool accumulated = false) {
  SmallVector<std::pair<StringRef, RankedTensorType>, 2> kv = {{"keys", kTy}};
  if (vTy)
    kv.push_back({"values", vTy});
  // Only the prompt length may be dynamic.
  if (failed(checkStaticDims(op, "queries", qTy,
                             accumulated ? ArrayRef<int64_t>{2}
                                         : ArrayRef<int64_t>{})))
    return failure();
  for (auto [name, ty] : kv) {
    if (failed(checkStaticDims(op, name, ty, {2})))
      return failure();
    if (ty.getDimSize(0) != qTy.getDimSize(0))
      return op->emitOpError()
             << "batch size of '" << name << "' (" << ty.getDimSize(0)
             << ") differs from 'queries' (" << qTy.getDimSize(0) << ")";
    if (ty.getDimSize(3) != qTy.getDimSize(3))
      return op->emitOpError()
             << "head dim of '" << name << "' (" << ty.getDimSize(3)
             << ") differs from 'queries' (" << qTy.getDimSize(3) << ")";
  }
  if (vTy && vTy.getDimSize(1) != kTy.getDimSize(1))
    return op->emitOpError()
           << "'values' has " << vTy.getDimSize(1)
           << " kv heads but 'keys' has " << kTy.getDimSize(1);
  if (vTy && !kTy.isDynamicDim(2) && !vTy.isDynamicDim(2) &&
      vTy.getDimSize(2) != kTy.getDimSize(2))
    return op->emitOpError()
           << "prompt length of 'values' (" << vTy.getDimSize(2)
           << ") differs from 'keys' (" << kTy.getDimSize(2) << ")";
  int64_t queryHeads = qTy.getDimSize(1), kvHeads = kTy.getDimSize(1);
  if (kvHeads < 1 || queryHeads % kvHeads != 0)
    return op->emitOpError()
           << "query heads (" << queryHeads
           << ") are not a multiple of key/value heads (" << kvHeads << ")";
  if (capacity && *capacity <= window)
    return op->emitOpError()
           << "capacity (" << *capacity << ") must be greater than window ("
           << window << ")";
  int64_t rows = qTy.getDimSize(2);
  if (!accumulated && rows != window)
    return op->emitOpError() << "'queries' dim 2 (" << rows
                             << ") must equal window (" << window << ")";
  if (accumulated && !ShapedType::isDynamic(rows) && rows < window)
    return op->emitOpError()
           << "'queries' dim 2 (" << rows << ") must be at least window ("
           << window << "): scoring sum / norm_sum reads the last Q >= "
           << "window prompt queries";
  if (accumulated && !ShapedType::isDynamic(rows) && !kTy.isDynamicDim(2) &&
      rows > kTy.getDimSize(2))
    return op->emitOpError()
           << "'queries' dim 2 (" << rows << ") exceeds the prompt length ("
           << kTy.getDimSize(2) << "): there are no more prompt queries";
  // The lowerings index the first batch element, head and element.
  SmallVector<std::pair<StringRef, RankedTensorType>, 3> all = {
      {"queries", qTy}};
  llvm::append_range(all, kv);
  for (auto [name, ty] : all)
    for (int64_t d = 0; d < 4; ++d)
      if (ty.getDimSize(d) == 0)
        return op->emitOpError()
               << "'" << name << "' dim " << d << " is empty (size 0)";
  for (auto [name, ty] : kv)
    if (!ty.isDynamicDim(2) && ty.getDimSize(2) < window)
      return op->emitOpError()
             << "prompt length of '" << name << "' (" << ty.getDimSize(2)
             << ") is shorter than window (" << window << ")";
  // Counters and ranks of the lowering are i32.
  for (auto [name, ty] : kv)
    if (!ty.isDynamicDim(2) &&
        ty.getDimSize(2) >= std::numeric_limits<int32_t>::max())
      return op->emitOpError()
             << "prompt length of '" << name << "' (" << ty.getDimSize(2)
             << ") must be below 2^31 - 1";
  return success();
}

/// Checks each result against its expected type, naming it.
static LogicalResult verifyResults(Operation *op, ArrayRef<StringRef> names,
                                   ArrayRef<Type> expected) {
  for (auto [i, result] : llvm::enumerate(op->getResults()))
    if (result.getType() != expected[i])
      return op->emitOpError()
             << "result '" << names[i] << "' has type " << result.getType()
             << ", expected " << expected[i];
  return success();
}

/// verifyInputs for the ops with values and a capacity.
template <typename OpTy> static LogicalResult verifySelectInputs(OpTy op) {
  return verifyInputs(op, op.getQueries().getType(), op.getKeys().getType(),
                      op.getValues().getType(), op.getWindowAttr().getInt(),
                      op.getCapacityAttr().getInt());
}

LogicalResult SelectOp::verify() {
  RankedTensorType qTy = getQueries().getType();
  RankedTensorType kTy = getKeys().getType();
  if (failed(verifyInputs(*this, qTy, kTy, getValues().getType(),
                          getWindowAttr().getInt(), getCapacityAttr().getInt(),
                          isAccumulated(getScoring()))))
    return failure();
  if (getSinksAttr() && getScoring() != Scoring::recent)
    return emitOpError() << "'sinks' only applies to scoring recent";
  if (getSeedAttr() && getScoring() != Scoring::random)
    return emitOpError() << "'seed' only applies to scoring random";
  int64_t keep = getCapacityAttr().getInt() - getWindowAttr().getInt();
  if (getSinksAttr() && getSinksAttr().getInt() > keep)
    return emitOpError() << "sinks must be between 0 and capacity - window ("
                         << keep << "), got " << getSinksAttr().getInt();
  int64_t block = getBlockAttr().getInt();
  if (block != 1 &&
      (getScoring() == Scoring::recent || getScoring() == Scoring::random ||
       getScoring() == Scoring::keydiff))
    return emitOpError() << "'block' only applies to the scorings that vote "
                            "(votes, prefix_votes, sum, norm_sum)";
  // Whole blocks fill the kept prefix exactly (docs/semantics.md).
  if (keep % block != 0)
    return emitOpError() << "block (" << block
                         << ") must divide capacity - window (" << keep << " = "
                         << getCapacityAttr().getInt() << " - "
                         << getWindowAttr().getInt() << ")";
  // Operands are valid here, so inference succeeds.
  SmallVector<Type, 3> expected =
      *inferResultTypes(qTy, kTy, getCapacityAttr().getInt(), getGqa());
  return verifyResults(*this, {"selected_keys", "selected_values", "indices"},
                       expected);
}

FailureOr<SmallVector<Type, 4>>
SelectAdaptiveOp::inferResultTypes(Type queries, Type keys, int64_t capacity,
                                   GqaPolicy gqa) {
  FailureOr<SelectionShape> shape =
      SelectionShape::get(queries, keys, capacity, gqa);
  if (failed(shape))
    return failure();
  auto [kTy, batch, heads, kept, dim] = *shape;
  int64_t rows = ShapedType::isDynamic(kept) ? kept : heads * kept;
  Type i64 = IntegerType::get(queries.getContext(), 64);
  Type packed = RankedTensorType::get({batch, rows, dim}, kTy.getElementType());
  return SmallVector<Type, 4>{packed, packed,
                              RankedTensorType::get({batch, rows}, i64),
                              RankedTensorType::get({batch, heads + 1}, i64)};
}

int64_t SelectAdaptiveOp::getSelectionHeads() {
  return getGqa() == GqaPolicy::expand ? getQueries().getType().getDimSize(1)
                                       : getKeys().getType().getDimSize(1);
}

LogicalResult SelectAdaptiveOp::verify() {
  RankedTensorType qTy = getQueries().getType();
  RankedTensorType kTy = getKeys().getType();
  if (failed(verifySelectInputs(*this)))
    return failure();
  int64_t keep = getCapacityAttr().getInt() - getWindowAttr().getInt();
  int64_t floor = getFloorAttr().getInt();
  if (floor > keep)
    return emitOpError() << "floor must be between 0 and capacity - window ("
                         << keep << "), got " << floor;
  // The flattened ranking numbers every (head, position) pair in i32; a
  // selection (L >= capacity) needs heads x capacity below that too.
  int64_t heads = getSelectionHeads();
  constexpr int64_t limit = std::numeric_limits<int32_t>::max();
  int64_t length = kTy.getDimSize(2);
  if (!ShapedType::isDynamic(length) && heads * length >= limit)
    return emitOpError() << "heads x prompt length (" << heads * length
                         << ") must be below 2^31 - 1";
  if (heads > 0 && getCapacityAttr().getInt() >= limit / heads)
    return emitOpError() << "heads x capacity must be below 2^31 - 1, got "
                         << heads << " x " << getCapacityAttr().getInt();
  SmallVector<Type, 4> expected =
      *inferResultTypes(qTy, kTy, getCapacityAttr().getInt(), getGqa());
  return verifyResults(
      *this, {"selected_keys", "selected_values", "indices", "offsets"},
      expected);
}

LogicalResult ScoreOp::verify() {
  RankedTensorType qTy = getQueries().getType();
  RankedTensorType kTy = getKeys().getType();
  if (failed(verifyInputs(*this, qTy, kTy, nullptr, getWindowAttr().getInt(),
                          std::nullopt, isAccumulated(getScoring()))))
    return failure();
  // ODS makes the inits and results one type.
  Type expected = getResultType(qTy, kTy, getWindowAttr().getInt(), getGqa());
  if (getVotes().getType() != expected)
    return emitOpError() << "'votes', 'pooled' and their inits have type "
                         << getVotes().getType() << ", expected " << expected;
  return success();
}

RankedTensorType ScoreOp::getResultType(RankedTensorType queries,
                                        RankedTensorType keys, int64_t window,
                                        GqaPolicy gqa) {
  int64_t heads =
      gqa == GqaPolicy::expand ? queries.getDimSize(1) : keys.getDimSize(1);
  int64_t length = keys.getDimSize(2);
  int64_t prefix =
      ShapedType::isDynamic(length) ? ShapedType::kDynamic : length - window;
  return RankedTensorType::get({queries.getDimSize(0), heads, prefix},
                               Float32Type::get(queries.getContext()));
}

/// Sizes `a` and `b` of dims that must agree; a dynamic one matches.
static bool compatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

LogicalResult TopPositionsOp::verify() {
  RankedTensorType sTy = getScores().getType();
  RankedTensorType iTy = getInit().getType();
  if (failed(checkStaticDims(*this, "scores", sTy, {2})) ||
      failed(checkStaticDims(*this, "init", iTy, {})))
    return failure();
  int64_t window = getWindowAttr().getInt();
  int64_t capacity = getCapacityAttr().getInt();
  if (capacity <= window)
    return emitOpError() << "capacity (" << capacity
                         << ") must be greater than window (" << window << ")";
  SmallVector<int64_t> expected = {sTy.getDimSize(0), sTy.getDimSize(1),
                                   capacity};
  if (iTy.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError() << "'init' has shape " << iTy
                         << ", expected [batch, heads, capacity] = "
                         << iTy.clone(expected);
  int64_t prefix = sTy.getDimSize(2);
  if (!ShapedType::isDynamic(prefix) && prefix < capacity - window)
    return emitOpError() << "'scores' holds " << prefix
                         << " prefix positions, fewer than capacity - window ("
                         << capacity - window << ")";
  // Counters and ranks of the lowering are i32.
  if (!ShapedType::isDynamic(prefix) &&
      prefix + window >= std::numeric_limits<int32_t>::max())
    return emitOpError() << "prompt length (prefix + window) must be below "
                            "2^31 - 1";
  return success();
}

LogicalResult GatherOp::verify() {
  RankedTensorType srcTy = getSource().getType();
  RankedTensorType idxTy = getIndices().getType();
  RankedTensorType initTy = getInit().getType();
  if (failed(checkStaticDims(*this, "source", srcTy, {2})) ||
      failed(checkStaticDims(*this, "indices", idxTy, {2})) ||
      failed(checkStaticDims(*this, "init", initTy, {2})))
    return failure();
  if (idxTy.getDimSize(0) != srcTy.getDimSize(0) ||
      initTy.getDimSize(0) != srcTy.getDimSize(0))
    return emitOpError() << "batch sizes differ: 'source' "
                         << srcTy.getDimSize(0) << ", 'indices' "
                         << idxTy.getDimSize(0) << ", 'init' "
                         << initTy.getDimSize(0);
  int64_t heads = idxTy.getDimSize(1), sourceHeads = srcTy.getDimSize(1);
  if (initTy.getDimSize(1) != heads)
    return emitOpError() << "'init' has " << initTy.getDimSize(1)
                         << " heads but 'indices' has " << heads;
  if (sourceHeads < 1 || heads % sourceHeads != 0)
    return emitOpError() << "heads of 'indices' (" << heads
                         << ") are not a multiple of the heads of 'source' ("
                         << sourceHeads << ")";
  if (!compatible(initTy.getDimSize(2), idxTy.getDimSize(2)))
    return emitOpError() << "'init' has " << initTy.getDimSize(2)
                         << " slots but 'indices' has " << idxTy.getDimSize(2);
  if (initTy.getDimSize(3) != srcTy.getDimSize(3))
    return emitOpError() << "row size of 'init' (" << initTy.getDimSize(3)
                         << ") differs from 'source' (" << srcTy.getDimSize(3)
                         << ")";
  if (srcTy.getDimSize(2) == 0 && initTy.getDimSize(2) != 0)
    return emitOpError() << "'source' has no rows to gather";
  return success();
}

LogicalResult AttentionOp::verify() {
  // Ranks, element types, attribute ranges and `init`/result = queries' type
  // are ODS constraints; the extents must agree.
  RankedTensorType qTy = getQueries().getType();
  RankedTensorType kTy = getKeys().getType();
  RankedTensorType vTy = getValues().getType();
  for (auto [name, ty] : {std::pair{"queries", qTy}, std::pair{"keys", kTy},
                          std::pair{"values", vTy}})
    if (failed(checkStaticDims(*this, name, ty, {2})))
      return failure();
  for (auto [name, ty] : {std::pair{"keys", kTy}, std::pair{"values", vTy}}) {
    if (ty.getDimSize(0) != qTy.getDimSize(0))
      return emitOpError() << "batch size of '" << name << "' ("
                           << ty.getDimSize(0) << ") differs from 'queries' ("
                           << qTy.getDimSize(0) << ")";
    if (ty.getDimSize(3) != qTy.getDimSize(3))
      return emitOpError() << "head dim of '" << name << "' ("
                           << ty.getDimSize(3) << ") differs from 'queries' ("
                           << qTy.getDimSize(3) << ")";
  }
  if (vTy.getDimSize(1) != kTy.getDimSize(1))
    return emitOpError() << "'values' has " << vTy.getDimSize(1)
                         << " kv heads but 'keys' has " << kTy.getDimSize(1);
  if (!kTy.isDynamicDim(2) && !vTy.isDynamicDim(2) &&
      vTy.getDimSize(2) != kTy.getDimSize(2))
    return emitOpError() << "length of 'values' (" << vTy.getDimSize(2)
                         << ") differs from 'keys' (" << kTy.getDimSize(2)
                         << ")";
  int64_t queryHeads = qTy.getDimSize(1), kvHeads = kTy.getDimSize(1);
  if (kvHeads < 1 || queryHeads % kvHeads != 0)
    return emitOpError() << "query heads (" << queryHeads
                         << ") are not a multiple of key/value heads ("
                         << kvHeads << ")";
  if (qTy.getDimSize(3) < 1)
    return emitOpError() << "head dim must be at least 1";
  return success();
}

LogicalResult RaggedAttentionOp::verify() {
  // Ranks, element types, i64 rows and result = queries' type are ODS
  // constraints; the extents must agree.
  RankedTensorType qTy = getQueries().getType();
  if (failed(checkStaticDims(*this, "queries", qTy, {})))
    return failure();
  if (qTy.getDimSize(2) != 1)
    return emitOpError()
           << "'queries' must hold one row per head (dim 2 = 1), got "
           << qTy.getDimSize(2);
  for (int64_t d = 0; d < 4; ++d)
    if (qTy.getDimSize(d) == 0)
      return emitOpError() << "'queries' dim " << d << " is empty (size 0)";
  for (auto [name, ty] : {std::pair{"keys", getKeys().getType()},
                          std::pair{"values", getValues().getType()}}) {
    if (failed(checkStaticDims(*this, name, ty, {1})))
      return failure();
    if (ty.getDimSize(0) != qTy.getDimSize(0) ||
        ty.getDimSize(2) != qTy.getDimSize(3))
      return emitOpError() << "'" << name
                           << "' must be [batch, rows, head dim] = ["
                           << qTy.getDimSize(0) << ", ?, " << qTy.getDimSize(3)
                           << "], got " << ty;
  }
  RankedTensorType rowsTy = getStarts().getType();
  if (failed(checkStaticDims(*this, "starts", rowsTy, {})))
    return failure();
  int64_t heads = rowsTy.getDimSize(1);
  if (rowsTy.getDimSize(0) != qTy.getDimSize(0))
    return emitOpError() << "'starts' batch (" << rowsTy.getDimSize(0)
                         << ") differs from 'queries' (" << qTy.getDimSize(0)
                         << ")";
  if (heads < 1 || qTy.getDimSize(1) % heads != 0)
    return emitOpError() << "query heads (" << qTy.getDimSize(1)
                         << ") are not a multiple of cache heads (" << heads
                         << ")";
  return success();
}

double SdpaOp::getEffectiveScale() {
  if (std::optional<APFloat> scale = getScale())
    return scale->convertToDouble();
  return 1.0 /
         std::sqrt(static_cast<double>(getQueries().getType().getDimSize(2)));
}

LogicalResult SdpaOp::verify() {
  // Rank and element types are ODS constraints; the extents must agree.
  ArrayRef<int64_t> q = getQueries().getType().getShape();
  ArrayRef<int64_t> k = getKeys().getType().getShape();
  ArrayRef<int64_t> v = getValues().getType().getShape();
  ArrayRef<int64_t> out = getInit().getType().getShape();
  auto fits = [](int64_t a, int64_t b) {
    return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
  };
  auto mismatch = [&](StringRef what) {
    return emitOpError() << what << " (queries " << getQueries().getType()
                         << ", keys " << getKeys().getType() << ", values "
                         << getValues().getType() << ", init "
                         << getInit().getType() << ")";
  };
  if (ShapedType::isDynamic(q[2]))
    return emitOpError("the head dim of 'queries' must be static");
  if (!fits(q[0], k[0]) || !fits(q[0], v[0]) || !fits(q[0], out[0]))
    return mismatch("the batch-head extents differ");
  if (!fits(q[2], k[2]))
    return mismatch("'queries' and 'keys' have different head dims");
  if (!fits(k[1], v[1]))
    return mismatch("'keys' and 'values' have different lengths");
  if (!fits(q[1], out[1]) || !fits(v[2], out[2]))
    return mismatch("'init' is not [N, Lq, Dv]");
  if (Value mask = getMask()) {
    ArrayRef<int64_t> m = cast<RankedTensorType>(mask.getType()).getShape();
    if (!fits(m[0], q[0]) || !fits(m[1], q[1]) || !fits(m[2], k[1]))
      return emitOpError() << "'mask' " << mask.getType()
                           << " is not [N, Lq, Lk]";
  }
  return success();
}
