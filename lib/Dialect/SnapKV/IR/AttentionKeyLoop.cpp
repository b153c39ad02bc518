//===- AttentionKeyLoop.cpp - snapkv.attention as one loop over key tiles -===//
//
// AggregatedOpInterface::decomposeOperation of snapkv.attention: the online
// softmax with the key tiles as the only loop, an scf.for over tiles of Tk
// keys whose body is linalg ops over all of (batch, kv head, group head,
// query row) at once, carrying the row maximum, the row sum and the
// accumulator of every row. Each step computes only the rows that see its
// tile (from the first row whose causal limit reaches the tile), so the
// causal upper triangle is skipped a tile at a time. No scf.forall and
// nothing sized by the query tile: tiling the op (TilingInterface, over
// batch, heads and query rows) is what distributes it, whether a pipeline
// tiles it or a compiler that tiles linalg itself (IREE) takes the
// decomposed op whole. A single query row (a decode step) takes every key
// in one step, with no loop.
//
// GQA without copies: the queries are viewed as [B, Hkv, G, Lq, D], so that
// every indexing map is a projection. Products and the softmax are in f32;
// the result, written into the op's init, has the queries' type.
//
//===----------------------------------------------------------------------===//

#include "AttentionBuilders.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/Utils/Utils.h"

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::attention;

namespace {

class KeyLoopBuilder : OpsBuilder {
public:
  KeyLoopBuilder(OpBuilder &b, Location loc, AttentionOp op, int64_t keyTile,
                 bool lengthsChecked)
      : OpsBuilder(b, loc), tk(keyTile), lengthsChecked(lengthsChecked) {
    RankedTensorType qTy = op.getQueries().getType();
    RankedTensorType kTy = op.getKeys().getType();
    elemTy = qTy.getElementType();
    batch = qTy.getDimSize(0);
    kvHeads = kTy.getDimSize(1);
    group = qTy.getDimSize(1) / kvHeads;
    dim = qTy.getDimSize(3);
    scale = static_cast<float>(op.getEffectiveScale());
    if (std::optional<APFloat> cap = op.getSoftcap())
      softcap = cap->convertToFloat();
    window = op.getSlidingWindow();
  }

  Value build(Value queries, Value keys, Value values, Value offset,
              Value init);

private:
  Value slice(Value source, ArrayRef<OpFoldResult> offsets,
              ArrayRef<OpFoldResult> sizes) {
    return tensor::ExtractSliceOp::create(
        b, loc, source, offsets, sizes,
        SmallVector<OpFoldResult>(offsets.size(), b.getIndexAttr(1)));
  }
  Value insert(Value source, Value dest, ArrayRef<OpFoldResult> offsets,
               ArrayRef<OpFoldResult> sizes) {
    return tensor::InsertSliceOp::create(
        b, loc, source, dest, offsets, sizes,
        SmallVector<OpFoldResult>(offsets.size(), b.getIndexAttr(1)));
  }
  /// [B, Hkv, G, rows] and [B, Hkv, G, rows, D] sizes.
  SmallVector<OpFoldResult> rowSizes(OpFoldResult rows, bool withDim) {
    SmallVector<OpFoldResult> sizes = {b.getIndexAttr(batch),
                                       b.getIndexAttr(kvHeads),
                                       b.getIndexAttr(group), rows};
    if (withDim)
      sizes.push_back(b.getIndexAttr(dim));
    return sizes;
  }

  /// One step over the keys [k0, k0 + cols) (`kTile`, `vTile`:
  /// [B, Hkv, cols, D]) for the rows [row0, Lq): the running maximum, sum and
  /// accumulator of every row, updated.
  SmallVector<Value> step(Value q, Value kTile, Value vTile, Value k0,
                          OpFoldResult cols, Value row0, Value lq, Value lk,
                          Value offset, Value m, Value l, Value acc);

