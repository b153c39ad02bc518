//===- SnapKVTiling.cpp - TilingInterface of the stage ops and attention --===//
//
// snapkv.top_positions tiles over its rows (b, h); snapkv.gather over all of
// (b, h, slot, d); snapkv.attention over (b, h, query row), every key in
// each tile (the keys are its decomposition's loop). A tile is the same op
// on slices, so the lowering of a
// tiled op is the lowering of a smaller one. Batch, heads and row size are
// static in these ops, so tiles of them must have static sizes (a tile size
// that divides the dimension).
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

using namespace mlir;
using namespace mlir::snapkv;

namespace {

SmallVector<OpFoldResult> unitStrides(OpBuilder &b, size_t rank) {
  return SmallVector<OpFoldResult>(rank, b.getIndexAttr(1));
}

tensor::ExtractSliceOp slice(OpBuilder &b, Location loc, Value source,
                             ArrayRef<OpFoldResult> offsets,
                             ArrayRef<OpFoldResult> sizes) {
  return tensor::ExtractSliceOp::create(b, loc, source, offsets, sizes,
                                        unitStrides(b, offsets.size()));
}

bool allConstant(ArrayRef<OpFoldResult> sizes) {
  return llvm::all_of(sizes, [](OpFoldResult size) {
    return getConstantIntValue(size).has_value();
  });
}

/// The (b, h) rows of the ops that tile by rows: both loops parallel.
SmallVector<utils::IteratorType> rowLoops() {
  return {utils::IteratorType::parallel, utils::IteratorType::parallel};
}
SmallVector<Range> rowDomain(OpBuilder &b, RankedTensorType rows) {
  OpFoldResult zero = b.getIndexAttr(0), one = b.getIndexAttr(1);
  return {Range{zero, b.getIndexAttr(rows.getDimSize(0)), one},
          Range{zero, b.getIndexAttr(rows.getDimSize(1)), one}};
}

/// The source heads that result heads [offset, offset + heads) read when
/// head h reads source head h / group: one head, or whole groups of a tile
/// that starts at a multiple of the group; nullopt when a tile would straddle
/// groups.
std::optional<std::pair<OpFoldResult, int64_t>>
groupedHeads(OpBuilder &b, Location loc, OpFoldResult offset, int64_t heads,
             int64_t group) {
  if (group == 1)
    return std::pair{offset, heads};
  std::optional<int64_t> start = getConstantIntValue(offset);
  if (heads != 1 && (heads % group != 0 || (start && *start % group != 0)))
    return std::nullopt;
  AffineExpr h = b.getAffineSymbolExpr(0);
  return std::pair{affine::makeComposedFoldedAffineApply(
                       b, loc, h.floorDiv(group), {offset}),
                   heads == 1 ? int64_t(1) : heads / group};
}

} // namespace

//===----------------------------------------------------------------------===//
// snapkv.score
//===----------------------------------------------------------------------===//

SmallVector<utils::IteratorType> ScoreOp::getLoopIteratorTypes() {
  return rowLoops();
}

SmallVector<Range> ScoreOp::getIterationDomain(OpBuilder &b) {
  return rowDomain(b, getVotesInit().getType());
}

