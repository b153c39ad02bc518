//===- Scoring.cpp - votes and pooled scores as tiled linalg ops ----------===//
//
// Per key tile of T positions: the logits of the tile ([T] x [G * W] dot
// products over D), the tile's row maximum and sum of exp(logit - maximum)
// over causally visible columns. The tile statistics combine into the row
// maximum and the full softmax denominator (prefix AND window columns). A
// second pass sums the probabilities over the window rows: the votes, from
// each tile's logits computed again, or (options.keepLogits, CPU) from the
// logits of one (batch, query head) kept since the statistics. A target
// that tiles the scoring ops along the tile axis (and fuses the logits into
// the consumers) never materialises the [B, Hkv, G, W, L] scores.
//
//===----------------------------------------------------------------------===//

#include "Formulation.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/Support/FormatVariadic.h"

#include <limits>

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

static constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Value mlir::snapkv::detail::toF32(OpBuilder &nb, Location l, Value v) {
  if (v.getType().isF32())
    return v;
  return arith::ExtFOp::create(nb, l, nb.getF32Type(), v);
}

Value mlir::snapkv::detail::constF32(OpBuilder &nb, Location l, float v) {
  return arith::ConstantOp::create(nb, l, nb.getF32FloatAttr(v));
}

static Value indexAsI32(OpBuilder &nb, Location l, unsigned dim) {
  Value i = linalg::IndexOp::create(nb, l, dim);
  return arith::IndexCastOp::create(nb, l, nb.getI32Type(), i);
}

/// The body of a dot product accumulated in f32: args[2] + args[0] * args[1].
static void dotProductBody(OpBuilder &nb, Location l, ValueRange args) {
  // `contract`: the multiply-add may become one FMA.
  auto contract = arith::FastMathFlags::contract;
  Value prod = arith::MulFOp::create(nb, l, toF32(nb, l, args[0]),
                                     toF32(nb, l, args[1]), contract);
  linalg::YieldOp::create(
      nb, l, ValueRange{arith::AddFOp::create(nb, l, args[2], prod, contract)});
}

/// The body that folds one query head's vote (args[0]) into its kv head's
/// (args[1]) for gqa mean (acc + v / G, from 0) or max (from -inf).
static auto foldHeadVotes(const SelectShape &s) {
  bool mean = s.gqa == GqaPolicy::mean;
  float groupSize = static_cast<float>(s.group);
  return [=](OpBuilder &nb, Location l, ValueRange args) {
    Value r;
    if (mean)
      r = arith::AddFOp::create(
          nb, l, args[1],
          arith::DivFOp::create(nb, l, args[0], constF32(nb, l, groupSize)));
    else
      r = arith::MaximumFOp::create(nb, l, args[1], args[0]);
    linalg::YieldOp::create(nb, l, ValueRange{r});
  };
}

Value mlir::snapkv::detail::shifted(OpBuilder &nb, Location l, Value x,
                                    Value max) {
  Value isMax = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, x, max);
  return arith::SelectOp::create(nb, l, isMax, constF32(nb, l, 0.0f),
                                 arith::SubFOp::create(nb, l, x, max));
}

/// Q viewed per kv head and transposed so that the W window rows of a query
/// head are contiguous for each d: [B, Hkv, G, D, W] (one query head's rows
/// over all of D, 16 KiB at D = W = 128 x 32 in f32, stay in L1 while a
/// key tile streams past them).
Value Formulation::queriesByHead(Value queries) {
  auto byHead = RankedTensorType::get(
      {s.batch, s.kvHeads, s.group, s.window, s.dim}, s.elemTy);
  Value q = tensor::ExpandShapeOp::create(
      b, loc, byHead, queries,
      ArrayRef<ReassociationIndices>{{0}, {1, 2}, {3}, {4}});
  Value init = empty(
      {ofr(s.batch), ofr(s.kvHeads), ofr(s.group), ofr(s.dim), ofr(s.window)},
      s.elemTy);
  auto op = generic(init.getType(), {q}, {init},
                    {map(5, {0, 1, 2, 4, 3}), map(5, {0, 1, 2, 3, 4})},
                    {par, par, par, par, par},
                    [](OpBuilder &nb, Location l, ValueRange args) {
                      linalg::YieldOp::create(nb, l, ValueRange{args[0]});
                    });
  return op.getResult(0);
}

Formulation::KeySpans Formulation::keySpans(Value length) {
  AffineExpr l0 = b.getAffineSymbolExpr(0);
  OpFoldResult full = affine::makeComposedFoldedAffineApply(
      b, loc, l0.floorDiv(keyTile), {getAsOpFoldResult(length)});
  std::optional<int64_t> staticLength = getConstantIntValue(length);
  return {isConstantIntValue(full, 0) ? OpFoldResult() : full,
          !staticLength || *staticLength % keyTile != 0};
}

SmallVector<OpFoldResult>
Formulation::KeySpans::counts(OpBuilder &builder) const {
  SmallVector<OpFoldResult> result;
  if (whole)
    result.push_back(whole);
  if (padded)
    result.push_back(builder.getIndexAttr(1));
  return result;
}

