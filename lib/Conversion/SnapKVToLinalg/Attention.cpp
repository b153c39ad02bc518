//===- Attention.cpp - snapkv.attention as a tiled online softmax ---------===//
//
// FlashAttention's recurrence in structured ops: an scf.forall over
// (batch, query head, tile of Tq query rows), and in each, an scf.for over
// the key tiles of Tk positions that the tile's rows can see (the causal
// upper triangle is skipped) carrying the row maximum m, the row sum l and
// the [Tq, D] accumulator. Per key tile, static-shaped linalg ops: the
// logits (a contraction over D), the masked row maximum, the
// probabilities, the rescaled sum and the rescaled accumulator plus P x V
// (a contraction over the tile). The scores are never held beyond one
// tile. The tile's logits are laid out [Tk, Tq], query rows innermost: the
// row maximum and sum then reduce across vectors of rows (one vector
// instruction per key) rather than across the lanes of one vector (a
// scalar chain per row, which was a quarter of the time). The queries are
// zero-padded to whole row tiles and transposed once ([D, L], a tile's rows
// contiguous); the keys and values, when shorter than a tile, zero-padded.
// The last key tile starts at L - Tk (overlapping its predecessor) so every
// tile is a static view; the columns an earlier tile covered are masked
// like future ones.
//
//===----------------------------------------------------------------------===//

#include "Formulation.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

#include <limits>

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
/// Width of a one-row tile's partial dot products (AVX-512's f32 lanes).
constexpr int64_t kLanes = 16;
/// Parts a decode step's keys are split into (FlashDecoding): a model's few kv
/// heads alone would leave cores idle (SmolLM2's 3 on 2 threads).
constexpr int64_t kSplits = 4;

class AttentionBuilder {
public:
  AttentionBuilder(OpBuilder &b, Location loc, AttentionOp op,
                   int64_t queryTile, int64_t keyTile)
      : b(b), loc(loc), tq(queryTile), tk(keyTile) {
    RankedTensorType qTy = op.getQueries().getType();
    RankedTensorType kTy = op.getKeys().getType();
    elemTy = qTy.getElementType();
    batch = qTy.getDimSize(0);
    queryHeads = qTy.getDimSize(1);
    kvHeads = kTy.getDimSize(1);
    group = queryHeads / kvHeads;
    dim = qTy.getDimSize(3);
    scale = static_cast<float>(op.getEffectiveScale());
    // A decode step (one static query row per head): the tile's rows are
    // the `group` query heads that share a kv head, so that each key and
    // value tile is read once for all of them, and the logits are dot
    // products along D (dotLogits). Otherwise a static number of query rows
    // below the tile is the tile: padding it would multiply the work.
    int64_t rows = qTy.getDimSize(2);
    headRows = rows == 1 && dim % kLanes == 0;
    if (headRows)
      tq = group;
    else if (!ShapedType::isDynamic(rows) && rows >= 1 && rows < tq)
      tq = rows;
    f32 = b.getF32Type();
    i32 = b.getI32Type();
  }