  int64_t tk, batch = 0, kvHeads = 0, group = 0, dim = 0;
  /// The caller checked that dynamic key and value lengths agree.
  bool lengthsChecked;
  float scale = 1;
  std::optional<float> softcap;
  std::optional<int64_t> window;
  Type elemTy;
};

SmallVector<Value> KeyLoopBuilder::step(Value q, Value kTile, Value vTile,
                                        Value k0, OpFoldResult cols, Value row0,
                                        Value lq, Value lk, Value offset,
                                        Value m, Value l, Value acc) {
  auto par = utils::IteratorType::parallel;
  auto red = utils::IteratorType::reduction;
  OpFoldResult zero = b.getIndexAttr(0);
  Value rows = arith::SubIOp::create(b, loc, lq, row0);
  SmallVector<OpFoldResult> at4 = {zero, zero, zero, row0};
  SmallVector<OpFoldResult> at5 = {zero, zero, zero, row0, zero};
  Value qs = slice(q, at5, rowSizes(rows, true));
  Value ms = slice(m, at4, rowSizes(rows, false));
  Value ls = slice(l, at4, rowSizes(rows, false));
  Value as = slice(acc, at5, rowSizes(rows, true));

  // Logits [B, Hkv, G, rows, cols], scaled, -inf where the row does not see
  // the key (causally later, or past the keys).
  SmallVector<OpFoldResult> logitSizes = rowSizes(rows, false);
  logitSizes.push_back(cols);
  Value logits = generic(
      {qs, kTile}, filled(logitSizes, 0.0f),
      {map(6, {0, 1, 2, 3, 5}), map(6, {0, 1, 4, 5}), map(6, {0, 1, 2, 3, 4})},
      {par, par, par, par, par, red},
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value p =
            arith::MulFOp::create(nb, l, wide(nb, l, a[0]), wide(nb, l, a[1]));
        return arith::AddFOp::create(nb, l, a[2], p);
      });
  Value rowBase = arith::AddIOp::create(b, loc, row0, offset);
  SmallVector<AffineMap> same5(2, map(5, {0, 1, 2, 3, 4}));
  Value masked = generic(
      {logits}, empty(logitSizes, f32), same5, {par, par, par, par, par},
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value i = linalg::IndexOp::create(nb, l, 3);
        Value j = linalg::IndexOp::create(nb, l, 4);
        Value col = arith::AddIOp::create(nb, l, k0, j);
        Value limit = arith::AddIOp::create(nb, l, rowBase, i);
        Value seen = arith::AndIOp::create(
            nb, l,
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle, col, limit),
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt, col, lk));
        // A sliding window of W keys: only the keys after limit - W.
        if (window)
          seen = arith::AndIOp::create(
              nb, l, seen,
              arith::CmpIOp::create(
                  nb, l, arith::CmpIPredicate::sgt, col,
                  arith::SubIOp::create(
                      nb, l, limit,
                      arith::ConstantIndexOp::create(nb, l, *window))));
        Value scaled =
            arith::MulFOp::create(nb, l, a[0], constF32(nb, l, scale));
        // Soft-capped logits: c * tanh(x / c).
        if (softcap)
          scaled = arith::MulFOp::create(
              nb, l, constF32(nb, l, *softcap),
              math::TanhOp::create(
                  nb, l,
                  arith::DivFOp::create(nb, l, scaled,
                                        constF32(nb, l, *softcap))));
        return arith::SelectOp::create(nb, l, seen, scaled,
                                       constF32(nb, l, kNegInf));
      });

  // The new maximum, and the base the exponentials subtract: 0 while a row
  // has seen no key (its maximum -inf), so that they give 0, not NaN.
  SmallVector<OpFoldResult> statSizes = rowSizes(rows, false);
  SmallVector<AffineMap> same4(3, map(4, {0, 1, 2, 3}));
  Value tileMax =
      generic({masked}, filled(statSizes, kNegInf),
              {map(5, {0, 1, 2, 3, 4}), map(5, {0, 1, 2, 3})},
              {par, par, par, par, red},
              [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                return arith::MaximumFOp::create(nb, l, a[0], a[1]);
              });
  Value newMax =
      generic({ms, tileMax}, empty(statSizes, f32), same4, {par, par, par, par},
              [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                return arith::MaximumFOp::create(nb, l, a[0], a[1]);
              });
  auto base = [&](OpBuilder &nb, Location l, Value max) -> Value {
    Value none = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, max,
                                       constF32(nb, l, kNegInf));
    return arith::SelectOp::create(nb, l, none, constF32(nb, l, 0.0f), max);
  };
  Value probs = generic(
      {masked, newMax}, empty(logitSizes, f32),
      {map(5, {0, 1, 2, 3, 4}), map(5, {0, 1, 2, 3}), map(5, {0, 1, 2, 3, 4})},
      {par, par, par, par, par},
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return math::ExpOp::create(
            nb, l, arith::SubFOp::create(nb, l, a[0], base(nb, l, a[1])));
      });
  Value alpha = generic(
      {ms, newMax}, empty(statSizes, f32), same4, {par, par, par, par},
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return math::ExpOp::create(
            nb, l, arith::SubFOp::create(nb, l, a[0], base(nb, l, a[1])));
      });

  // l' = l * alpha + sum_j p; acc' = acc * alpha + P x V.
  Value tileSum =
      generic({probs}, filled(statSizes, 0.0f),
              {map(5, {0, 1, 2, 3, 4}), map(5, {0, 1, 2, 3})},
              {par, par, par, par, red},
              [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                return arith::AddFOp::create(nb, l, a[0], a[1]);
              });
  Value newSum = generic(
      {ls, alpha, tileSum}, empty(statSizes, f32),
      SmallVector<AffineMap>(4, map(4, {0, 1, 2, 3})), {par, par, par, par},
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return arith::AddFOp::create(
            nb, l, arith::MulFOp::create(nb, l, a[0], a[1]), a[2]);
      });
  SmallVector<OpFoldResult> accSizes = rowSizes(rows, true);
  Value pv = generic(
      {probs, vTile}, filled(accSizes, 0.0f),
      {map(6, {0, 1, 2, 3, 5}), map(6, {0, 1, 5, 4}), map(6, {0, 1, 2, 3, 4})},
      {par, par, par, par, par, red},
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value p = arith::MulFOp::create(nb, l, a[0], wide(nb, l, a[1]));
        return arith::AddFOp::create(nb, l, a[2], p);
      });
  Value newAcc =
      generic({as, alpha, pv}, empty(accSizes, f32),
              {map(5, {0, 1, 2, 3, 4}), map(5, {0, 1, 2, 3}),
               map(5, {0, 1, 2, 3, 4}), map(5, {0, 1, 2, 3, 4})},
              {par, par, par, par, par},
              [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                return arith::AddFOp::create(
                    nb, l, arith::MulFOp::create(nb, l, a[0], a[1]), a[2]);
              });
  return {insert(newMax, m, at4, statSizes), insert(newSum, l, at4, statSizes),
          insert(newAcc, acc, at5, accSizes)};
}