/// The keys as whole tiles: the positions [0, n*T) as a view, and the rest
/// (fewer than T positions) zero-padded to one more tile. Padded columns lie
/// past every window row's horizon, so the causal mask hides them.
SmallVector<KeyTiles> Formulation::viewKeyTiles(Value keys, Value length) {
  int64_t tile = keyTile;
  KeySpans layout = keySpans(length);
  AffineExpr l0 = b.getAffineSymbolExpr(0);
  OpFoldResult fullLength = affine::makeComposedFoldedAffineApply(
      b, loc, l0.floorDiv(tile) * tile, {getAsOpFoldResult(length)});
  SmallVector<KeyTiles> spans;
  SmallVector<OpFoldResult> strides(4, ofr(1));
  auto tilesOf = [&](Value rows, OpFoldResult count) {
    Type ty = RankedTensorType::get(
        {s.batch, s.kvHeads,
         getConstantIntValue(count).value_or(ShapedType::kDynamic), tile,
         s.dim},
        s.elemTy);
    return tensor::ExpandShapeOp::create(
        b, loc, ty, rows, ArrayRef<ReassociationIndices>{{0}, {1}, {2, 3}, {4}},
        ArrayRef<OpFoldResult>{ofr(s.batch), ofr(s.kvHeads), count, ofr(tile),
                               ofr(s.dim)});
  };
  if (layout.whole) {
    Value rows = tensor::ExtractSliceOp::create(
        b, loc, keys, ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(0), ofr(0)},
        ArrayRef<OpFoldResult>{ofr(s.batch), ofr(s.kvHeads), fullLength,
                               ofr(s.dim)},
        strides);
    spans.push_back({tilesOf(rows, layout.whole), cIndex(0)});
  }
  if (!layout.padded)
    return spans;
  OpFoldResult rest = affine::makeComposedFoldedAffineApply(
      b, loc, l0 - l0.floorDiv(tile) * tile, {getAsOpFoldResult(length)});
  OpFoldResult pad = affine::makeComposedFoldedAffineApply(
      b, loc, tile - l0 + l0.floorDiv(tile) * tile,
      {getAsOpFoldResult(length)});
  Value rows = tensor::ExtractSliceOp::create(
      b, loc, keys, ArrayRef<OpFoldResult>{ofr(0), ofr(0), fullLength, ofr(0)},
      ArrayRef<OpFoldResult>{ofr(s.batch), ofr(s.kvHeads), rest, ofr(s.dim)},
      strides);
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(s.elemTy));
  auto paddedTy =
      RankedTensorType::get({s.batch, s.kvHeads, tile, s.dim}, s.elemTy);
  Value padded = tensor::PadOp::create(
      b, loc, paddedTy, rows,
      ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(0), ofr(0)},
      ArrayRef<OpFoldResult>{ofr(0), ofr(0), pad, ofr(0)}, zero);
  spans.push_back({tilesOf(padded, ofr(1)),
                   getValueOrCreateConstantIndexOp(b, loc, fullLength)});
  return spans;
}

/// logits[b, kv, n, jt, g, w] = <q[b, kv*G + g, w], k[b, kv, n*T + jt]>
/// (f32, unscaled). The window rows (g, w) are the innermost axis, so a
/// vector of rows is multiplied by one broadcast key element per step.
Operation *Formulation::logits(Value queriesT, const KeyTiles &tiles,
                               Value dest) {
  OpFoldResult count = tensor::getMixedSize(b, loc, tiles.tiles, 2);
  Value init =
      dest ? linalg::FillOp::create(b, loc, cF32(0.0f), dest).getResult(0)
           : filled({ofr(s.batch), ofr(s.kvHeads), count, ofr(keyTile),
                     ofr(s.group), ofr(s.window)},
                    f32, cF32(0.0f));
  return generic(init.getType(), {queriesT, tiles.tiles}, {init},
                 {map(7, {0, 1, 4, 6, 5}), map(7, {0, 1, 2, 3, 6}),
                  map(7, {0, 1, 2, 3, 4, 5})},
                 {par, par, par, par, par, par, red}, dotProductBody);
}

