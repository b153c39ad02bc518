//===- AttentionDecomposition.cpp - snapkv.attention's online softmax -----===//
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

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Utils/Utils.h"
#include "mlir/Interfaces/ValueBoundsOpInterface.h"

#include <limits>

using namespace mlir;
using namespace mlir::snapkv;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
/// Keys per step when the op has no snapkv.lowering_config (the
/// conversion's default key tile).
constexpr int64_t kDefaultKeyTile = 64;
/// The most rows (heads x query rows) a tile's static steps take: beyond,
/// a [Tk, R] logits tile no longer stays in cache.
constexpr int64_t kMaxTileRows = 256;

Value constF32(OpBuilder &b, Location loc, float v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

/// What both decompositions build with: linalg ops on tensors, in f32.
class OpsBuilder {
protected:
  OpsBuilder(OpBuilder &b, Location loc)
      : b(b), loc(loc), f32(b.getF32Type()) {}
  using Body = function_ref<Value(OpBuilder &, Location, ValueRange)>;

  Value cIndex(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  AffineMap map(unsigned numDims, ArrayRef<unsigned> dims) {
    SmallVector<AffineExpr> exprs;
    for (unsigned d : dims)
      exprs.push_back(b.getAffineDimExpr(d));
    return AffineMap::get(numDims, 0, exprs, b.getContext());
  }
  /// An f32 operand of a body: extended from a narrower element type.
  Value wide(OpBuilder &nb, Location l, Value v) {
    return v.getType() == f32 ? v : arith::ExtFOp::create(nb, l, f32, v);
  }
  Value empty(ArrayRef<OpFoldResult> sizes, Type elem) {
    return tensor::EmptyOp::create(b, loc, sizes, elem);
  }
  Value empty(ArrayRef<int64_t> shape, Type elem) {
    return tensor::EmptyOp::create(b, loc, shape, elem);
  }
  Value filled(ArrayRef<OpFoldResult> sizes, float value) {
    return fill(empty(sizes, f32), value);
  }
  Value filled(ArrayRef<int64_t> shape, float value) {
    return fill(empty(shape, f32), value);
  }
  Value fill(Value tensor, float value) {
    return linalg::FillOp::create(b, loc, constF32(b, loc, value), tensor)
        .getResult(0);
  }
  Value generic(Type resultType, ValueRange ins, Value out,
                ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iters,
                Body body) {
    return linalg::GenericOp::create(
               b, loc, resultType, ins, out, maps, iters,
               [&](OpBuilder &nb, Location l, ValueRange args) {
                 linalg::YieldOp::create(nb, l, body(nb, l, args));
               })
        .getResult(0);
  }
  Value generic(ValueRange ins, Value out, ArrayRef<AffineMap> maps,
                ArrayRef<utils::IteratorType> iters, Body body) {
    return generic(out.getType(), ins, out, maps, iters, body);
  }

  OpBuilder &b;
  Location loc;
  Type f32;
};

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

/// Width of a single-row tile's partial dot products (AVX-512's f32 lanes).
constexpr int64_t kLanes = 16;

/// The exponent of a logit `x` in a softmax whose maximum is `max`: x - max,
/// except that x == max gives exactly 0, so that an infinite maximum still
/// yields probabilities instead of inf - inf = NaN.
Value shifted(OpBuilder &nb, Location l, Value x, Value max) {
  Value isMax = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, x, max);
  return arith::SelectOp::create(nb, l, isMax, constF32(nb, l, 0.0f),
                                 arith::SubFOp::create(nb, l, x, max));
}

/// The decomposition of a tile as TilingInterface makes it: one batch, one kv
/// head and a static bound `tq` on the query rows per head, so that every
/// step is static-shaped. Its R = heads x tq rows (row r: head r / tq,
/// position r % tq; the queries zero-padded up to tq rows) are transposed
/// once to [D, R], and each key step's logits are a static [Tk, R] tile,
/// query rows innermost, so that the row maximum and sum reduce across
/// vectors of rows. A single row per head (a decode step's tile of the
/// group's heads) takes its logits as dot products along D instead. The
/// keys are read in place: the last step starts at Lk - Tk, overlapping
/// its predecessor, whose columns it masks; keys shorter than one tile are
/// zero-padded. Positions are i32 (attentionLengths checks they fit).
class TileBuilder : OpsBuilder {
public:
  TileBuilder(OpBuilder &b, Location loc, AttentionOp op, int64_t keyTile,
              int64_t rowBound, int64_t keySplits, bool lengthsChecked)
      : OpsBuilder(b, loc), tk(keyTile), tq(rowBound), splits(keySplits),
        lengthsChecked(lengthsChecked) {
    RankedTensorType qTy = op.getQueries().getType();
    elemTy = qTy.getElementType();
    heads = qTy.getDimSize(1);
    dim = qTy.getDimSize(3);
    rows = heads * tq;
    dot = tq == 1 && dim % kLanes == 0;
    scale = static_cast<float>(op.getEffectiveScale());
    if (std::optional<APFloat> cap = op.getSoftcap())
      softcap = cap->convertToFloat();
    if (std::optional<int64_t> w = op.getSlidingWindow())
      window = std::min<int64_t>(*w, int64_t{1} << 29);
    i32 = b.getI32Type();
    if (auto config =
            op->getAttrOfType<LoweringConfigAttr>("snapkv.lowering_config"))
      pairedValues = elemTy.isBF16() && tk % 2 == 0 &&
                     (config.getMicrokernel() == Microkernel::avx512bf16 ||
                      config.getMicrokernel() == Microkernel::amx);
  }

  Value build(Value queries, Value keys, Value values, Value offset,
              Value init);

private:
  /// `source` ([.., n, D]) with dim `d` zero-padded at the end to `size`.
  Value padded(Value source, unsigned d, int64_t size) {
    auto ty = cast<RankedTensorType>(source.getType());
    SmallVector<int64_t> shape(ty.getShape());
    shape[d] = size;
    SmallVector<OpFoldResult> low(ty.getRank(), b.getIndexAttr(0));
    SmallVector<OpFoldResult> high = low;
    high[d] = arith::SubIOp::create(b, loc, cIndex(size),
                                    tensor::DimOp::create(b, loc, source, d))
                  .getResult();
    Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(elemTy));
    return tensor::PadOp::create(b, loc, RankedTensorType::get(shape, elemTy),
                                 source, low, high, zero);
  }
  /// [1, 1, n, D] as [n, D]. With n dynamic, a rank-reducing slice: a
  /// collapse's buffer would have a dynamic row stride (D is static: it keeps
  /// the key steps' addressing constant). With n static, a collapse (a slice
  /// to [1, D] would not say which unit dims it drops).
  Value rowsOf(Value source) {
    auto ty = cast<RankedTensorType>(source.getType());
    auto rowsTy = RankedTensorType::get(ty.getShape().drop_front(2), elemTy);
    if (!ty.isDynamicDim(2))
      return tensor::CollapseShapeOp::create(
          b, loc, rowsTy, source,
          SmallVector<ReassociationIndices>{{0, 1, 2}, {3}});
    OpFoldResult zero = b.getIndexAttr(0), one = b.getIndexAttr(1);
    return tensor::ExtractSliceOp::create(
        b, loc, rowsTy, source, ArrayRef<OpFoldResult>{zero, zero, zero, zero},
        ArrayRef<OpFoldResult>{one, one,
                               tensor::getMixedSize(b, loc, source, 2),
                               b.getIndexAttr(dim)},
        SmallVector<OpFoldResult>(4, one));
  }
  /// The logits [Tk, R] from the keys [Tk, D] and the queries [R, D], as
  /// dot products along D in kLanes-wide partial sums (loops (j, r, lane,
  /// c), d = c * kLanes + lane: each key row read once for all rows r).
  Value dotLogits(Value kTile, Value qRows);
  /// The key steps [begin, end) over `keys`/`values` ([n, D], n >= Tk):
  /// every row's maximum, sum and accumulator, from `inits` (-inf, 0, 0).
  SmallVector<Value> keyLoop(Value keys, Value values, Value n, Value begin,
                             Value end, ValueRange inits);
  /// The key steps [begin, end) over `k`, `v` ([Lk, D]), zero-padded first
  /// when shorter than one tile.
  SmallVector<Value> steps(Value k, Value v, Value lk, Value begin, Value end);
  /// The maxima [S, R], sums [S, R] and accumulators [S, R, D] of `splits`
  /// parts of the keys as one maximum, sum and accumulator.
  SmallVector<Value> combine(Value m, Value l, Value acc);

  int64_t tk, tq, splits, heads = 0, dim = 0, rows = 0;
  bool lengthsChecked, dot = false;
  /// P x V reads V in pairs of rows ([Tk / 2, D, 2]), only for the bf16 dot
  /// products (the op's configured microkernel): the generic vectorisation
  /// would read each half of a pair with a stride of two.
  bool pairedValues = false;
  float scale = 1;
  std::optional<float> softcap;
  std::optional<int64_t> window;
  Type elemTy, i32;
  // Set by build() for keyLoop().
  Value qOperand, rowLimits, windowStarts, columns;
};