FailureOr<TilingResult>
ScoreOp::getTiledImplementation(OpBuilder &b, ArrayRef<OpFoldResult> offsets,
                                ArrayRef<OpFoldResult> sizes) {
  if (offsets.size() != 2 || sizes.size() != 2 || !allConstant(sizes))
    return failure();
  Location loc = getLoc();
  RankedTensorType qTy = getQueries().getType(), kTy = getKeys().getType();
  int64_t group = qTy.getDimSize(1) / kTy.getDimSize(1);
  int64_t heads = *getConstantIntValue(sizes[1]);
  // The query heads and kv heads of the tile's rows.
  OpFoldResult queryOffset = offsets[1], keyOffset = offsets[1];
  int64_t queryHeads = heads, keyHeads = heads;
  if (getGqa() == GqaPolicy::expand) {
    std::optional<std::pair<OpFoldResult, int64_t>> kv =
        groupedHeads(b, loc, offsets[1], heads, group);
    if (!kv)
      return failure();
    std::tie(keyOffset, keyHeads) = *kv;
  } else {
    AffineExpr h = b.getAffineSymbolExpr(0);
    queryOffset =
        affine::makeComposedFoldedAffineApply(b, loc, h * group, {offsets[1]});
    queryHeads = heads * group;
  }
  OpFoldResult zero = b.getIndexAttr(0);
  auto queries =
      slice(b, loc, getQueries(), {offsets[0], queryOffset, zero, zero},
            {sizes[0], b.getIndexAttr(queryHeads),
             tensor::getMixedSize(b, loc, getQueries(), 2),
             b.getIndexAttr(qTy.getDimSize(3))});
  auto keys = slice(b, loc, getKeys(), {offsets[0], keyOffset, zero, zero},
                    {sizes[0], b.getIndexAttr(keyHeads),
                     tensor::getMixedSize(b, loc, getKeys(), 2),
                     b.getIndexAttr(kTy.getDimSize(3))});
  SmallVector<Operation *> slices = {queries, keys};
  SmallVector<Value> inits;
  for (Value init : {getVotesInit(), getPooledInit()}) {
    auto initSlice =
        slice(b, loc, init, {offsets[0], offsets[1], zero},
              {sizes[0], sizes[1], tensor::getMixedSize(b, loc, init, 2)});
    slices.push_back(initSlice);
    inits.push_back(initSlice);
  }
  auto tiled = ScoreOp::create(b, loc, inits[0].getType(), inits[1].getType(),
                               queries.getResult(), keys.getResult(), inits[0],
                               inits[1], getWindowAttr(), getKernelAttr(),
                               getPoolingAttr(), getGqaAttr(), getScaleAttr(),
                               getScoringAttr(), getBlockAttr());
  return TilingResult{{tiled}, {tiled.getVotes(), tiled.getPooled()}, slices};
}

LogicalResult ScoreOp::getResultTilePosition(
    OpBuilder &b, unsigned resultNumber, ArrayRef<OpFoldResult> offsets,
    ArrayRef<OpFoldResult> sizes, SmallVector<OpFoldResult> &resultOffsets,
    SmallVector<OpFoldResult> &resultSizes) {
  if (resultNumber > 1 || offsets.size() != 2)
    return failure();
  resultOffsets = {offsets[0], offsets[1], b.getIndexAttr(0)};
  resultSizes = {sizes[0], sizes[1],
                 tensor::getMixedSize(b, getLoc(), getVotesInit(), 2)};
  return success();
}

FailureOr<TilingResult>
ScoreOp::generateResultTileValue(OpBuilder &b, unsigned resultNumber,
                                 ArrayRef<OpFoldResult> offsets,
                                 ArrayRef<OpFoldResult> sizes) {
  // A row's votes share one softmax over the whole row: only tiles of whole
  // rows are computed on their own.
  if (resultNumber > 1 || offsets.size() != 3 ||
      !isConstantIntValue(offsets[2], 0))
    return failure();
  // The prefix: its static size, or (dynamic) dim 2 of an init, or of the
  // result of an op that writes one (as tiling reads it off a result of this
  // op or of the copy it fuses).
  int64_t prefix = getVotesInit().getType().getDimSize(2);
  auto dim = dyn_cast_if_present<tensor::DimOp>(
      dyn_cast<Value>(sizes[2]) ? cast<Value>(sizes[2]).getDefiningOp()
                                : nullptr);
  auto init = [](Value v) {
    while (auto result = dyn_cast<OpResult>(v)) {
      auto dps = dyn_cast<DestinationStyleOpInterface>(result.getOwner());
      if (!dps)
        break;
      v = dps.getTiedOpOperand(result)->get();
    }
    return v;
  };
  bool whole = ShapedType::isDynamic(prefix)
                   ? dim && isConstantIntValue(dim.getIndex(), 2) &&
                         llvm::is_contained(
                             {init(getVotesInit()), init(getPooledInit())},
                             init(dim.getSource()))
                   : isConstantIntValue(sizes[2], prefix);
  if (!whole)
    return failure();
  FailureOr<TilingResult> tiled =
      getTiledImplementation(b, offsets.take_front(2), sizes.take_front(2));
  // The tile of the result asked for (fusion reads the first value).
  if (succeeded(tiled))
    tiled->tiledValues = {tiled->tiledValues[resultNumber]};
  return tiled;
}