std::pair<Value, Value> Formulation::tileStatistics(Value logitsT,
                                                    const KeyTiles &tiles,
                                                    Value prefix,
                                                    Operation *producer) {
  // Sizes come from the key view: a tensor.dim of the logits would be a use
  // outside the tile that forces them to be materialised.
  OpFoldResult count = tensor::getMixedSize(b, loc, tiles.tiles, 2);
  Value start = tiles.start;
  SmallVector<OpFoldResult> shape = {ofr(s.batch), ofr(s.kvHeads), count,
                                     ofr(s.group), ofr(s.window)};
  int64_t tile = keyTile;
  float scale = s.scale;
  // Column n*T + jt of the span is visible to window row w when it is at
  // most P + w (relative to the span: rowLimit[w] = P + w - start); with
  // `scoring prefix_votes` only prefix columns (< P) count, so the window
  // columns leave the denominator. The column offsets jt and the limits are
  // small i32 inputs rather than index arithmetic on every element.
  bool prefixOnly = s.scoring == Scoring::prefix_votes;
  SmallVector<int32_t> offsets(tile);
  for (int64_t j = 0; j < tile; ++j)
    offsets[j] = static_cast<int32_t>(j);
  auto offsetsTy = RankedTensorType::get({tile}, i32);
  Value columnOffsets = arith::ConstantOp::create(
      b, loc, offsetsTy, DenseIntElementsAttr::get(offsetsTy, offsets));
  Value base32 = arith::IndexCastOp::create(
      b, loc, i32, arith::SubIOp::create(b, loc, prefix, start));
  linalg::GenericOp rowLimitsOp = generic(
      RankedTensorType::get({s.window}, i32), {}, {empty({ofr(s.window)}, i32)},
      {map(1, {0})}, {par}, [=](OpBuilder &nb, Location l, ValueRange) {
        Value limit = base32;
        if (prefixOnly)
          limit = arith::SubIOp::create(
              nb, l, limit,
              arith::ConstantOp::create(nb, l, nb.getI32IntegerAttr(1)));
        else
          limit = arith::AddIOp::create(nb, l, limit, indexAsI32(nb, l, 0));
        linalg::YieldOp::create(nb, l, ValueRange{limit});
      });
  Value rowLimits = rowLimitsOp.getResult(0);
  auto visible = [=](OpBuilder &nb, Location l, Value offset, Value limit) {
    Value n = indexAsI32(nb, l, 2);
    Value tileC = arith::ConstantOp::create(nb, l, nb.getI32IntegerAttr(tile));
    Value col = arith::AddIOp::create(
        nb, l, arith::MulIOp::create(nb, l, n, tileC), offset);
    return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle, col, limit);
  };
  auto scaled = [=](OpBuilder &nb, Location l, Value x) {
    return arith::MulFOp::create(nb, l, x, constF32(nb, l, scale));
  };
  // Loops (b, kv, n, g, jt, w): the rows w are the innermost, parallel axis.
  AffineMap logitsMap = map(6, {0, 1, 2, 4, 3, 5}), offsetMap = map(6, {4}),
            limitMap = map(6, {5}), statMap = map(6, {0, 1, 2, 3, 5});
  SmallVector<IteratorType> iters = {par, par, par, par, red, par};
  auto maxOp = generic(
      RankedTensorType::get(
          {s.batch, s.kvHeads,
           getConstantIntValue(count).value_or(ShapedType::kDynamic), s.group,
           s.window},
          f32),
      {logitsT, columnOffsets, rowLimits}, {filled(shape, f32, cF32(kNegInf))},
      {logitsMap, offsetMap, limitMap, statMap}, iters,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value x = arith::SelectOp::create(
            nb, l, visible(nb, l, args[1], args[2]), scaled(nb, l, args[0]),
            constF32(nb, l, kNegInf));
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::MaximumFOp::create(nb, l, args[3], x)});
      });
  Value tileMax = maxOp.getResult(0);
  auto sumOp = generic(
      tileMax.getType(), {logitsT, tileMax, columnOffsets, rowLimits},
      {filled(shape, f32, cF32(0.0f))},
      {logitsMap, statMap, offsetMap, limitMap, statMap}, iters,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value e = math::ExpOp::create(
            nb, l, shifted(nb, l, scaled(nb, l, args[0]), args[1]));
        Value x = arith::SelectOp::create(
            nb, l, visible(nb, l, args[2], args[3]), e, constF32(nb, l, 0.0f));
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::AddFOp::create(nb, l, args[4], x)});
      });
  // One tile of T x (G*W) logits is computed per (b, kv, n, g) and used by
  // both statistics; on a GPU per (b, kv, n), one block each, which computes
  // the row limits itself (no host-written buffer for kernels to read).
  blockGroup(sumOp, {1, 1, 1}, {maxOp, producer, rowLimitsOp}, {producer});
  return {tileMax, sumOp.getResult(0)};
}

std::pair<Value, Value> Formulation::rowStatistics(Value tileMax,
                                                   Value tileSum) {
  SmallVector<OpFoldResult> shape = {ofr(s.batch), ofr(s.kvHeads), ofr(s.group),
                                     ofr(s.window)};
  Type rowTy =
      RankedTensorType::get({s.batch, s.kvHeads, s.group, s.window}, f32);
  // Loops (b, kv, g, n, w): the rows w stay the innermost, parallel axis.
  SmallVector<IteratorType> iters = {par, par, par, red, par};
  AffineMap perTile = map(5, {0, 1, 3, 2, 4}), perRow = map(5, {0, 1, 2, 4});
  auto maxOp = generic(
      rowTy, {tileMax}, {filled(shape, f32, cF32(kNegInf))}, {perTile, perRow},
      iters, [](OpBuilder &nb, Location l, ValueRange args) {
        linalg::YieldOp::create(
            nb, l,
            ValueRange{arith::MaximumFOp::create(nb, l, args[1], args[0])});
      });
  Value rowMax = maxOp.getResult(0);
  // sum_n tileSum[n] * exp(tileMax[n] - rowMax); a tile whose maximum is
  // the row's contributes its sum unscaled (also when both are infinite).
  auto sumOp = generic(
      rowTy, {tileMax, tileSum, rowMax}, {filled(shape, f32, cF32(0.0f))},
      {perTile, perTile, perRow, perRow}, iters,
      [](OpBuilder &nb, Location l, ValueRange args) {
        Value factor =
            math::ExpOp::create(nb, l, shifted(nb, l, args[0], args[2]));
        Value part = arith::MulFOp::create(nb, l, args[1], factor);
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::AddFOp::create(nb, l, args[3], part)});
      });
  auto invOp = generic(
      rowTy, {sumOp.getResult(0)}, {empty(shape, f32)},
      {map(4, {0, 1, 2, 3}), map(4, {0, 1, 2, 3})}, {par, par, par, par},
      [](OpBuilder &nb, Location l, ValueRange args) {
        Value one = constF32(nb, l, 1.0f);
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::DivFOp::create(nb, l, one, args[0])});
      });
  // GPU: one block per (b, kv) combines all tiles of its rows.
  blockGroup(invOp, {1, 1}, {sumOp, maxOp});
  return {rowMax, invOp.getResult(0)};
}