Value TileBuilder::dotLogits(Value kTile, Value qRows) {
  int64_t chunks = dim / kLanes;
  SmallVector<ReassociationIndices> split = {{0}, {1, 2}};
  Value k3 = tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get({tk, chunks, kLanes}, elemTy), kTile,
      split);
  Value q3 = tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get({rows, chunks, kLanes}, elemTy), qRows,
      split);
  auto par = utils::IteratorType::parallel;
  auto red = utils::IteratorType::reduction;
  auto contract = arith::FastMathFlags::contract;
  Value partial =
      generic(RankedTensorType::get({tk, rows, kLanes}, f32), {k3, q3},
              filled({tk, rows, kLanes}, 0.0f),
              {map(4, {0, 3, 2}), map(4, {1, 3, 2}), map(4, {0, 1, 2})},
              {par, par, par, red},
              [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                Value p = arith::MulFOp::create(nb, l, wide(nb, l, a[0]),
                                                wide(nb, l, a[1]), contract);
                return arith::AddFOp::create(nb, l, a[2], p, contract);
              });
  return generic(RankedTensorType::get({tk, rows}, f32), {partial},
                 filled({tk, rows}, 0.0f), {map(3, {0, 1, 2}), map(3, {0, 1})},
                 {par, par, red},
                 [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                   return arith::AddFOp::create(nb, l, a[1], a[0]);
                 });
}