  /// `offset`: the position of query row 0 among the keys, or null for
  /// Lk - Lq.
  Value build(Value queries, Value keys, Value values, Value offset);

private:
  Value cIndex(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value cF32(OpBuilder &nb, float v) { return constF32(nb, loc, v); }
  AffineMap map(unsigned numDims, ArrayRef<unsigned> dims) {
    SmallVector<AffineExpr> exprs;
    for (unsigned d : dims)
      exprs.push_back(b.getAffineDimExpr(d));
    return AffineMap::get(numDims, 0, exprs, b.getContext());
  }
  Value empty(ArrayRef<int64_t> shape, Type elem) {
    return tensor::EmptyOp::create(b, loc, shape, elem);
  }
  Value filled(ArrayRef<int64_t> shape, float value) {
    return linalg::FillOp::create(b, loc, cF32(b, value), empty(shape, f32))
        .getResult(0);
  }
  Value generic(Type resultType, ValueRange ins, Value out,
                ArrayRef<AffineMap> maps, ArrayRef<IteratorType> iters,
                function_ref<Value(OpBuilder &, Location, ValueRange)> body) {
    return linalg::GenericOp::create(
               b, loc, resultType, ins, out, maps, iters,
               [&](OpBuilder &nb, Location l, ValueRange args) {
                 linalg::YieldOp::create(nb, l, body(nb, l, args));
               })
        .getResult(0);
  }
  /// The [rows, cols] tile of a [B, H, ., .] tensor at (bi, h, row, col).
  Value tile2D(Value source, Value bi, Value h, OpFoldResult row,
               OpFoldResult col, int64_t rows, int64_t cols) {
    OpFoldResult one = b.getIndexAttr(1);
    return tensor::ExtractSliceOp::create(
        b, loc, RankedTensorType::get({rows, cols}, elemTy), source,
        ArrayRef<OpFoldResult>{bi, h, row, col},
        ArrayRef<OpFoldResult>{one, one, b.getIndexAttr(rows),
                               b.getIndexAttr(cols)},
        SmallVector<OpFoldResult>(4, one));
  }
  /// The logits [Tk, G] of a tile of head rows from the keys [Tk, D] and
  /// the queries [G, D], as dot products along D.
  Value dotLogits(Value kTile, Value qTile);
  /// Pads dim 2 of a [B, H, n, D] tensor with zeros up to `rows`.
  Value padRows(Value source, Value rows);
  /// One query tile over its visible key tiles: its [Tq, D] output rows; or,
  /// with `split` (of kSplits), over that share of the key tiles only, its
  /// running maximum [Tq], sum [Tq] and unnormalised accumulator [Tq, D].
  SmallVector<Value> queryTile(Value queryRows, Value keys, Value values,
                               Value bi, Value kv, Value rowBase, Value length,
                               Value paddedLength, Value split = nullptr);
  /// Row 0's position, clamped to [-Tq, Lk] (no key / every key for the
  /// whole tile either way), so that any offset fits the i32 limits.
  Value clampedBase(Value offset, Value row0, Value lk) {
    return arith::MaxSIOp::create(
        b, loc,
        arith::MinSIOp::create(b, loc,
                               arith::AddIOp::create(b, loc, offset, row0), lk),
        cIndex(-tq));
  }
  /// An output element: the accumulator over the row sum, 0 for a row that
  /// saw no key, in the element type.
  Value normalized(OpBuilder &nb, Location l, Value acc, Value sum) {
    Value positive = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OGT,
                                           sum, cF32(nb, 0.0f));
    Value o = arith::SelectOp::create(nb, l, positive,
                                      arith::DivFOp::create(nb, l, acc, sum),
                                      cF32(nb, 0.0f));
    return elemTy.isF32() ? o : arith::TruncFOp::create(nb, l, elemTy, o);
  }
  /// A decode step's attention (headRows): [B, Hq, 1, D] of `resultType`.
  Value decode(Value queriesT, Value keys, Value values, Value offset,
               Value length, Value paddedLength, RankedTensorType resultType);

  OpBuilder &b;
  Location loc;
  int64_t tq, tk;
  Type elemTy, f32, i32;
  int64_t batch, queryHeads, kvHeads, group, dim;
  float scale;
  bool headRows; // the tile's rows are a kv head's query heads, one row each
};

// A decode step's query rows (one per head of the group): with the rows as
// the vector, the logits would be a few scalar FMAs per key and step of D,
// reading the keys down their columns. As dot products along D instead,
// split into kLanes-wide partial sums (loops (j, r, lane, c), d = c * kLanes
// + lane: the lanes are the vector, each key row read once for all rows r)
// and then reduced over the lanes, the keys stream at memory speed.
Value AttentionBuilder::dotLogits(Value kTile, Value qTile) {
  int64_t chunks = dim / kLanes;
  SmallVector<ReassociationIndices> split = {{0}, {1, 2}};
  Value k3 = tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get({tk, chunks, kLanes}, elemTy), kTile,
      split);
  Value q3 = tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get({tq, chunks, kLanes}, elemTy), qTile,
      split);
  auto contract = arith::FastMathFlags::contract;
  Value partial =
      generic(RankedTensorType::get({tk, tq, kLanes}, f32), {k3, q3},
              filled({tk, tq, kLanes}, 0.0f),
              {map(4, {0, 3, 2}), map(4, {1, 3, 2}), map(4, {0, 1, 2})},
              {par, par, par, red},
              [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                Value prod =
                    arith::MulFOp::create(nb, l, toF32(nb, l, args[0]),
                                          toF32(nb, l, args[1]), contract);
                return arith::AddFOp::create(nb, l, args[2], prod, contract);
              });
  return generic(RankedTensorType::get({tk, tq}, f32), {partial},
                 filled({tk, tq}, 0.0f), {map(3, {0, 1, 2}), map(3, {0, 1})},
                 {par, par, red},
                 [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                   return arith::AddFOp::create(nb, l, args[1], args[0]);
                 });
}

