//===- AttentionDecomposition.cpp - snapkv.attention's online softmax -----===//
//
// snapkv.attention's decompositions (AttentionOp::decompose): a tile as
// TilingInterface makes it (one batch and kv head, a static bound on its
// rows) gets static-shaped key steps (TileBuilder, below); any other op the
// one loop over key tiles of AttentionKeyLoop.cpp, which is also
// AggregatedOpInterface::decomposeOperation's form for an untiled op.
//
//===----------------------------------------------------------------------===//

#include "AttentionBuilders.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Utils/Utils.h"
#include "mlir/Interfaces/ValueBoundsOpInterface.h"

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::attention;

namespace {

/// Keys per step when the op has no snapkv.lowering_config (the
/// conversion's default key tile).
constexpr int64_t kDefaultKeyTile = 64;
/// The most rows (heads x query rows) a tile's static steps take: beyond,
/// a [Tk, R] logits tile no longer stays in cache.
constexpr int64_t kMaxTileRows = 256;

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
      pairs = elemTy.isBF16() && tk % 2 == 0 && dim % 2 == 0 &&
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
  /// Q K^T reads the queries in pairs along D ([D / 2, R, 2]) and P x V
  /// reads V in pairs of rows ([Tk / 2, D, 2]): only for the bf16 dot
  /// products (the op's configured microkernel), the generic vectorisation
  /// would read each half of a pair with a stride of two.
  bool pairs = false;
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
  auto productBody = [&](OpBuilder &nb, Location l, ValueRange a) -> Value {
    Value p = arith::MulFOp::create(nb, l, wide(nb, l, a[0]), wide(nb, l, a[1]),
                                    contract);
    return arith::AddFOp::create(nb, l, a[2], p, contract);
  };
  Value logits;
  if (dot) {
    logits = dotLogits(kTile, qOperand);
  } else if (pairs) {
    // Loops (j, r, dd, t), d = 2 dd + t: each key's pair along D broadcast,
    // the queries' pairs as they are; the same pairs, same order, as over d.
    Value kByPairs = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get({tk, dim / 2, 2}, elemTy), kTile,
        SmallVector<ReassociationIndices>{{0}, {1, 2}});
    logits = generic(tileTy, {kByPairs, qOperand}, filled({tk, rows}, 0.0f),
                     {map(4, {0, 2, 3}), map(4, {2, 1, 3}), map(4, {0, 1})},
                     {par, par, red, red}, productBody);
  } else {
    // logits[j, r] = <k_j, q_r>; loops (j, r, d): the rows r are the
    // vector, one key element broadcast per step.
    logits = generic(tileTy, {kTile, qOperand}, filled({tk, rows}, 0.0f),
                     {map(3, {0, 2}), map(3, {2, 1}), map(3, {0, 1})},
                     {par, par, red}, productBody);
  }
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
  Value accNext;
  if (pairs) {
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
                      {par, par, red, red}, productBody);
  } else {
    // Loops (r, d, j): the head dim d is the vector, p[j, r] broadcast.
    accNext = generic(accTy, {narrowProbs ? narrow : probs, vTile}, accScaled,
                      {map(3, {2, 0}), map(3, {2, 1}), map(3, {0, 1})},
                      {par, par, red}, productBody);
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
  auto copy = [](OpBuilder &, Location, ValueRange a) { return a[0]; };
  if (dot) {
    qOperand = qRows;
  } else if (pairs) {
    // [D / 2, R, 2]: the queries' pairs along D, the rows' vector of pairs
    // that Q K^T's dot products read as they are.
    Value qByPairs = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get({rows, dim / 2, 2}, elemTy), qRows,
        SmallVector<ReassociationIndices>{{0}, {1, 2}});
    qOperand =
        generic(RankedTensorType::get({dim / 2, rows, 2}, elemTy), {qByPairs},
                empty({dim / 2, rows, 2}, elemTy),
                {map(3, {1, 0, 2}), map(3, {0, 1, 2})}, {par, par, par}, copy);
  } else {
    qOperand = generic(RankedTensorType::get({dim, rows}, elemTy), {qRows},
                       empty({dim, rows}, elemTy),
                       {map(2, {1, 0}), map(2, {0, 1})}, {par, par}, copy);
  }

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
      decomposeKeyLoop(b, getLoc(), *this, keyTile, lengthsChecked)};
}

FailureOr<SmallVector<Value>> AttentionOp::decomposeOperation(OpBuilder &b) {
  auto config =
      (*this)->getAttrOfType<LoweringConfigAttr>("snapkv.lowering_config");
  return decompose(b, config ? config.getKeyTile() : kDefaultKeyTile);
}