SmallVector<Value> TileBuilder::keyLoop(Value keys, Value values, Value n,
                                        Value begin, Value end,
                                        ValueRange inits) {
  auto par = utils::IteratorType::parallel;
  auto red = utils::IteratorType::reduction;
  auto contract = arith::FastMathFlags::contract;
  Type tileTy = RankedTensorType::get({tk, rows}, f32);
  Type rowTy = RankedTensorType::get({rows}, f32);
  Type accTy = RankedTensorType::get({rows, dim}, f32);
  auto loop = scf::ForOp::create(b, loc, begin, end, cIndex(1), inits);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value m = loop.getRegionIterArgs()[0], l = loop.getRegionIterArgs()[1],
        acc = loop.getRegionIterArgs()[2];
  Value first =
      arith::MulIOp::create(b, loc, loop.getInductionVar(), cIndex(tk));
  Value start = arith::MinSIOp::create(
      b, loc, first, arith::SubIOp::create(b, loc, n, cIndex(tk)));
  Value first32 = arith::IndexCastOp::create(b, loc, i32, first);
  Value start32 = arith::IndexCastOp::create(b, loc, i32, start);
  auto tile = [&](Value source) -> Value {
    OpFoldResult one = b.getIndexAttr(1);
    return tensor::ExtractSliceOp::create(
        b, loc, RankedTensorType::get({tk, dim}, elemTy), source,
        ArrayRef<OpFoldResult>{start, b.getIndexAttr(0)},
        ArrayRef<OpFoldResult>{b.getIndexAttr(tk), b.getIndexAttr(dim)},
        ArrayRef<OpFoldResult>{one, one});
  };
  Value kTile = tile(keys), vTile = tile(values);
  Value logits =
      dot ? dotLogits(kTile, qOperand)
          : generic(
                // logits[j, r] = <k_j, q_r>; loops (j, r, d): the rows r
                // are the vector, one key element broadcast per step.
                tileTy, {kTile, qOperand}, filled({tk, rows}, 0.0f),
                {map(3, {0, 2}), map(3, {2, 1}), map(3, {0, 1})},
                {par, par, red},
                [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                  Value p = arith::MulFOp::create(nb, l, wide(nb, l, a[0]),
                                                  wide(nb, l, a[1]), contract);
                  return arith::AddFOp::create(nb, l, a[2], p, contract);
                });
  // Column start + j is visible to row r when it is new to this step
  // (>= first), causally visible (<= the row's limit) and, with a sliding
  // window, after the row's window start; the visible logits scaled (and
  // soft-capped), the others -inf.
  AffineMap tileMap = map(2, {0, 1}), colMap = map(2, {0}),
            rowMap = map(2, {1});
  SmallVector<Value> maskIns = {columns, rowLimits};
  SmallVector<AffineMap> maskMaps = {colMap, rowMap};
  if (window) {
    maskIns.push_back(windowStarts);
    maskMaps.push_back(rowMap);
  }
  auto visibleLogit = [&](OpBuilder &nb, Location l, Value x,
                          ValueRange mask) -> Value {
    Value c = arith::AddIOp::create(nb, l, start32, mask[0]);
    Value visible = arith::AndIOp::create(
        nb, l,
        arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge, c, first32),
        arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle, c, mask[1]));
    if (window)
      visible = arith::AndIOp::create(
          nb, l, visible,
          arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sgt, c, mask[2]));
    Value scaled = arith::MulFOp::create(nb, l, x, constF32(nb, l, scale));
    if (softcap)
      scaled = arith::MulFOp::create(
          nb, l, constF32(nb, l, *softcap),
          math::TanhOp::create(
              nb, l,
              arith::DivFOp::create(nb, l, scaled, constF32(nb, l, *softcap))));
    return arith::SelectOp::create(nb, l, visible, scaled,
                                   constF32(nb, l, kNegInf));
  };
  unsigned numMask = maskIns.size();
  SmallVector<Value> ins = {logits};
  ins.append(maskIns);
  SmallVector<AffineMap> maps = {tileMap};
  maps.append(maskMaps);
  // Loops (j, r): the reductions over the keys j run across vectors of
  // rows r.
  SmallVector<AffineMap> maxMaps = maps;
  maxMaps.push_back(rowMap);
  Value tileMax =
      generic(rowTy, ins, filled({rows}, kNegInf), maxMaps, {red, par},
              [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                Value x = visibleLogit(nb, l, a[0], a.slice(1, numMask));
                return arith::MaximumFOp::create(nb, l, a[numMask + 1], x);
              });
  // The new maximum, and the factor exp(m - m') that rescales l and acc,
  // written over the loop's own m and l.
  auto rescale = linalg::GenericOp::create(
      b, loc, TypeRange{rowTy, rowTy, rowTy}, ValueRange{tileMax},
      ValueRange{m, empty({rows}, f32), l},
      SmallVector<AffineMap>(4, map(1, {0})), {par},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        Value next = arith::MaximumFOp::create(nb, l, a[1], a[0]);
        Value alpha = math::ExpOp::create(nb, l, shifted(nb, l, a[1], next));
        Value sum = arith::MulFOp::create(nb, l, a[3], alpha);
        linalg::YieldOp::create(nb, l, ValueRange{next, alpha, sum});
      });
  Value mNext = rescale.getResult(0), alpha = rescale.getResult(1),
        lScaled = rescale.getResult(2);
  SmallVector<Value> probIns = ins;
  probIns.push_back(mNext);
  SmallVector<AffineMap> probMaps = maps;
  probMaps.append({rowMap, tileMap});
  // bf16 operands: P also rounded to bf16 (as FlashAttention-2 does), so
  // that P x V is a bf16 contraction accumulated in f32 (snapkv-vectorize's
  // vdpbf16ps microkernel); its sum stays f32.
  bool narrowProbs = elemTy.isBF16();
  auto probBody = [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
    Value x = visibleLogit(nb, l, a[0], a.slice(1, numMask));
    Value e = math::ExpOp::create(nb, l, shifted(nb, l, x, a[numMask + 1]));
    Value hidden = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, x,
                                         constF32(nb, l, kNegInf));
    return arith::SelectOp::create(nb, l, hidden, constF32(nb, l, 0.0f), e);
  };
  Value probs, narrow;
  if (narrowProbs) {
    probMaps.push_back(tileMap);
    auto both = linalg::GenericOp::create(
        b, loc, TypeRange{tileTy, RankedTensorType::get({tk, rows}, elemTy)},
        probIns, ValueRange{empty({tk, rows}, f32), empty({tk, rows}, elemTy)},
        probMaps, {par, par}, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value p = probBody(nb, l, a);
          linalg::YieldOp::create(
              nb, l, ValueRange{p, arith::TruncFOp::create(nb, l, elemTy, p)});
        });
    probs = both.getResult(0);
    narrow = both.getResult(1);
  } else {
    probs = generic(tileTy, probIns, empty({tk, rows}, f32), probMaps,
                    {par, par}, probBody);
  }
  Value lNext = generic(rowTy, {probs}, lScaled, {tileMap, rowMap}, {red, par},
                        [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                          return arith::AddFOp::create(nb, l, a[1], a[0]);
                        });
  Value accScaled =
      generic(accTy, {alpha}, acc, {map(2, {0}), map(2, {0, 1})}, {par, par},
              [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                return arith::MulFOp::create(nb, l, a[1], a[0]);
              });
  auto pvBody = [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
    Value p = arith::MulFOp::create(nb, l, wide(nb, l, a[0]), wide(nb, l, a[1]),
                                    contract);
    return arith::AddFOp::create(nb, l, a[2], p, contract);
  };
  Value accNext;
  if (pairedValues) {
    // V's rows in pairs, [Tk / 2, D, 2], once per step: P x V's register
    // tiles read them as they are instead of interleaving two rows of V per
    // tile. Loops (r, d, jj, t), j = 2 jj + t: the same pairs, same order.
    SmallVector<ReassociationIndices> pairsOfRows = {{0, 1}, {2}};
    Value vByPairs = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get({tk / 2, 2, dim}, elemTy), vTile,
        pairsOfRows);
    Value vPairs =
        generic(RankedTensorType::get({tk / 2, dim, 2}, elemTy), {vByPairs},
                empty({tk / 2, dim, 2}, elemTy),
                {map(3, {0, 2, 1}), map(3, {0, 1, 2})}, {par, par, par},
                [](OpBuilder &, Location, ValueRange a) { return a[0]; });
    Value pPairs = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get({tk / 2, 2, rows}, elemTy), narrow,
        pairsOfRows);
    accNext = generic(accTy, {pPairs, vPairs}, accScaled,
                      {map(4, {2, 3, 0}), map(4, {2, 1, 3}), map(4, {0, 1})},
                      {par, par, red, red}, pvBody);
  } else {
    // Loops (r, d, j): the head dim d is the vector, p[j, r] broadcast.
    accNext = generic(accTy, {narrowProbs ? narrow : probs, vTile}, accScaled,
                      {map(3, {2, 0}), map(3, {2, 1}), map(3, {0, 1})},
                      {par, par, red}, pvBody);
  }
  scf::YieldOp::create(b, loc, ValueRange{mNext, lNext, accNext});
  return SmallVector<Value>(loop.getResults());
}