//===----------------------------------------------------------------------===//
// snapkv.top_positions
//===----------------------------------------------------------------------===//

SmallVector<utils::IteratorType> TopPositionsOp::getLoopIteratorTypes() {
  return rowLoops();
}

SmallVector<Range> TopPositionsOp::getIterationDomain(OpBuilder &b) {
  return rowDomain(b, getInit().getType());
}

FailureOr<TilingResult>
TopPositionsOp::getTiledImplementation(OpBuilder &b,
                                       ArrayRef<OpFoldResult> offsets,
                                       ArrayRef<OpFoldResult> sizes) {
  if (offsets.size() != 2 || sizes.size() != 2 || !allConstant(sizes))
    return failure();
  Location loc = getLoc();
  OpFoldResult zero = b.getIndexAttr(0);
  auto scores =
      slice(b, loc, getScores(), {offsets[0], offsets[1], zero},
            {sizes[0], sizes[1], tensor::getMixedSize(b, loc, getScores(), 2)});
  auto init = slice(b, loc, getInit(), {offsets[0], offsets[1], zero},
                    {sizes[0], sizes[1], b.getIndexAttr(getCapacity())});
  auto tiled = TopPositionsOp::create(
      b, loc, init.getType(), scores.getResult(), init.getResult(),
      getWindowAttr(), getCapacityAttr(), getOrderAttr());
  return TilingResult{{tiled}, {tiled.getResult()}, {scores, init}};
}

LogicalResult TopPositionsOp::getResultTilePosition(
    OpBuilder &b, unsigned resultNumber, ArrayRef<OpFoldResult> offsets,
    ArrayRef<OpFoldResult> sizes, SmallVector<OpFoldResult> &resultOffsets,
    SmallVector<OpFoldResult> &resultSizes) {
  if (resultNumber != 0 || offsets.size() != 2)
    return failure();
  resultOffsets = {offsets[0], offsets[1], b.getIndexAttr(0)};
  resultSizes = {sizes[0], sizes[1], b.getIndexAttr(getCapacity())};
  return success();
}

FailureOr<TilingResult>
TopPositionsOp::generateResultTileValue(OpBuilder &b, unsigned resultNumber,
                                        ArrayRef<OpFoldResult> offsets,
                                        ArrayRef<OpFoldResult> sizes) {
  // A row's positions come from one search over the whole row: only tiles
  // of whole rows are computed on their own.
  if (resultNumber != 0 || offsets.size() != 3 ||
      !isConstantIntValue(offsets[2], 0) ||
      !isConstantIntValue(sizes[2], getCapacity()))
    return failure();
  return getTiledImplementation(b, offsets.take_front(2), sizes.take_front(2));
}

//===----------------------------------------------------------------------===//
// snapkv.gather
//===----------------------------------------------------------------------===//

SmallVector<utils::IteratorType> GatherOp::getLoopIteratorTypes() {
  return SmallVector<utils::IteratorType>(4, utils::IteratorType::parallel);
}

SmallVector<Range> GatherOp::getIterationDomain(OpBuilder &b) {
  SmallVector<Range> domain;
  for (int64_t d = 0; d < 4; ++d)
    domain.push_back(Range{b.getIndexAttr(0),
                           tensor::getMixedSize(b, getLoc(), getInit(), d),
                           b.getIndexAttr(1)});
  return domain;
}