Value Formulation::tileVotes(Value logitsT, const KeyTiles &tiles, Value rowMax,
                             Value rowInv, Operation *producer) {
  OpFoldResult count = tensor::getMixedSize(b, loc, tiles.tiles, 2);
  int64_t dynCount = getConstantIntValue(count).value_or(ShapedType::kDynamic);
  int64_t tile = keyTile;
  float scale = s.scale;
  // Loops (b, kv, n, g, jt, w): the sum over the window rows w. No mask:
  // every window row sees every prefix column (later columns are dropped).
  // The key tile n comes before the query head g, so that the G heads of a
  // kv head that each recompute the tile's logits follow each other and
  // find the key tile in the cache (with g outside n, all of K is streamed
  // from memory once per head).
  auto votesOp = generic(
      RankedTensorType::get({s.batch, s.kvHeads, s.group, dynCount, tile}, f32),
      {logitsT, rowMax, rowInv},
      {filled({ofr(s.batch), ofr(s.kvHeads), ofr(s.group), count, ofr(tile)},
              f32, cF32(0.0f))},
      {map(6, {0, 1, 2, 4, 3, 5}), map(6, {0, 1, 3, 5}), map(6, {0, 1, 3, 5}),
       map(6, {0, 1, 3, 2, 4})},
      {par, par, par, par, par, red},
      [=](OpBuilder &nb, Location l, ValueRange args) {
        Value x = arith::MulFOp::create(nb, l, args[0], constF32(nb, l, scale));
        Value p = arith::MulFOp::create(
            nb, l, math::ExpOp::create(nb, l, shifted(nb, l, x, args[1])),
            args[2]);
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::AddFOp::create(nb, l, args[3], p)});
      });
  if (s.expand()) {
    blockGroup(votesOp, {1, 1, 1, 0}, {producer}, {producer});
    return tensor::CollapseShapeOp::create(
        b, loc, votesOp.getResult(0),
        ArrayRef<ReassociationIndices>{{0}, {1, 2}, {3, 4}});
  }
  // mean / max over the G query heads of a kv head, before pooling; mean
  // accumulates v / G in head order.
  bool mean = s.gqa == GqaPolicy::mean;
  auto aggregateOp =
      generic(RankedTensorType::get({s.batch, s.kvHeads, dynCount, tile}, f32),
              {votesOp.getResult(0)},
              {filled({ofr(s.batch), ofr(s.kvHeads), count, ofr(tile)}, f32,
                      cF32(mean ? 0.0f : kNegInf))},
              {map(5, {0, 1, 4, 2, 3}), map(5, {0, 1, 2, 3})},
              {par, par, par, par, red}, foldHeadVotes(s));
  blockGroup(aggregateOp, {1, 1, 1}, {votesOp, producer}, {producer});
  return tensor::CollapseShapeOp::create(
      b, loc, aggregateOp.getResult(0),
      ArrayRef<ReassociationIndices>{{0}, {1}, {2, 3}});
}

Value Formulation::votes(Value queries, Value keys, Value length,
                         Value prefix) {
  if (isAccumulated(s.scoring))
    return accumulatedVotes(queries, keys, length, prefix);
  if (opts.keepLogits && layout.keepsLogits())
    return votesPerHead(queries, keys, length, prefix);
  return spanVotes(queries, keys, length, prefix, /*keep=*/false);
}

Value Formulation::spanVotes(Value queries, Value keys, Value length,
                             Value prefix, bool keep, ValueRange scratch,
                             SmallVectorImpl<Value> *keptLogits) {
  Value queriesT = queriesByHead(queries);
  SmallVector<KeyTiles> spans = layout.keyTiles(*this, keys, length);
  assert((scratch.empty() || scratch.size() == spans.size()) &&
         "one logits tensor per span of keyTiles");
  SmallVector<Value> maxes, sums;
  SmallVector<Operation *> kept;
  for (auto [i, span] : llvm::enumerate(spans)) {
    Operation *l =
        logits(queriesT, span, scratch.empty() ? Value() : scratch[i]);
    auto [tileMax, tileSum] = tileStatistics(l->getResult(0), span, prefix, l);
    maxes.push_back(tileMax);
    sums.push_back(tileSum);
    kept.push_back(l);
    if (keep && keptLogits)
      keptLogits->push_back(l->getResult(0));
  }
  Value tileMax = maxes.size() == 1
                      ? maxes[0]
                      : Value(tensor::ConcatOp::create(b, loc, 2, maxes));
  Value tileSum = sums.size() == 1
                      ? sums[0]
                      : Value(tensor::ConcatOp::create(b, loc, 2, sums));
  auto [rowMax, rowInv] = rowStatistics(tileMax, tileSum);
  SmallVector<Value> parts;
  // GPU blocks: each kernel stages its own queries and key tiles.
  if (layout.restagesPerKernel()) {
    queriesT = queriesByHead(queries);
    spans = layout.keyTiles(*this, keys, length);
  }
  for (auto [span, l] : llvm::zip(spans, kept)) {
    if (keep) {
      // The statistics' tile loop yields the logits it computed.
      parts.push_back(tileVotes(l->getResult(0), span, rowMax, rowInv, {}));
      continue;
    }
    // The logits again: recomputed per tile rather than stored.
    Operation *again = logits(queriesT, span);
    parts.push_back(
        tileVotes(again->getResult(0), span, rowMax, rowInv, again));
  }
  Value all = parts.size() == 1
                  ? parts[0]
                  : Value(tensor::ConcatOp::create(b, loc, 2, parts));
  SmallVector<OpFoldResult> offsets(3, ofr(0)), strides(3, ofr(1));
  SmallVector<OpFoldResult> sizes = {ofr(s.batch), ofr(s.heads),
                                     getAsOpFoldResult(prefix)};
  return tensor::ExtractSliceOp::create(b, loc, all, offsets, sizes, strides);
}