SmallVector<Value> TileBuilder::steps(Value k, Value v, Value lk, Value begin,
                                      Value end) {
  // Keys read in place when there is at least one whole tile of them, else
  // zero-padded to one. The loop's initial values come before the scf.if
  // that chooses: created in its branches, the [R, D] accumulator that both
  // yield bufferizes to a fully dynamic layout, and a read of it with an
  // unknown innermost stride becomes a loop over its elements through the
  // stack.
  SmallVector<Value> inits = {filled({rows}, kNegInf), filled({rows}, 0.0f),
                              filled({rows, dim}, 0.0f)};
  auto onPadded = [&]() {
    return keyLoop(padded(k, 0, tk), padded(v, 0, tk), cIndex(tk), begin, end,
                   inits);
  };
  if (std::optional<int64_t> staticLk = getConstantIntValue(lk))
    return *staticLk >= tk ? keyLoop(k, v, lk, begin, end, inits) : onPadded();
  Type rowTy = RankedTensorType::get({rows}, f32);
  auto whole = scf::IfOp::create(
      b, loc, TypeRange{rowTy, rowTy, RankedTensorType::get({rows, dim}, f32)},
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, lk, cIndex(tk)),
      /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(whole.thenBlock());
  scf::YieldOp::create(b, loc, keyLoop(k, v, lk, begin, end, inits));
  b.setInsertionPointToStart(whole.elseBlock());
  scf::YieldOp::create(b, loc, onPadded());
  return SmallVector<Value>(whole.getResults());
}