Value AttentionBuilder::padRows(Value source, Value rows) {
  auto ty = cast<RankedTensorType>(source.getType());
  Value current = tensor::DimOp::create(b, loc, source, 2);
  Value high = arith::SubIOp::create(b, loc, rows, current);
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(elemTy));
  SmallVector<int64_t> shape(ty.getShape());
  shape[2] = getConstantIntValue(rows).value_or(ShapedType::kDynamic);
  SmallVector<OpFoldResult> low(4, b.getIndexAttr(0)),
      highs(4, b.getIndexAttr(0));
  highs[2] = high;
  return tensor::PadOp::create(b, loc, RankedTensorType::get(shape, elemTy),
                               source, low, highs, zero);
}

Value AttentionBuilder::build(Value queries, Value keys, Value values,
                              Value offset) {
  // Lengths, the causal offset (Lk - Lq by default) and the padded extents.
  AttentionLengths lengths =
      attentionLengths(b, loc, queries, keys, values, offset);
  Value lq = lengths.lq, lk = lengths.lk;
  offset = lengths.offset;
  // Dynamic lengths must also fit the i32 column arithmetic.
  if (lengths.dynamic) {
    cf::AssertOp::create(
        b, loc,
        arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::slt, lk,
            cIndex(std::numeric_limits<int32_t>::max() - tk - tq)),
        "snapkv.attention: more keys than 32-bit positions allow");
  }
  // Head rows: one tile of the group's heads per kv head, nothing padded.
  Value tiles =
      headRows ? cIndex(1) : arith::CeilDivSIOp::create(b, loc, lq, cIndex(tq));
  Value paddedLq =
      headRows ? lq
               : arith::MulIOp::create(b, loc, tiles, cIndex(tq)).getResult();
  Value paddedLk = arith::MaxSIOp::create(b, loc, lk, cIndex(tk));
  Value q = padRows(queries, paddedLq);
  // A decode step pads its keys and values below, only when they are short.
  Value k = headRows ? Value() : padRows(keys, paddedLk);
  Value v = headRows ? Value() : padRows(values, paddedLk);
  // Q^T per head: [B, Hq, D, Lq'].
  Value queriesT = generic(
      RankedTensorType::get({batch, queryHeads, dim, ShapedType::kDynamic},
                            elemTy),
      {q},
      tensor::EmptyOp::create(b, loc,
                              ArrayRef<OpFoldResult>{b.getIndexAttr(batch),
                                                     b.getIndexAttr(queryHeads),
                                                     b.getIndexAttr(dim),
                                                     paddedLq},
                              elemTy),
      {map(4, {0, 1, 3, 2}), map(4, {0, 1, 2, 3})}, {par, par, par, par},
      [](OpBuilder &, Location, ValueRange args) { return args[0]; });

  // A decode step: the group's heads as rows, the keys split (decode()).
  // Keys and values are padded only when shorter than a tile: a pad by
  // nothing still copies (and zero-fills) the whole cache at every step.
  if (headRows) {
    auto resultTy = cast<RankedTensorType>(queries.getType());
    auto attend = [&](OpBuilder &nb, Location l, bool pad) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
      Value tileK = pad ? padRows(keys, paddedLk) : keys;
      Value tileV = pad ? padRows(values, paddedLk) : values;
      return decode(queriesT, tileK, tileV, offset, lk, pad ? paddedLk : lk,
                    resultTy);
    };
    if (std::optional<int64_t> staticLk = getConstantIntValue(lk))
      return attend(b, loc, *staticLk < tk);
    Value shorter = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, lk,
                                          cIndex(tk));
    return scf::IfOp::create(
               b, loc, shorter,
               [&](OpBuilder &nb, Location l) {
                 scf::YieldOp::create(nb, l, attend(nb, l, true));
               },
               [&](OpBuilder &nb, Location l) {
                 scf::YieldOp::create(nb, l, attend(nb, l, false));
               })
        .getResult(0);
  }

  auto outTy = cast<RankedTensorType>(q.getType());
  Value out = tensor::EmptyOp::create(
      b, loc, outTy.getShape(), elemTy,
      ValueRange{paddedLq}.take_front(outTy.getNumDynamicDims()));
  SmallVector<OpFoldResult> ubs = {b.getIndexAttr(batch),
                                   b.getIndexAttr(queryHeads), tiles};
  auto forall =
      scf::ForallOp::create(b, loc, ubs, ValueRange{out}, std::nullopt);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(forall.getBody());
    SmallVector<Value> ivs = forall.getInductionVars();
    Value bi = ivs[0], h = ivs[1];
    Value row0 = arith::MulIOp::create(b, loc, ivs[2], cIndex(tq));
    Value kv = arith::DivUIOp::create(b, loc, h, cIndex(group));
    OpFoldResult one = b.getIndexAttr(1), zero = b.getIndexAttr(0);
    Value qTile = tile2D(queriesT, bi, h, zero, row0, dim, tq);
    Value tile = queryTile(qTile, k, v, bi, kv, clampedBase(offset, row0, lk),
                           lk, paddedLk)
                     .front();
    b.setInsertionPointToStart(forall.getTerminator().getBody());
    tensor::ParallelInsertSliceOp::create(
        b, loc, tile, forall.getRegionIterArgs()[0],
        ArrayRef<OpFoldResult>{bi, h, row0, zero},
        ArrayRef<OpFoldResult>{one, one, b.getIndexAttr(tq),
                               b.getIndexAttr(dim)},
        SmallVector<OpFoldResult>(4, one));
  }
  Value result = forall.getResult(0);
  SmallVector<OpFoldResult> offsets(4, b.getIndexAttr(0)),
      strides(4, b.getIndexAttr(1));
  SmallVector<OpFoldResult> sizes = {
      b.getIndexAttr(batch), b.getIndexAttr(queryHeads),
      tensor::getMixedSize(b, loc, queries, 2), b.getIndexAttr(dim)};
  return tensor::ExtractSliceOp::create(
      b, loc, cast<RankedTensorType>(queries.getType()), result, offsets, sizes,
      strides);
}