/// One (batch, query head) at a time, in order: its W x L logits are the
/// only scratch that grows with the prompt beyond the votes (8 MiB at W = 32,
/// L = 65536; no more than the [B, Hc, L] votes while W <= B x Hc), whatever
/// the number of threads, and one buffer serves every head (a loop-carried
/// tensor, so that bufferisation writes it in place rather than allocating,
/// and faulting in, a fresh one per head). The head's key tiles are the
/// parallel loops (its tile groups). The G heads of a kv head follow each
/// other, so its keys are read G times; the kept logits of one head stay in
/// the cache between the passes instead (as fast as keeping the G heads'
/// logits at once, measured at L = 16384 and 65536). gqa mean/max fold each
/// head's votes into its kv head's row in head order, as the aggregation of
/// the G heads does.
Value Formulation::votesPerHead(Value queries, Value keys, Value length,
                                Value prefix) {
  SelectShape one = s;
  one.batch = one.kvHeads = one.queryHeads = one.group = one.heads = 1;
  one.gqa = GqaPolicy::expand;
  bool mean = s.gqa == GqaPolicy::mean;
  SmallVector<OpFoldResult> votesShape = {ofr(s.batch), ofr(s.heads),
                                          getAsOpFoldResult(prefix)};
  SmallVector<Value> inits = {
      s.expand() ? empty(votesShape, f32)
                 : filled(votesShape, f32, cF32(mean ? 0.0f : kNegInf))};
  // The head's logits, one tensor per span of keyTiles.
  for (OpFoldResult count : keySpans(length).counts(b))
    inits.push_back(empty(
        {ofr(1), ofr(1), count, ofr(keyTile), ofr(1), ofr(s.window)}, f32));
  auto loop = scf::ForOp::create(
      b, loc, cIndex(0), cIndex(s.batch * s.queryHeads), cIndex(1), inits);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value i = loop.getInductionVar();
  Value bi = arith::DivUIOp::create(b, loc, i, cIndex(s.queryHeads));
  Value h = arith::RemUIOp::create(b, loc, i, cIndex(s.queryHeads));
  Value kv = arith::DivUIOp::create(b, loc, h, cIndex(s.group));
  FormulationOptions oneOptions = opts;
  oneOptions.keepLogits = false;
  Formulation f(b, loc, one, oneOptions, tiles);
  SmallVector<Value> kept;
  Value v = f.spanVotes(
      rowOf(queries, bi, h, false), rowOf(keys, bi, kv, false), length, prefix,
      /*keep=*/true, loop.getRegionIterArgs().drop_front(), &kept);
  Value out = loop.getRegionIterArgs()[0];
  SmallVector<OpFoldResult> offsets = {bi, s.expand() ? h : kv, ofr(0)};
  SmallVector<OpFoldResult> sizes = {ofr(1), ofr(1), getAsOpFoldResult(prefix)};
  SmallVector<OpFoldResult> strides(3, ofr(1));
  if (!s.expand()) {
    Value row =
        tensor::ExtractSliceOp::create(b, loc, out, offsets, sizes, strides);
    v = generic(row.getType(), {v}, {row},
                {map(3, {0, 1, 2}), map(3, {0, 1, 2})}, {par, par, par},
                foldHeadVotes(s))
            .getResult(0);
  }
  SmallVector<Value> next = {
      tensor::InsertSliceOp::create(b, loc, v, out, offsets, sizes, strides)};
  for (auto [value, init] : llvm::zip(kept, ArrayRef(inits).drop_front()))
    next.push_back(
        value.getType() == init.getType()
            ? value
            : Value(tensor::CastOp::create(b, loc, init.getType(), value)));
  scf::YieldOp::create(b, loc, next);
  return loop.getResult(0);
}

void Formulation::checkQueryRows(Value rows, Value length) {
  if (opts.checked)
    return;
  auto check = [&](arith::CmpIPredicate pred, Value lhs, Value rhs,
                   const std::string &message) {
    cf::AssertOp::create(b, loc, arith::CmpIOp::create(b, loc, pred, lhs, rhs),
                         s.opName + ": " + message);
  };
  check(arith::CmpIPredicate::sge, rows, cIndex(s.window),
        llvm::formatv("'queries' dim 2 is below window {0}", s.window).str());
  check(arith::CmpIPredicate::sle, rows, length,
        "'queries' dim 2 exceeds the prompt length (keys dim 2)");
}