SmallVector<Value> TileBuilder::combine(Value m, Value l, Value acc) {
  auto par = utils::IteratorType::parallel;
  auto red = utils::IteratorType::reduction;
  auto rowTy = RankedTensorType::get({rows}, f32);
  // Loops (r, s): the largest maximum, then the weighted sums.
  AffineMap part = map(2, {1, 0}), row = map(2, {0});
  Value top =
      generic(rowTy, {m}, filled({rows}, kNegInf), {part, row}, {par, red},
              [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
                return arith::MaximumFOp::create(nb, l, a[1], a[0]);
              });
  auto weight = [&](OpBuilder &nb, Location l, Value mi, Value mMax) -> Value {
    return math::ExpOp::create(nb, l, shifted(nb, l, mi, mMax));
  };
  Value sum = generic(rowTy, {m, l, top}, filled({rows}, 0.0f),
                      {part, part, row, row}, {par, red},
                      [&](OpBuilder &nb, Location loc2, ValueRange a) -> Value {
                        return arith::AddFOp::create(
                            nb, loc2, a[3],
                            arith::MulFOp::create(
                                nb, loc2, a[1], weight(nb, loc2, a[0], a[2])));
                      });
  // Loops (r, d, s).
  Value weighted = generic(
      RankedTensorType::get({rows, dim}, f32), {acc, m, top},
      filled({rows, dim}, 0.0f),
      {map(3, {2, 0, 1}), map(3, {2, 0}), map(3, {0}), map(3, {0, 1})},
      {par, par, red}, [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        return arith::AddFOp::create(
            nb, l, a[3],
            arith::MulFOp::create(nb, l, a[0], weight(nb, l, a[1], a[2])));
      });
  return {top, sum, weighted};
}