FailureOr<TilingResult>
GatherOp::getTiledImplementation(OpBuilder &b, ArrayRef<OpFoldResult> offsets,
                                 ArrayRef<OpFoldResult> sizes) {
  if (offsets.size() != 4 || sizes.size() != 4 ||
      !allConstant({sizes[0], sizes[1], sizes[3]}))
    return failure();
  Location loc = getLoc();
  // The source heads the tile's heads read: head h reads h / G.
  std::optional<std::pair<OpFoldResult, int64_t>> source0 = groupedHeads(
      b, loc, offsets[1], *getConstantIntValue(sizes[1]), getGroup());
  if (!source0)
    return failure();
  auto [sourceOffset, sourceHeads] = *source0;
  OpFoldResult zero = b.getIndexAttr(0);
  auto source =
      slice(b, loc, getSource(), {offsets[0], sourceOffset, zero, offsets[3]},
            {sizes[0], b.getIndexAttr(sourceHeads),
             tensor::getMixedSize(b, loc, getSource(), 2), sizes[3]});
  auto indices =
      slice(b, loc, getIndices(), {offsets[0], offsets[1], offsets[2]},
            {sizes[0], sizes[1], sizes[2]});
  auto init = slice(b, loc, getInit(), offsets, sizes);
  auto tiled = GatherOp::create(b, loc, init.getType(), source.getResult(),
                                indices.getResult(), init.getResult());
  return TilingResult{{tiled}, {tiled.getResult()}, {source, indices, init}};
}

LogicalResult GatherOp::getResultTilePosition(
    OpBuilder &, unsigned resultNumber, ArrayRef<OpFoldResult> offsets,
    ArrayRef<OpFoldResult> sizes, SmallVector<OpFoldResult> &resultOffsets,
    SmallVector<OpFoldResult> &resultSizes) {
  if (resultNumber != 0)
    return failure();
  resultOffsets.assign(offsets.begin(), offsets.end());
  resultSizes.assign(sizes.begin(), sizes.end());
  return success();
}

FailureOr<TilingResult>
GatherOp::generateResultTileValue(OpBuilder &b, unsigned resultNumber,
                                  ArrayRef<OpFoldResult> offsets,
                                  ArrayRef<OpFoldResult> sizes) {
  if (resultNumber != 0)
    return failure();
  return getTiledImplementation(b, offsets, sizes);
}

//===----------------------------------------------------------------------===//
// snapkv.attention
//===----------------------------------------------------------------------===//

SmallVector<utils::IteratorType> AttentionOp::getLoopIteratorTypes() {
  return SmallVector<utils::IteratorType>(3, utils::IteratorType::parallel);
}

SmallVector<Range> AttentionOp::getIterationDomain(OpBuilder &b) {
  SmallVector<Range> domain;
  for (int64_t d = 0; d < 3; ++d)
    domain.push_back(Range{b.getIndexAttr(0),
                           tensor::getMixedSize(b, getLoc(), getInit(), d),
                           b.getIndexAttr(1)});
  return domain;
}