/// One (batch, query head) at a time, as votesPerHead: its Q x L logits
/// (f32; 4 MiB at Q = 512, L = 2048) are the scratch, computed once and
/// read by the row statistics and the votes. Query t sits at L - Q + t and
/// sees the columns up to it; each query's probabilities are summed over
/// the Q queries into the prefix columns' votes, which norm_sum divides by
/// the number of queries that see the column, min(Q, L - j). Parallel over
/// the query rows, then over the prefix columns.
Value Formulation::accumulatedVotes(Value queries, Value keys, Value length,
                                    Value prefix) {
  Value rows = tensor::DimOp::create(b, loc, queries, 2);
  if (cast<RankedTensorType>(queries.getType()).isDynamicDim(2))
    checkQueryRows(rows, length);
  bool mean = s.gqa == GqaPolicy::mean;
  bool norm = s.scoring == Scoring::norm_sum;
  float scale = s.scale;
  SmallVector<OpFoldResult> votesShape = {ofr(s.batch), ofr(s.heads),
                                          getAsOpFoldResult(prefix)};
  Value init = s.expand()
                   ? empty(votesShape, f32)
                   : filled(votesShape, f32, cF32(mean ? 0.0f : kNegInf));
  auto loop =
      scf::ForOp::create(b, loc, cIndex(0), cIndex(s.batch * s.queryHeads),
                         cIndex(1), ValueRange{init});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value i = loop.getInductionVar();
  Value bi = arith::DivUIOp::create(b, loc, i, cIndex(s.queryHeads));
  Value h = arith::RemUIOp::create(b, loc, i, cIndex(s.queryHeads));
  Value kv = arith::DivUIOp::create(b, loc, h, cIndex(s.group));
  Value q = rowOf(queries, bi, h, false), k = rowOf(keys, bi, kv, false);
  // Rows and columns of one head; the [1, 1, ...] slices read through
  // constant indices.
  AffineExpr zero = b.getAffineConstantExpr(0);
  auto headMap = [&](unsigned numDims, ArrayRef<unsigned> dims) {
    SmallVector<AffineExpr> exprs = {zero, zero};
    for (unsigned d : dims)
      exprs.push_back(b.getAffineDimExpr(d));
    return AffineMap::get(numDims, 0, exprs, b.getContext());
  };
  OpFoldResult q0 = tensor::getMixedSize(b, loc, q, 2);
  OpFoldResult l0 = getAsOpFoldResult(length);
  // Query t sees column j when j <= (L - Q) + t.
  Value base = arith::SubIOp::create(b, loc, length, rows);
  auto visible = [=](OpBuilder &nb, Location l, unsigned tDim, unsigned jDim) {
    Value t = linalg::IndexOp::create(nb, l, tDim);
    Value j = linalg::IndexOp::create(nb, l, jDim);
    return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle, j,
                                 arith::AddIOp::create(nb, l, base, t));
  };
  auto scaled = [=](OpBuilder &nb, Location l, Value x) {
    return arith::MulFOp::create(nb, l, x, constF32(nb, l, scale));
  };
  // logits[t, j] = <q_t, k_j>: loops (t, j, d).
  Value logitsInit = filled({q0, l0}, f32, cF32(0.0f));
  auto logitsOp =
      generic(logitsInit.getType(), {q, k}, {logitsInit},
              {headMap(3, {0, 2}), headMap(3, {1, 2}), map(3, {0, 1})},
              {par, par, red}, dotProductBody);
  Value logits = logitsOp.getResult(0);
  // Row maximum and softmax denominator over the visible columns: (t, j).
  Value maxInit = filled({q0}, f32, cF32(kNegInf));
  auto maxOp = generic(
      maxInit.getType(), {logits}, {maxInit}, {map(2, {0, 1}), map(2, {0})},
      {par, red}, [&](OpBuilder &nb, Location l, ValueRange args) {
        Value x = arith::SelectOp::create(nb, l, visible(nb, l, 0, 1),
                                          scaled(nb, l, args[0]),
                                          constF32(nb, l, kNegInf));
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::MaximumFOp::create(nb, l, args[1], x)});
      });
  Value rowMax = maxOp.getResult(0);
  Value sumInit = filled({q0}, f32, cF32(0.0f));
  auto sumOp = generic(
      sumInit.getType(), {logits, rowMax}, {sumInit},
      {map(2, {0, 1}), map(2, {0}), map(2, {0})}, {par, red},
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value e = math::ExpOp::create(
            nb, l, shifted(nb, l, scaled(nb, l, args[0]), args[1]));
        Value x = arith::SelectOp::create(nb, l, visible(nb, l, 0, 1), e,
                                          constF32(nb, l, 0.0f));
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::AddFOp::create(nb, l, args[2], x)});
      });
  Value rowSum = sumOp.getResult(0);
  // votes[j] = sum_t p[t, j] over the prefix columns: loops (j, t).
  Value prefixLogits = tensor::ExtractSliceOp::create(
      b, loc, logits, ArrayRef<OpFoldResult>{ofr(0), ofr(0)},
      ArrayRef<OpFoldResult>{q0, getAsOpFoldResult(prefix)},
      ArrayRef<OpFoldResult>{ofr(1), ofr(1)});
  Value votesInit = filled({getAsOpFoldResult(prefix)}, f32, cF32(0.0f));
  auto votesOp = generic(
      votesInit.getType(), {prefixLogits, rowMax, rowSum}, {votesInit},
      {map(2, {1, 0}), map(2, {1}), map(2, {1}), map(2, {0})}, {par, red},
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value e = math::ExpOp::create(
            nb, l, shifted(nb, l, scaled(nb, l, args[0]), args[1]));
        Value p = arith::DivFOp::create(nb, l, e, args[2]);
        Value x = arith::SelectOp::create(nb, l, visible(nb, l, 1, 0), p,
                                          constF32(nb, l, 0.0f));
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::AddFOp::create(nb, l, args[3], x)});
      });
  Value v = votesOp.getResult(0);
  if (norm) {
    // Column j is seen by min(Q, L - j) queries (at least W + 1 > 0).
    auto normOp = generic(
        v.getType(), {v}, {empty({getAsOpFoldResult(prefix)}, f32)},
        {map(1, {0}), map(1, {0})}, {par},
        [&](OpBuilder &nb, Location l, ValueRange args) {
          Value j = linalg::IndexOp::create(nb, l, 0);
          Value count = arith::MinUIOp::create(
              nb, l, rows, arith::SubIOp::create(nb, l, length, j));
          Value c = arith::UIToFPOp::create(
              nb, l, f32,
              arith::IndexCastUIOp::create(nb, l, nb.getI64Type(), count));
          linalg::YieldOp::create(
              nb, l, ValueRange{arith::DivFOp::create(nb, l, args[0], c)});
        });
    v = normOp.getResult(0);
  }
  Value out = loop.getRegionIterArgs()[0];
  SmallVector<OpFoldResult> offsets = {bi, s.expand() ? h : kv, ofr(0)};
  SmallVector<OpFoldResult> sizes = {ofr(1), ofr(1), getAsOpFoldResult(prefix)};
  SmallVector<OpFoldResult> strides(3, ofr(1));
  auto rowTy = RankedTensorType::get(
      {1, 1, cast<RankedTensorType>(v.getType()).getDimSize(0)}, f32);
  v = tensor::ExpandShapeOp::create(
      b, loc, rowTy, v, ArrayRef<ReassociationIndices>{{0, 1, 2}},
      ArrayRef<OpFoldResult>{ofr(1), ofr(1), getAsOpFoldResult(prefix)});
  if (!s.expand()) {
    Value row =
        tensor::ExtractSliceOp::create(b, loc, out, offsets, sizes, strides);
    v = generic(row.getType(), {v}, {row},
                {map(3, {0, 1, 2}), map(3, {0, 1, 2})}, {par, par, par},
                foldHeadVotes(s))
            .getResult(0);
  }
  scf::YieldOp::create(b, loc,
                       ValueRange{tensor::InsertSliceOp::create(
                           b, loc, v, out, offsets, sizes, strides)});
  return loop.getResult(0);
}