Value TileBuilder::build(Value queries, Value keys, Value values, Value offset,
                         Value init) {
  auto par = utils::IteratorType::parallel;
  AttentionLengths lengths =
      attentionLengths(b, loc, queries, keys, values, offset, lengthsChecked);
  Value lq = lengths.lq, lk = lengths.lk;
  auto qTy = cast<RankedTensorType>(queries.getType());
  bool partial = qTy.isDynamicDim(2);
  // [1, G', Lq, D] -> [R, D], rows zero-padded up to tq per head.
  Value q = partial ? padded(queries, 2, tq) : queries;
  Value qRows = tensor::CollapseShapeOp::create(
      b, loc, RankedTensorType::get({rows, dim}, elemTy), q,
      SmallVector<ReassociationIndices>{{0, 1, 2}, {3}});
  qOperand =
      dot ? qRows
          : generic(RankedTensorType::get({dim, rows}, elemTy), {qRows},
                    empty({dim, rows}, elemTy),
                    {map(2, {1, 0}), map(2, {0, 1})}, {par, par},
                    [](OpBuilder &, Location, ValueRange a) { return a[0]; });

  // Row 0's position, clamped to [-tq, Lk (+ the window)]: no key or every
  // key (none, past the window) for the whole tile either way, in i32.
  Value high = lk;
  if (window)
    high = arith::AddIOp::create(b, loc, lk, cIndex(*window));
  Value base = arith::MaxSIOp::create(
      b, loc, arith::MinSIOp::create(b, loc, lengths.offset, high),
      cIndex(-tq));
  // The key steps up to the last key a row sees.
  Value lastKey = arith::MinSIOp::create(
      b, loc,
      arith::AddIOp::create(b, loc, base,
                            arith::SubIOp::create(b, loc, lq, cIndex(1))),
      arith::SubIOp::create(b, loc, lk, cIndex(1)));
  Value count = arith::MaxSIOp::create(
      b, loc,
      arith::AddIOp::create(
          b, loc, arith::FloorDivSIOp::create(b, loc, lastKey, cIndex(tk)),
          cIndex(1)),
      cIndex(0));
  // Row r's limit min(base + r % tq, Lk - 1) and window start (its position
  // minus the window).
  Value base32 = arith::IndexCastOp::create(b, loc, i32, base);
  Value last32 = arith::IndexCastOp::create(
      b, loc, i32, arith::SubIOp::create(b, loc, lk, cIndex(1)));
  auto position = [&](OpBuilder &nb, Location l) -> Value {
    if (tq == 1)
      return base32;
    Value r = linalg::IndexOp::create(nb, l, 0);
    if (heads > 1)
      r = arith::RemUIOp::create(nb, l, r,
                                 arith::ConstantIndexOp::create(nb, l, tq));
    return arith::AddIOp::create(
        nb, l, base32, arith::IndexCastOp::create(nb, l, nb.getI32Type(), r));
  };
  auto rowVector = RankedTensorType::get({rows}, i32);
  rowLimits =
      generic(rowVector, {}, empty({rows}, i32), {map(1, {0})}, {par},
              [&](OpBuilder &nb, Location l, ValueRange) -> Value {
                return arith::MinSIOp::create(nb, l, position(nb, l), last32);
              });
  if (window)
    windowStarts =
        generic(rowVector, {}, empty({rows}, i32), {map(1, {0})}, {par},
                [&](OpBuilder &nb, Location l, ValueRange) -> Value {
                  return arith::SubIOp::create(
                      nb, l, position(nb, l),
                      arith::ConstantIntOp::create(nb, l, *window, 32));
                });
  SmallVector<int32_t> offsets(tk);
  for (int64_t j = 0; j < tk; ++j)
    offsets[j] = static_cast<int32_t>(j);
  auto offsetsTy = RankedTensorType::get({tk}, i32);
  columns = arith::ConstantOp::create(
      b, loc, offsetsTy, DenseIntElementsAttr::get(offsetsTy, offsets));

  Value k = rowsOf(keys), v = rowsOf(values);
  SmallVector<Value> stats;
  if (splits == 1) {
    stats = steps(k, v, lk, cIndex(0), count);
  } else {
    // FlashDecoding: the key steps in `splits` parts run in parallel, then
    // combined, out = sum_s acc_s w_s / sum_s l_s w_s with w_s = exp(m_s -
    // max_s m_s). The number of parts is fixed, so results do not depend on
    // the number of threads.
    Value mParts = empty({splits, rows}, f32),
          lParts = empty({splits, rows}, f32);
    Value accParts = empty({splits, rows, dim}, f32);
    auto forall = scf::ForallOp::create(
        b, loc, ArrayRef<OpFoldResult>{b.getIndexAttr(splits)},
        ValueRange{mParts, lParts, accParts}, std::nullopt);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(forall.getBody());
      Value split = forall.getInductionVars()[0];
      Value per = arith::CeilDivSIOp::create(b, loc, count, cIndex(splits));
      Value begin = arith::MinSIOp::create(
          b, loc, arith::MulIOp::create(b, loc, split, per), count);
      Value end = arith::MinSIOp::create(
          b, loc, arith::AddIOp::create(b, loc, begin, per), count);
      SmallVector<Value> part = steps(k, v, lk, begin, end);
      b.setInsertionPointToStart(forall.getTerminator().getBody());
      OpFoldResult one = b.getIndexAttr(1), zero = b.getIndexAttr(0);
      for (unsigned i = 0; i < 3; ++i) {
        SmallVector<OpFoldResult> at = {split, zero},
                                  sizes = {one, b.getIndexAttr(rows)};
        if (i == 2) {
          at.push_back(zero);
          sizes.push_back(b.getIndexAttr(dim));
        }
        tensor::ParallelInsertSliceOp::create(
            b, loc, part[i], forall.getRegionIterArgs()[i], at, sizes,
            SmallVector<OpFoldResult>(at.size(), one));
      }
    }
    stats =
        combine(forall.getResult(0), forall.getResult(1), forall.getResult(2));
  }

  // out = acc / l, 0 for a row that saw no key, as [1, G', tq, D] and then
  // the tile's own rows, written into the init.
  Value acc = tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get({1, heads, tq, dim}, f32), stats[2],
      SmallVector<ReassociationIndices>{{0, 1, 2}, {3}});
  Value sum = tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get({1, heads, tq}, f32), stats[1],
      SmallVector<ReassociationIndices>{{0, 1, 2}});
  if (partial) {
    OpFoldResult zero = b.getIndexAttr(0), one = b.getIndexAttr(1);
    OpFoldResult h = b.getIndexAttr(heads);
    acc = tensor::ExtractSliceOp::create(
        b, loc, acc, ArrayRef<OpFoldResult>{zero, zero, zero, zero},
        ArrayRef<OpFoldResult>{one, h, lq, b.getIndexAttr(dim)},
        SmallVector<OpFoldResult>(4, one));
    sum = tensor::ExtractSliceOp::create(
        b, loc, sum, ArrayRef<OpFoldResult>{zero, zero, zero},
        ArrayRef<OpFoldResult>{one, h, lq}, SmallVector<OpFoldResult>(3, one));
  }
  return generic(
      init.getType(), {acc, sum}, init,
      {map(4, {0, 1, 2, 3}), map(4, {0, 1, 2}), map(4, {0, 1, 2, 3})},
      {par, par, par, par},
      [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
        Value positive = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OGT,
                                               a[1], constF32(nb, l, 0.0f));
        Value o = arith::SelectOp::create(
            nb, l, positive, arith::DivFOp::create(nb, l, a[0], a[1]),
            constF32(nb, l, 0.0f));
        return elemTy == f32
                   ? o
                   : arith::TruncFOp::create(nb, l, elemTy, o).getResult();
      });
}

} // namespace