Value KeyLoopBuilder::build(Value queries, Value keys, Value values,
                            Value offset, Value init) {
  auto queriesTy = cast<RankedTensorType>(queries.getType());
  AttentionLengths lengths =
      attentionLengths(b, loc, queries, keys, values, offset, lengthsChecked);
  Value lq = lengths.lq, lk = lengths.lk;
  offset = lengths.offset;
  OpFoldResult lqSize = tensor::getMixedSize(b, loc, queries, 2);
  // [B, Hq, Lq, D] -> [B, Hkv, G, Lq, D].
  SmallVector<int64_t> grouped = {batch, kvHeads, group,
                                  queriesTy.getDimSize(2), dim};
  Value q = tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get(grouped, elemTy), queries,
      SmallVector<ReassociationIndices>{{0}, {1, 2}, {3}, {4}},
      rowSizes(lqSize, true));
  Value m = filled(rowSizes(lqSize, false), kNegInf);
  Value l = filled(rowSizes(lqSize, false), 0.0f);
  Value acc = filled(rowSizes(lqSize, true), 0.0f);

  SmallVector<Value> stats;
  if (queriesTy.getDimSize(2) == 1) {
    // A decode step: every key in one step.
    stats =
        step(q, keys, values, cIndex(0), tensor::getMixedSize(b, loc, keys, 2),
             cIndex(0), lq, lk, offset, m, l, acc);
  } else {
    // Keys and values zero-padded to whole tiles (masked as past the keys).
    Value tiles = arith::CeilDivSIOp::create(b, loc, lk, cIndex(tk));
    Value padded = arith::MulIOp::create(b, loc, tiles, cIndex(tk));
    auto paddedTy = [&](Value v) {
      auto ty = cast<RankedTensorType>(v.getType());
      return RankedTensorType::get({batch, kvHeads, ShapedType::kDynamic, dim},
                                   ty.getElementType());
    };
    auto pad = [&](Value v) -> Value {
      Value zero = arith::ConstantOp::create(
          b, loc,
          b.getZeroAttr(cast<RankedTensorType>(v.getType()).getElementType()));
      return tensor::createPadHighOp(paddedTy(v), v, zero, /*nofold=*/false,
                                     loc, b, ValueRange{padded});
    };
    Value kp = pad(keys), vp = pad(values);
    auto loop = scf::ForOp::create(
        b, loc, cIndex(0), tiles, cIndex(1), ValueRange{m, l, acc},
        [&](OpBuilder &nb, Location, Value t, ValueRange carried) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          Value k0 = arith::MulIOp::create(b, loc, t, cIndex(tk));
          // The first row that sees key k0: k0 - offset, within [0, Lq].
          Value row0 = arith::MinSIOp::create(
              b, loc,
              arith::MaxSIOp::create(
                  b, loc, arith::SubIOp::create(b, loc, k0, offset), cIndex(0)),
              lq);
          OpFoldResult zero = b.getIndexAttr(0);
          SmallVector<OpFoldResult> at = {zero, zero, k0, zero};
          SmallVector<OpFoldResult> sizes = {
              b.getIndexAttr(batch), b.getIndexAttr(kvHeads),
              b.getIndexAttr(tk), b.getIndexAttr(dim)};
          SmallVector<Value> next =
              step(q, slice(kp, at, sizes), slice(vp, at, sizes), k0,
                   b.getIndexAttr(tk), row0, lq, lk, offset, carried[0],
                   carried[1], carried[2]);
          scf::YieldOp::create(b, loc, next);
        });
    stats.assign(loop.getResults().begin(), loop.getResults().end());
  }

  // out = acc / l, 0 for a row that saw no key, written into the init viewed
  // as [B, Hkv, G, Lq, D]; back to [B, Hq, Lq, D].
  Value initGrouped = tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get(grouped, elemTy), init,
      SmallVector<ReassociationIndices>{{0}, {1, 2}, {3}, {4}},
      rowSizes(lqSize, true));
  Value out = generic(
      {stats[2], stats[1]}, initGrouped,
      {map(5, {0, 1, 2, 3, 4}), map(5, {0, 1, 2, 3}), map(5, {0, 1, 2, 3, 4})},
      {utils::IteratorType::parallel, utils::IteratorType::parallel,
       utils::IteratorType::parallel, utils::IteratorType::parallel,
       utils::IteratorType::parallel},
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value positive = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OGT,
                                               a[1], constF32(nb, l, 0.0f));
        Value safe = arith::SelectOp::create(nb, l, positive, a[1],
                                             constF32(nb, l, 1.0f));
        Value div = arith::DivFOp::create(nb, l, a[0], safe);
        Value value = arith::SelectOp::create(nb, l, positive, div,
                                              constF32(nb, l, 0.0f));
        return elemTy == f32
                   ? value
                   : arith::TruncFOp::create(nb, l, elemTy, value).getResult();
      });
  return tensor::CollapseShapeOp::create(
      b, loc, queriesTy, out,
      SmallVector<ReassociationIndices>{{0}, {1, 2}, {3}, {4}});
}

} // namespace

Value attention::decomposeKeyLoop(OpBuilder &b, Location loc, AttentionOp op,
                                  int64_t keyTile, bool lengthsChecked) {
  return KeyLoopBuilder(b, loc, op, keyTile, lengthsChecked)
      .build(op.getQueries(), op.getKeys(), op.getValues(), op.getOffset(),
             op.getInit());
}