/// KeyDiff (docs/semantics.md, "Comparison scorings"), in f32 over whole
/// tensors: the squared norm of every key, the anchor a = sum of the unit
/// keys of the kv head (all L rows, in row order), |a|, then for each prefix
/// key 1 - <k_j, a> / (|k_j| |a|), 1 where either norm is 0. A NaN or
/// infinite key makes its head's anchor, and so every score of the head,
/// NaN. Per kv head; `expand` repeats a kv head's scores for its G query
/// heads.
Value Formulation::keydiffScores(Value keys, Value length, Value prefix) {
  OpFoldResult l0 = getAsOpFoldResult(length), p0 = getAsOpFoldResult(prefix);
  OpFoldResult batch = ofr(s.batch), kvHeads = ofr(s.kvHeads);
  // sq[b, h, j] = sum_d k^2: loops (b, h, j, d).
  Value sqInit = filled({batch, kvHeads, l0}, f32, cF32(0.0f));
  auto sqOp =
      generic(sqInit.getType(), {keys}, {sqInit},
              {map(4, {0, 1, 2, 3}), map(4, {0, 1, 2})}, {par, par, par, red},
              [](OpBuilder &nb, Location l, ValueRange args) {
                Value x = toF32(nb, l, args[0]);
                linalg::YieldOp::create(
                    nb, l,
                    ValueRange{arith::AddFOp::create(
                        nb, l, args[1], arith::MulFOp::create(nb, l, x, x))});
              });
  Value sq = sqOp.getResult(0);
  // a[b, h, d] = sum_j k_j[d] / |k_j| (0 for a zero key): loops (b, h, d, j).
  auto isZero = [](OpBuilder &nb, Location l, Value x) {
    return arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, x,
                                 constF32(nb, l, 0.0f));
  };
  Value anchorInit = filled({batch, kvHeads, ofr(s.dim)}, f32, cF32(0.0f));
  auto anchorOp = generic(
      anchorInit.getType(), {keys, sq}, {anchorInit},
      {map(4, {0, 1, 3, 2}), map(4, {0, 1, 3}), map(4, {0, 1, 2})},
      {par, par, par, red}, [&](OpBuilder &nb, Location l, ValueRange args) {
        Value unit = arith::DivFOp::create(
            nb, l, toF32(nb, l, args[0]), math::SqrtOp::create(nb, l, args[1]));
        Value u = arith::SelectOp::create(nb, l, isZero(nb, l, args[1]),
                                          constF32(nb, l, 0.0f), unit);
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::AddFOp::create(nb, l, args[2], u)});
      });
  Value anchor = anchorOp.getResult(0);
  // aa[b, h] = |a|^2: loops (b, h, d).
  Value aaInit = filled({batch, kvHeads}, f32, cF32(0.0f));
  auto aaOp = generic(
      aaInit.getType(), {anchor}, {aaInit}, {map(3, {0, 1, 2}), map(3, {0, 1})},
      {par, par, red}, [](OpBuilder &nb, Location l, ValueRange args) {
        Value x = args[0];
        linalg::YieldOp::create(
            nb, l,
            ValueRange{arith::AddFOp::create(
                nb, l, args[1], arith::MulFOp::create(nb, l, x, x))});
      });
  // dot[b, h, j] = <k_j, a> over the prefix keys: loops (b, h, j, d).
  Value prefixKeys = tensor::ExtractSliceOp::create(
      b, loc, keys, ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(0), ofr(0)},
      ArrayRef<OpFoldResult>{batch, kvHeads, p0, ofr(s.dim)},
      ArrayRef<OpFoldResult>{ofr(1), ofr(1), ofr(1), ofr(1)});
  Value dotInit = filled({batch, kvHeads, p0}, f32, cF32(0.0f));
  auto dotOp =
      generic(dotInit.getType(), {prefixKeys, anchor}, {dotInit},
              {map(4, {0, 1, 2, 3}), map(4, {0, 1, 3}), map(4, {0, 1, 2})},
              {par, par, par, red}, dotProductBody);
  Value prefixSq = tensor::ExtractSliceOp::create(
      b, loc, sq, ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(0)},
      ArrayRef<OpFoldResult>{batch, kvHeads, p0},
      ArrayRef<OpFoldResult>{ofr(1), ofr(1), ofr(1)});
  auto scoreOp = generic(
      dotInit.getType(), {dotOp.getResult(0), prefixSq, aaOp.getResult(0)},
      {empty({batch, kvHeads, p0}, f32)},
      {map(3, {0, 1, 2}), map(3, {0, 1, 2}), map(3, {0, 1}), map(3, {0, 1, 2})},
      {par, par, par}, [&](OpBuilder &nb, Location l, ValueRange args) {
        Value norms =
            arith::MulFOp::create(nb, l, math::SqrtOp::create(nb, l, args[1]),
                                  math::SqrtOp::create(nb, l, args[2]));
        Value cosine = arith::DivFOp::create(nb, l, args[0], norms);
        Value none = arith::OrIOp::create(nb, l, isZero(nb, l, args[1]),
                                          isZero(nb, l, args[2]));
        Value c =
            arith::SelectOp::create(nb, l, none, constF32(nb, l, 0.0f), cosine);
        linalg::YieldOp::create(
            nb, l,
            ValueRange{arith::SubFOp::create(nb, l, constF32(nb, l, 1.0f), c)});
      });
  Value scores = scoreOp.getResult(0);
  if (!s.expand())
    return scores;
  // Query head h reads kv head h / G: [B, Hkv, G, P] collapsed to [B, Hq, P].
  Value repeated =
      linalg::BroadcastOp::create(
          b, loc, scores, empty({batch, kvHeads, ofr(s.group), p0}, f32),
          ArrayRef<int64_t>{2})
          .getResult()[0];
  return tensor::CollapseShapeOp::create(
      b, loc, repeated, ArrayRef<ReassociationIndices>{{0}, {1, 2}, {3}});
}