AttentionLengths mlir::snapkv::attentionLengths(OpBuilder &b, Location loc,
                                                Value queries, Value keys,
                                                Value values, Value offset,
                                                bool checked) {
  Value lq = tensor::DimOp::create(b, loc, queries, 2);
  Value lk = tensor::DimOp::create(b, loc, keys, 2);
  if (!offset)
    offset = arith::SubIOp::create(b, loc, lk, lq);
  bool dynamic = cast<RankedTensorType>(keys.getType()).isDynamicDim(2) ||
                 cast<RankedTensorType>(values.getType()).isDynamicDim(2);
  if (dynamic && !checked) {
    Value lv = tensor::DimOp::create(b, loc, values, 2);
    cf::AssertOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lk, lv),
        "snapkv.attention: length of 'values' differs from 'keys'");
    // The tiled decomposition's positions are i32, with room for a tile and
    // a window.
    cf::AssertOp::create(
        b, loc,
        arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::slt, lk,
            arith::ConstantIndexOp::create(b, loc, int64_t{1} << 30)),
        "snapkv.attention: more keys than 32-bit positions allow");
  }
  return {lq, lk, offset, dynamic};
}

FailureOr<SmallVector<Value>> AttentionOp::decompose(OpBuilder &b,
                                                     int64_t keyTile,
                                                     bool lengthsChecked,
                                                     int64_t keySplits) {
  if (keyTile < 1 || keySplits < 1)
    return failure();
  // A tile (one batch and kv head, a bound on its rows): static steps.
  RankedTensorType qTy = getQueries().getType();
  FailureOr<int64_t> rowBound = ValueBoundsConstraintSet::computeConstantBound(
      presburger::BoundType::UB,
      ValueBoundsConstraintSet::Variable(Value(getQueries()), 2),
      /*stopCondition=*/nullptr,
      /*closedUB=*/true);
  if (qTy.getDimSize(0) == 1 && getKeys().getType().getDimSize(1) == 1 &&
      succeeded(rowBound) && *rowBound >= 1 &&
      *rowBound * qTy.getDimSize(1) <= kMaxTileRows)
    return SmallVector<Value>{TileBuilder(b, getLoc(), *this, keyTile,
                                          *rowBound, keySplits, lengthsChecked)
                                  .build(getQueries(), getKeys(), getValues(),
                                         getOffset(), getInit())};
  return SmallVector<Value>{
      KeyLoopBuilder(b, getLoc(), *this, keyTile, lengthsChecked)
          .build(getQueries(), getKeys(), getValues(), getOffset(), getInit())};
}

FailureOr<SmallVector<Value>> AttentionOp::decomposeOperation(OpBuilder &b) {
  auto config =
      (*this)->getAttrOfType<LoweringConfigAttr>("snapkv.lowering_config");
  return decompose(b, config ? config.getKeyTile() : kDefaultKeyTile);
}