// A decode step: per (batch, kv head, split) one tile of the group's query
// heads over a kSplits-th of the key tiles, then the splits' running maxima,
// sums and accumulators combined (FlashDecoding): out = sum_s acc_s w_s /
// sum_s l_s w_s with w_s = exp(m_s - max_s m_s). The number of splits is fixed,
// so results do not depend on the number of threads.
Value AttentionBuilder::decode(Value queriesT, Value keys, Value values,
                               Value offset, Value length, Value paddedLength,
                               RankedTensorType resultType) {
  int64_t splits = kSplits;
  Value mParts = empty({batch, kvHeads, splits, tq}, f32);
  Value lParts = empty({batch, kvHeads, splits, tq}, f32);
  Value accParts = empty({batch, kvHeads, splits, tq, dim}, f32);
  SmallVector<OpFoldResult> ubs = {
      b.getIndexAttr(batch), b.getIndexAttr(kvHeads), b.getIndexAttr(splits)};
  auto forall = scf::ForallOp::create(
      b, loc, ubs, ValueRange{mParts, lParts, accParts}, std::nullopt);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(forall.getBody());
    SmallVector<Value> ivs = forall.getInductionVars();
    Value bi = ivs[0], kv = ivs[1], split = ivs[2];
    Value h = arith::MulIOp::create(b, loc, kv, cIndex(group));
    OpFoldResult one = b.getIndexAttr(1), zero = b.getIndexAttr(0);
    // The group's heads, row 0 of each, as [G, D] (not rank-reducing: a
    // [1, 1, D, 1] slice to [1, D] would be ambiguous about which unit
    // dimensions it drops).
    Value qTile = tensor::CollapseShapeOp::create(
        b, loc, RankedTensorType::get({tq, dim}, elemTy),
        tensor::ExtractSliceOp::create(
            b, loc, RankedTensorType::get({1, tq, dim, 1}, elemTy), queriesT,
            ArrayRef<OpFoldResult>{bi, h, zero, zero},
            ArrayRef<OpFoldResult>{one, b.getIndexAttr(tq), b.getIndexAttr(dim),
                                   one},
            SmallVector<OpFoldResult>(4, one)),
        SmallVector<ReassociationIndices>{{0, 1}, {2, 3}});
    SmallVector<Value> part = queryTile(qTile, keys, values, bi, kv,
                                        clampedBase(offset, cIndex(0), length),
                                        length, paddedLength, split);
    b.setInsertionPointToStart(forall.getTerminator().getBody());
    for (unsigned i = 0; i < 2; ++i)
      tensor::ParallelInsertSliceOp::create(
          b, loc, part[i], forall.getRegionIterArgs()[i],
          ArrayRef<OpFoldResult>{bi, kv, split, zero},
          ArrayRef<OpFoldResult>{one, one, one, b.getIndexAttr(tq)},
          SmallVector<OpFoldResult>(4, one));
    tensor::ParallelInsertSliceOp::create(
        b, loc, part[2], forall.getRegionIterArgs()[2],
        ArrayRef<OpFoldResult>{bi, kv, split, zero, zero},
        ArrayRef<OpFoldResult>{one, one, one, b.getIndexAttr(tq),
                               b.getIndexAttr(dim)},
        SmallVector<OpFoldResult>(5, one));
  }
  Value m = forall.getResult(0), l = forall.getResult(1),
        acc = forall.getResult(2);
  // Loops (b, kv, g, s): the largest maximum, then the weighted sums.
  auto rowTy = RankedTensorType::get({batch, kvHeads, tq}, f32);
  AffineMap part4 = map(4, {0, 1, 3, 2}), row4 = map(4, {0, 1, 2});
  Value top =
      generic(rowTy, {m}, filled({batch, kvHeads, tq}, kNegInf), {part4, row4},
              {par, par, par, red},
              [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                return arith::MaximumFOp::create(nb, l, args[1], args[0]);
              });
  auto weight = [&](OpBuilder &nb, Location l, Value mi, Value mMax) {
    return math::ExpOp::create(nb, l, shifted(nb, l, mi, mMax));
  };
  Value sum = generic(
      rowTy, {m, l, top}, filled({batch, kvHeads, tq}, 0.0f),
      {part4, part4, row4, row4}, {par, par, par, red},
      [&](OpBuilder &nb, Location loc2, ValueRange args) -> Value {
        Value w = weight(nb, loc2, args[0], args[2]);
        return arith::AddFOp::create(
            nb, loc2, args[3], arith::MulFOp::create(nb, loc2, args[1], w));
      });
  // Loops (b, kv, g, d, s).
  auto accTy = RankedTensorType::get({batch, kvHeads, tq, dim}, f32);
  Value weighted =
      generic(accTy, {acc, m, top}, filled({batch, kvHeads, tq, dim}, 0.0f),
              {map(5, {0, 1, 4, 2, 3}), map(5, {0, 1, 4, 2}), map(5, {0, 1, 2}),
               map(5, {0, 1, 2, 3})},
              {par, par, par, par, red},
              [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                Value w = weight(nb, l, args[1], args[2]);
                return arith::AddFOp::create(
                    nb, l, args[3], arith::MulFOp::create(nb, l, args[0], w));
              });
  Value out = generic(
      RankedTensorType::get({batch, kvHeads, tq, dim}, elemTy), {weighted, sum},
      empty({batch, kvHeads, tq, dim}, elemTy),
      {map(4, {0, 1, 2, 3}), map(4, {0, 1, 2}), map(4, {0, 1, 2, 3})},
      {par, par, par, par}, [&](OpBuilder &nb, Location l, ValueRange args) {
        return normalized(nb, l, args[0], args[1]);
      });
  // [B, Hkv, G, D] is [B, Hq, 1, D]: head kv * G + g.
  Value heads = tensor::CollapseShapeOp::create(
      b, loc, RankedTensorType::get({batch, queryHeads, dim}, elemTy), out,
      SmallVector<ReassociationIndices>{{0}, {1, 2}, {3}});
  return tensor::ExpandShapeOp::create(
      b, loc, resultType, heads,
      SmallVector<ReassociationIndices>{{0}, {1}, {2, 3}});
}