/// Stride-1 pooling with kernel/2 neighbours on each side over the prefix,
/// evaluated on the chunk-padded prefix [0, Pp) (positions >= P are never
/// ranked). avg: zero padding and division by the kernel size; max: -inf
/// padding, i.e. the maximum over in-range neighbours.
Value Formulation::pool(Value votesT, Value prefix,
                        OpFoldResult paddedPrefixLen) {
  bool avg = s.pooling == PoolingKind::avg;
  float padValue = avg ? 0.0f : kNegInf;
  int64_t radius = s.kernel / 2;
  AffineExpr p0 = b.getAffineSymbolExpr(0), p1 = b.getAffineSymbolExpr(1);
  OpFoldResult high = affine::makeComposedFoldedAffineApply(
      b, loc, p1 - p0 + radius, {getAsOpFoldResult(prefix), paddedPrefixLen});
  Value source = tensor::PadOp::create(
      b, loc, Type(), votesT,
      ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(radius)},
      ArrayRef<OpFoldResult>{ofr(0), ofr(0), high}, cF32(padValue));
  SmallVector<OpFoldResult> shape = {ofr(s.batch), ofr(s.heads),
                                     paddedPrefixLen};
  Value window = empty({ofr(s.kernel)}, f32);
  AffineExpr d0 = b.getAffineDimExpr(0), d1 = b.getAffineDimExpr(1),
             d2 = b.getAffineDimExpr(2), d3 = b.getAffineDimExpr(3);
  AffineMap padMap = AffineMap::get(4, 0, {d0, d1, d2 + d3}, b.getContext());
  Value init = filled(shape, f32, cF32(padValue));
  auto poolOp = generic(
      init.getType(), {source, window}, {init},
      {padMap, map(4, {3}), map(4, {0, 1, 2})}, {par, par, par, red},
      [avg](OpBuilder &nb, Location l, ValueRange args) {
        Value r =
            avg ? Value(arith::AddFOp::create(nb, l, args[2], args[0]))
                : Value(arith::MaximumFOp::create(nb, l, args[2], args[0]));
        linalg::YieldOp::create(nb, l, ValueRange{r});
      });
  Value pooled = poolOp.getResult(0);
  if (avg) {
    float k = static_cast<float>(s.kernel);
    auto divOp = generic(
        init.getType(), {pooled}, {empty(shape, f32)},
        {map(3, {0, 1, 2}), map(3, {0, 1, 2})}, {par, par, par},
        [k](OpBuilder &nb, Location l, ValueRange args) {
          linalg::YieldOp::create(nb, l,
                                  ValueRange{arith::DivFOp::create(
                                      nb, l, args[0], constF32(nb, l, k))});
        });
    pooled = divOp.getResult(0);
  }
  return s.block == 1 ? pooled : blockSums(pooled, prefix, paddedPrefixLen);
}

/// Every position of [0, Pp) carries the sum of the pooled scores of its
/// block [n*B, min((n+1)*B, P)), summed in position order: one reduction
/// over the block's B offsets, reading the (zero-padded) scores at
/// (j floordiv B) * B + r and masking positions past the prefix. One
/// structured op, so that GPU blocks distribute it like the pooling.
Value Formulation::blockSums(Value pooled, Value prefix,
                             OpFoldResult paddedPrefixLen) {
  int64_t block = s.block;
  Value source = tensor::PadOp::create(
      b, loc, Type(), pooled, ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(0)},
      ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(block - 1)}, cF32(0.0f));
  AffineExpr d0 = b.getAffineDimExpr(0), d1 = b.getAffineDimExpr(1),
             d2 = b.getAffineDimExpr(2), d3 = b.getAffineDimExpr(3);
  AffineMap blockMap = AffineMap::get(
      4, 0, {d0, d1, d2.floorDiv(block) * block + d3}, b.getContext());
  Value offsets = empty({ofr(block)}, f32);
  Value init =
      filled({ofr(s.batch), ofr(s.heads), paddedPrefixLen}, f32, cF32(0.0f));
  Value prefix32 = arith::IndexCastOp::create(b, loc, i32, prefix);
  auto sumOp = generic(
      init.getType(), {source, offsets}, {init},
      {blockMap, map(4, {3}), map(4, {0, 1, 2})}, {par, par, par, red},
      [=](OpBuilder &nb, Location l, ValueRange args) {
        Value j = linalg::IndexOp::create(nb, l, 2);
        Value r = linalg::IndexOp::create(nb, l, 3);
        Value width = arith::ConstantIndexOp::create(nb, l, block);
        Value start = arith::MulIOp::create(
            nb, l, arith::DivUIOp::create(nb, l, j, width), width);
        Value position = arith::IndexCastOp::create(
            nb, l, nb.getI32Type(), arith::AddIOp::create(nb, l, start, r));
        Value inside = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt,
                                             position, prefix32);
        Value x = arith::SelectOp::create(nb, l, inside, args[0],
                                          constF32(nb, l, 0.0f));
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::AddFOp::create(nb, l, args[2], x)});
      });
  return sumOp.getResult(0);
}