FailureOr<TilingResult>
AttentionOp::getTiledImplementation(OpBuilder &b,
                                    ArrayRef<OpFoldResult> offsets,
                                    ArrayRef<OpFoldResult> sizes) {
  if (offsets.size() != 3 || sizes.size() != 3 ||
      !allConstant({sizes[0], sizes[1]}))
    return failure();
  Location loc = getLoc();
  RankedTensorType qTy = getQueries().getType(), kTy = getKeys().getType();
  int64_t dim = qTy.getDimSize(3);
  // The kv heads the tile's query heads read: head h reads h / G.
  std::optional<std::pair<OpFoldResult, int64_t>> kv =
      groupedHeads(b, loc, offsets[1], *getConstantIntValue(sizes[1]),
                   qTy.getDimSize(1) / kTy.getDimSize(1));
  if (!kv)
    return failure();
  auto [kvOffset, kvHeads] = *kv;
  OpFoldResult zero = b.getIndexAttr(0);
  SmallVector<OpFoldResult> rowOffsets = {offsets[0], offsets[1], offsets[2],
                                          zero};
  SmallVector<OpFoldResult> rowSizes = {sizes[0], sizes[1], sizes[2],
                                        b.getIndexAttr(dim)};
  auto queries = slice(b, loc, getQueries(), rowOffsets, rowSizes);
  SmallVector<Operation *> slices = {queries};
  SmallVector<Value> kvSlices;
  for (Value source : {getKeys(), getValues()}) {
    auto kvSlice =
        slice(b, loc, source, {offsets[0], kvOffset, zero, zero},
              {sizes[0], b.getIndexAttr(kvHeads),
               tensor::getMixedSize(b, loc, source, 2), b.getIndexAttr(dim)});
    slices.push_back(kvSlice);
    kvSlices.push_back(kvSlice);
  }
  auto init = slice(b, loc, getInit(), rowOffsets, rowSizes);
  slices.push_back(init);
  // The tile's row 0 is row offsets[2] of the op: its causal offset is the
  // op's plus offsets[2] (the op's default, Lk - Lq, is not the tile's).
  Value offset = getOffset();
  int64_t rows = getInit().getType().getDimSize(2);
  bool allRows = isConstantIntValue(offsets[2], 0) &&
                 !ShapedType::isDynamic(rows) &&
                 isConstantIntValue(sizes[2], rows);
  if (offset || !allRows) {
    AffineExpr s0 = b.getAffineSymbolExpr(0), s1 = b.getAffineSymbolExpr(1),
               s2 = b.getAffineSymbolExpr(2);
    OpFoldResult tileOffset =
        offset
            ? affine::makeComposedFoldedAffineApply(b, loc, s0 + s1,
                                                    {offset, offsets[2]})
            : affine::makeComposedFoldedAffineApply(
                  b, loc, s0 - s1 + s2,
                  {tensor::getMixedSize(b, loc, getKeys(), 2),
                   tensor::getMixedSize(b, loc, getQueries(), 2), offsets[2]});
    offset = isa<Value>(tileOffset)
                 ? cast<Value>(tileOffset)
                 : arith::ConstantIndexOp::create(
                       b, loc, *getConstantIntValue(tileOffset))
                       .getResult();
  }
  auto tiled = AttentionOp::create(b, loc, init.getType(), queries.getResult(),
                                   kvSlices[0], kvSlices[1], offset,
                                   init.getResult(), getScaleAttr(),
                                   getSoftcapAttr(), getSlidingWindowAttr());
  // The tile keeps the op's configuration (its key tile).
  tiled->setDiscardableAttrs(getOperation()->getDiscardableAttrDictionary());
  return TilingResult{{tiled}, {tiled.getResult()}, slices};
}

LogicalResult AttentionOp::getResultTilePosition(
    OpBuilder &b, unsigned resultNumber, ArrayRef<OpFoldResult> offsets,
    ArrayRef<OpFoldResult> sizes, SmallVector<OpFoldResult> &resultOffsets,
    SmallVector<OpFoldResult> &resultSizes) {
  if (resultNumber != 0 || offsets.size() != 3)
    return failure();
  resultOffsets = {offsets[0], offsets[1], offsets[2], b.getIndexAttr(0)};
  resultSizes = {sizes[0], sizes[1], sizes[2],
                 b.getIndexAttr(getInit().getType().getDimSize(3))};
  return success();
}

FailureOr<TilingResult>
AttentionOp::generateResultTileValue(OpBuilder &b, unsigned resultNumber,
                                     ArrayRef<OpFoldResult> offsets,
                                     ArrayRef<OpFoldResult> sizes) {
  // A row's output takes every element of its value rows: only tiles of whole
  // rows are computed on their own.
  if (resultNumber != 0 || offsets.size() != 4 ||
      !isConstantIntValue(offsets[3], 0) ||
      !isConstantIntValue(sizes[3], getInit().getType().getDimSize(3)))
    return failure();
  return getTiledImplementation(b, offsets.take_front(3), sizes.take_front(3));
}