SmallVector<Value> AttentionBuilder::queryTile(Value qTile, Value keys,
                                               Value values, Value bi, Value kv,
                                               Value rowBase, Value length,
                                               Value paddedLength,
                                               Value split) {
  // The last key a row of the tile sees, and the key tiles up to it.
  // Head rows all sit at rowBase; query rows at rowBase + i.
  int64_t lastRow = headRows ? 0 : tq - 1;
  Value lastKey = arith::MinSIOp::create(
      b, loc, arith::AddIOp::create(b, loc, rowBase, cIndex(lastRow)),
      arith::SubIOp::create(b, loc, length, cIndex(1)));
  Value count = arith::MaxSIOp::create(
      b, loc,
      arith::AddIOp::create(
          b, loc, arith::FloorDivSIOp::create(b, loc, lastKey, cIndex(tk)),
          cIndex(1)),
      cIndex(0));
  // Row i sees the keys up to min(rowBase + i, L - 1); i32 like the columns.
  Value base32 = arith::IndexCastOp::create(b, loc, i32, rowBase);
  Value last32 = arith::IndexCastOp::create(
      b, loc, i32, arith::SubIOp::create(b, loc, length, cIndex(1)));
  Value rowLimits = generic(
      RankedTensorType::get({tq}, i32), {}, empty({tq}, i32), {map(1, {0})},
      {par}, [&](OpBuilder &nb, Location l, ValueRange) -> Value {
        if (headRows)
          return arith::MinSIOp::create(nb, l, base32, last32);
        Value i = arith::IndexCastOp::create(nb, l, nb.getI32Type(),
                                             linalg::IndexOp::create(nb, l, 0));
        return arith::MinSIOp::create(
            nb, l, arith::AddIOp::create(nb, l, base32, i), last32);
      });
  SmallVector<int32_t> offsets(tk);
  for (int64_t j = 0; j < tk; ++j)
    offsets[j] = static_cast<int32_t>(j);
  auto offsetsTy = RankedTensorType::get({tk}, i32);
  Value columns = arith::ConstantOp::create(
      b, loc, offsetsTy, DenseIntElementsAttr::get(offsetsTy, offsets));

  Value m0 = filled({tq}, kNegInf), l0 = filled({tq}, 0.0f),
        acc0 = filled({tq, dim}, 0.0f);
  // A split takes the key tiles [s * per, (s + 1) * per) of the count.
  Value begin = cIndex(0), end = count;
  if (split) {
    Value per = arith::CeilDivSIOp::create(b, loc, count, cIndex(kSplits));
    begin = arith::MinSIOp::create(
        b, loc, arith::MulIOp::create(b, loc, split, per), count);
    end = arith::MinSIOp::create(
        b, loc, arith::AddIOp::create(b, loc, begin, per), count);
  }
  auto loop = scf::ForOp::create(b, loc, begin, end, cIndex(1),
                                 ValueRange{m0, l0, acc0});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value kt = loop.getInductionVar();
    Value m = loop.getRegionIterArgs()[0], l = loop.getRegionIterArgs()[1],
          acc = loop.getRegionIterArgs()[2];
    Value first = arith::MulIOp::create(b, loc, kt, cIndex(tk));
    Value start = arith::MinSIOp::create(
        b, loc, first, arith::SubIOp::create(b, loc, paddedLength, cIndex(tk)));
    Value first32 = arith::IndexCastOp::create(b, loc, i32, first);
    Value start32 = arith::IndexCastOp::create(b, loc, i32, start);
    OpFoldResult zero = b.getIndexAttr(0);
    Value kTile = tile2D(keys, bi, kv, start, zero, tk, dim);
    Value vTile = tile2D(values, bi, kv, start, zero, tk, dim);
    auto contract = arith::FastMathFlags::contract;
    Type tileTy = RankedTensorType::get({tk, tq}, f32);
    Type rowTy = RankedTensorType::get({tq}, f32);
    Type accTy = RankedTensorType::get({tq, dim}, f32);
    Value logits =
        headRows
            ? dotLogits(kTile, qTile)
            : generic(
                  // logits[j, i] = <k_j, q_i>; loops (j, i, d): the
                  // query rows i are the vector, one key element
                  // broadcast per step.
                  tileTy, {kTile, qTile}, filled({tk, tq}, 0.0f),
                  {map(3, {0, 2}), map(3, {2, 1}), map(3, {0, 1})},
                  {par, par, red},
                  [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                    Value prod =
                        arith::MulFOp::create(nb, l, toF32(nb, l, args[0]),
                                              toF32(nb, l, args[1]), contract);
                    return arith::AddFOp::create(nb, l, args[2], prod,
                                                 contract);
                  });
    // Column start + j is visible to row i when it is new to this tile
    // (>= first) and causally visible (<= the row's limit).
    auto scaledOrMasked = [&](OpBuilder &nb, Location l, Value x, Value col,
                              Value limit, Value masked) -> Value {
      Value c = arith::AddIOp::create(nb, l, start32, col);
      Value visible = arith::AndIOp::create(
          nb, l,
          arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge, c, first32),
          arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle, c, limit));
      Value scaled = arith::MulFOp::create(nb, l, x, cF32(nb, scale));
      return arith::SelectOp::create(nb, l, visible, scaled, masked);
    };
    // Loops (j, i): the reductions over the keys j run across vectors of
    // rows i.
    AffineMap tileMap = map(2, {0, 1}), colMap = map(2, {0}),
              rowMap = map(2, {1});
    Value tileMax =
        generic(rowTy, {logits, columns, rowLimits}, filled({tq}, kNegInf),
                {tileMap, colMap, rowMap, rowMap}, {red, par},
                [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                  Value x = scaledOrMasked(nb, l, args[0], args[1], args[2],
                                           cF32(nb, kNegInf));
                  return arith::MaximumFOp::create(nb, l, args[3], x);
                });
    // New maximum, and the factor exp(m - m') that rescales l and acc,
    // written over the loop's own m and l (destination passing: the loop
    // carries the same buffers from one key tile to the next).
    auto rescale = linalg::GenericOp::create(
        b, loc, TypeRange{rowTy, rowTy, rowTy}, ValueRange{tileMax},
        ValueRange{m, empty({tq}, f32), l},
        SmallVector<AffineMap>(4, map(1, {0})), {par},
        [&](OpBuilder &nb, Location l, ValueRange args) {
          Value next = arith::MaximumFOp::create(nb, l, args[1], args[0]);
          Value alpha =
              math::ExpOp::create(nb, l, shifted(nb, l, args[1], next));
          Value sum = arith::MulFOp::create(nb, l, args[3], alpha);
          linalg::YieldOp::create(nb, l, ValueRange{next, alpha, sum});
        });
    Value mNext = rescale.getResult(0), alpha = rescale.getResult(1),
          lScaled = rescale.getResult(2);
    Value probs = generic(
        tileTy, {logits, columns, rowLimits, mNext}, empty({tk, tq}, f32),
        {tileMap, colMap, rowMap, rowMap, tileMap}, {par, par},
        [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
          Value x = scaledOrMasked(nb, l, args[0], args[1], args[2],
                                   cF32(nb, kNegInf));
          Value e = math::ExpOp::create(nb, l, shifted(nb, l, x, args[3]));
          Value hidden = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ,
                                               x, cF32(nb, kNegInf));
          return arith::SelectOp::create(nb, l, hidden, cF32(nb, 0.0f), e);
        });
    Value lNext =
        generic(rowTy, {probs}, lScaled, {tileMap, rowMap}, {red, par},
                [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                  return arith::AddFOp::create(nb, l, args[1], args[0]);
                });
    Value accScaled =
        generic(accTy, {alpha}, acc, {map(2, {0}), map(2, {0, 1})}, {par, par},
                [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                  return arith::MulFOp::create(nb, l, args[1], args[0]);
                });
    // Loops (i, d, j): the head dim d is the vector, p[j, i] broadcast.
    Value accNext = generic(
        accTy, {probs, vTile}, accScaled,
        {map(3, {2, 0}), map(3, {2, 1}), map(3, {0, 1})}, {par, par, red},
        [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
          Value prod = arith::MulFOp::create(nb, l, args[0],
                                             toF32(nb, l, args[1]), contract);
          return arith::AddFOp::create(nb, l, args[2], prod, contract);
        });
    scf::YieldOp::create(b, loc, ValueRange{mNext, lNext, accNext});
  }
  if (split)
    return {loop.getResult(0), loop.getResult(1), loop.getResult(2)};
  Value sum = loop.getResult(1), acc = loop.getResult(2);
  return {generic(RankedTensorType::get({tq, dim}, elemTy), {acc, sum},
                  empty({tq, dim}, elemTy),
                  {map(2, {0, 1}), map(2, {0}), map(2, {0, 1})}, {par, par},
                  [&](OpBuilder &nb, Location l, ValueRange args) {
                    return normalized(nb, l, args[0], args[1]);
                  })};
}

} // namespace

Value mlir::snapkv::detail::lowerAttention(OpBuilder &b, Location loc,
                                           AttentionOp op, Value queries,
                                           Value keys, Value values,
                                           Value offset, int64_t queryTile,
                                           int64_t keyTile) {
  return AttentionBuilder(b, loc, op, queryTile, keyTile)
      .build(queries, keys, values, offset);
}
