//===- Selection.cpp - top-k, compaction and gather as linalg ops ---------===//
//
// Pooled scores become order-preserving i32 keys; the (C-W)-th largest key
// is found bit by bit (32 counting passes, no sort); the kept positions are
// then found per OUTPUT SLOT: chunk counts and their exclusive prefix sums
// locate the chunk that holds the s-th kept position, and a scan of that one
// chunk finds it. Every step is a linalg op whose parallel axes are the rows
// (b, h) and the chunks, slots or positions, so nothing loops over positions
// outside a structured op.
//
//===----------------------------------------------------------------------===//

#include "Formulation.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

#include <limits>

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

static Value constI32(OpBuilder &nb, Location l, int32_t v) {
  return arith::ConstantOp::create(nb, l, nb.getI32IntegerAttr(v));
}
static Value constIndex(OpBuilder &nb, Location l, int64_t v) {
  return arith::ConstantIndexOp::create(nb, l, v);
}
static Value boolToI32(OpBuilder &nb, Location l, Value bit) {
  return arith::ExtUIOp::create(nb, l, nb.getI32Type(), bit);
}
static Value cmp(OpBuilder &nb, Location l, arith::CmpIPredicate p, Value x,
                 Value y) {
  return arith::CmpIOp::create(nb, l, p, x, y);
}

/// An i32 whose unsigned order is the order of the pooled score: -0 is
/// folded into +0 (they tie) and NaN maps to 0, below every number.
/// Positions past the prefix (chunk padding) get 0 as well: they follow
/// every real position, so the tie rule never reaches them (K <= P).
Value Formulation::orderKeys(Value pooled, Value prefix) {
  OpFoldResult padded = tensor::getMixedSize(b, loc, pooled, 2);
  Value prefix32 = arith::IndexCastOp::create(b, loc, i32, prefix);
  auto op = generic(
      RankedTensorType::get(cast<RankedTensorType>(pooled.getType()).getShape(),
                            i32),
      {pooled}, {empty({ofr(s.batch), ofr(s.heads), padded}, i32)},
      {map(3, {0, 1, 2}), map(3, {0, 1, 2})}, {par, par, par},
      [=](OpBuilder &nb, Location l, ValueRange args) {
        Value zero = arith::ConstantOp::create(nb, l, nb.getF32FloatAttr(0.0f));
        Value x = arith::AddFOp::create(nb, l, args[0], zero);
        Value bits = arith::BitcastOp::create(nb, l, nb.getI32Type(), x);
        Value negative =
            cmp(nb, l, arith::CmpIPredicate::slt, bits, constI32(nb, l, 0));
        Value flipped = arith::XOrIOp::create(nb, l, bits, constI32(nb, l, -1));
        Value signSet = arith::OrIOp::create(
            nb, l, bits, constI32(nb, l, std::numeric_limits<int32_t>::min()));
        Value key = arith::SelectOp::create(nb, l, negative, flipped, signSet);
        Value isNan = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::UNO,
                                            args[0], args[0]);
        Value j = arith::IndexCastOp::create(nb, l, nb.getI32Type(),
                                             linalg::IndexOp::create(nb, l, 2));
        Value real = cmp(nb, l, arith::CmpIPredicate::slt, j, prefix32);
        Value ranked = arith::AndIOp::create(
            nb, l, real,
            arith::XOrIOp::create(
                nb, l, isNan,
                arith::ConstantOp::create(nb, l, nb.getBoolAttr(true))));
        linalg::YieldOp::create(nb, l,
                                ValueRange{arith::SelectOp::create(
                                    nb, l, ranked, key, constI32(nb, l, 0))});
      });
  return op.getResult(0);
}

/// Keys that rank the prefix without votes. `recent`: the `sinks` leading
/// positions first, then the later a position the higher (StreamingLLM).
/// `random`: the splitmix64 step of (seed, row, position), in [1, 2^31], i.e. a
/// uniform random order reproducible from the seed. Chunk padding gets 0.
Value Formulation::comparisonKeys(Value prefix, OpFoldResult paddedPrefixLen) {
  Value prefix32 = arith::IndexCastOp::create(b, loc, i32, prefix);
  bool recent = s.scoring == Scoring::recent;
  int32_t sinks = static_cast<int32_t>(s.sinks);
  int64_t heads = s.heads;
  // splitmix64's increment, times the seed, wrapping.
  uint64_t seedMix =
      static_cast<uint64_t>(s.seed) * UINT64_C(0x9E3779B97F4A7C15);
  auto op = generic(
      RankedTensorType::get(
          {s.batch, s.heads,
           getConstantIntValue(paddedPrefixLen).value_or(ShapedType::kDynamic)},
          i32),
      {}, {empty({ofr(s.batch), ofr(s.heads), paddedPrefixLen}, i32)},
      {map(3, {0, 1, 2})}, {par, par, par},
      [=](OpBuilder &nb, Location l, ValueRange) {
        Value j = arith::IndexCastOp::create(nb, l, nb.getI32Type(),
                                             linalg::IndexOp::create(nb, l, 2));
        Value key;
        if (recent) {
          Value isSink =
              cmp(nb, l, arith::CmpIPredicate::slt, j, constI32(nb, l, sinks));
          key = arith::SelectOp::create(
              nb, l, isSink, constI32(nb, l, -1),
              arith::AddIOp::create(nb, l, j, constI32(nb, l, 1)));
        } else {
          auto c64 = [&](uint64_t v) {
            return arith::ConstantOp::create(
                nb, l, nb.getI64IntegerAttr(static_cast<int64_t>(v)));
          };
          auto asI64 = [&](unsigned dim) {
            return arith::IndexCastOp::create(
                nb, l, nb.getI64Type(), linalg::IndexOp::create(nb, l, dim));
          };
          Value row = arith::AddIOp::create(
              nb, l, arith::MulIOp::create(nb, l, asI64(0), c64(heads)),
              asI64(1));
          Value x = arith::OrIOp::create(
              nb, l, arith::ShLIOp::create(nb, l, row, c64(32)), asI64(2));
          x = arith::XOrIOp::create(nb, l, x, c64(seedMix));
          x = arith::AddIOp::create(nb, l, x,
                                    c64(UINT64_C(0x9E3779B97F4A7C15)));
          auto mix = [&](Value v, uint64_t shift, uint64_t mul) {
            Value m = arith::XOrIOp::create(
                nb, l, v, arith::ShRUIOp::create(nb, l, v, c64(shift)));
            return mul ? Value(arith::MulIOp::create(nb, l, m, c64(mul))) : m;
          };
          x = mix(x, 30, UINT64_C(0xBF58476D1CE4E5B9));
          x = mix(x, 27, UINT64_C(0x94D049BB133111EB));
          x = mix(x, 31, 0);
          Value top = arith::TruncIOp::create(
              nb, l, nb.getI32Type(),
              arith::ShRUIOp::create(nb, l, x, c64(33)));
          key = arith::AddIOp::create(nb, l, top, constI32(nb, l, 1));
        }
        Value real = cmp(nb, l, arith::CmpIPredicate::slt, j, prefix32);
        linalg::YieldOp::create(nb, l,
                                ValueRange{arith::SelectOp::create(
                                    nb, l, real, key, constI32(nb, l, 0))});
      });
  return op.getResult(0);
}

/// The K-th largest key per row, found bit by bit from the top: a candidate
/// prefix survives when at least K keys are >= it.
Value Formulation::threshold(Value keys) {
  SmallVector<OpFoldResult> rowShape = {ofr(s.batch), ofr(s.heads)};
  Type rowTy = RankedTensorType::get({s.batch, s.heads}, i32);
  Value start = filled(rowShape, i32, cI32(0));
  int32_t need = static_cast<int32_t>(s.keep);
  auto loop = scf::ForOp::create(
      b, loc, cIndex(0), cIndex(32), cIndex(1), ValueRange{start},
      [&](OpBuilder &nb, Location l, Value iv, ValueRange iterArgs) {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
        Value prefixKey = iterArgs[0];
        Value shift = arith::SubIOp::create(
            b, l, cI32(31), arith::IndexCastOp::create(b, l, i32, iv));
        Value bit = arith::ShLIOp::create(b, l, cI32(1), shift);
        auto countOp = generic(
            rowTy, {keys, prefixKey}, {filled(rowShape, i32, cI32(0))},
            {map(3, {0, 1, 2}), map(3, {0, 1}), map(3, {0, 1})},
            {par, par, red}, [bit](OpBuilder &bb, Location bl, ValueRange a) {
              Value cand = arith::OrIOp::create(bb, bl, a[1], bit);
              Value ge = cmp(bb, bl, arith::CmpIPredicate::uge, a[0], cand);
              linalg::YieldOp::create(
                  bb, bl,
                  ValueRange{arith::AddIOp::create(bb, bl, a[2],
                                                   boolToI32(bb, bl, ge))});
            });
        auto nextOp = generic(
            rowTy, {countOp.getResult(0)}, {prefixKey},
            {map(2, {0, 1}), map(2, {0, 1})}, {par, par},
            [bit, need](OpBuilder &bb, Location bl, ValueRange a) {
              Value cand = arith::OrIOp::create(bb, bl, a[1], bit);
              Value enough = cmp(bb, bl, arith::CmpIPredicate::sge, a[0],
                                 constI32(bb, bl, need));
              linalg::YieldOp::create(bb, bl,
                                      ValueRange{arith::SelectOp::create(
                                          bb, bl, enough, cand, a[1])});
            });
        scf::YieldOp::create(b, l, ValueRange{nextOp.getResult(0)});
      });
  return loop.getResult(0);
}

Value Formulation::countAbove(Value keys, Value thresh) {
  SmallVector<OpFoldResult> rowShape = {ofr(s.batch), ofr(s.heads)};
  auto op = generic(
      RankedTensorType::get({s.batch, s.heads}, i32), {keys, thresh},
      {filled(rowShape, i32, cI32(0))},
      {map(3, {0, 1, 2}), map(3, {0, 1}), map(3, {0, 1})}, {par, par, red},
      [](OpBuilder &nb, Location l, ValueRange a) {
        Value gt = cmp(nb, l, arith::CmpIPredicate::ugt, a[0], a[1]);
        linalg::YieldOp::create(nb, l,
                                ValueRange{arith::AddIOp::create(
                                    nb, l, a[2], boolToI32(nb, l, gt))});
      });
  return op.getResult(0);
}

/// Kept prefix positions in ascending order: every key above the threshold
/// and the first `K - above` keys equal to it (ties to the lower position).
/// Returns the positions [B, Hc, K] (i64) and their keys (i32).
std::pair<Value, Value> Formulation::keptPositions(Value keys, Value thresh,
                                                   Value above) {
  OpFoldResult padded = tensor::getMixedSize(b, loc, keys, 2);
  AffineExpr p0 = b.getAffineSymbolExpr(0);
  OpFoldResult chunks = affine::makeComposedFoldedAffineApply(
      b, loc, p0.floorDiv(chunk), {padded});
  std::optional<int64_t> staticChunks = getConstantIntValue(chunks);
  int64_t dynChunks = staticChunks.value_or(ShapedType::kDynamic);
  Value byChunk = tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get({s.batch, s.heads, dynChunks, chunk}, i32),
      keys, ArrayRef<ReassociationIndices>{{0}, {1}, {2, 3}},
      ArrayRef<OpFoldResult>{ofr(s.batch), ofr(s.heads), chunks, ofr(chunk)});

  // Per chunk: how many keys are above the threshold and how many equal it.
  SmallVector<OpFoldResult> chunkShape = {ofr(s.batch), ofr(s.heads), chunks};
  Type chunkTy = RankedTensorType::get({s.batch, s.heads, dynChunks}, i32);
  auto countOp = generic(
      {chunkTy, chunkTy}, {byChunk, thresh},
      {filled(chunkShape, i32, cI32(0)), filled(chunkShape, i32, cI32(0))},
      {map(4, {0, 1, 2, 3}), map(4, {0, 1}), map(4, {0, 1, 2}),
       map(4, {0, 1, 2})},
      {par, par, par, red}, [](OpBuilder &nb, Location l, ValueRange a) {
        Value gt = cmp(nb, l, arith::CmpIPredicate::ugt, a[0], a[1]);
        Value eq = cmp(nb, l, arith::CmpIPredicate::eq, a[0], a[1]);
        linalg::YieldOp::create(
            nb, l,
            ValueRange{
                arith::AddIOp::create(nb, l, a[2], boolToI32(nb, l, gt)),
                arith::AddIOp::create(nb, l, a[3], boolToI32(nb, l, eq))});
      });

  // Exclusive prefix sums over the chunks.
  auto prefixOp = generic(
      {chunkTy, chunkTy}, {countOp.getResult(0), countOp.getResult(1)},
      {filled(chunkShape, i32, cI32(0)), filled(chunkShape, i32, cI32(0))},
      {map(4, {0, 1, 3}), map(4, {0, 1, 3}), map(4, {0, 1, 2}),
       map(4, {0, 1, 2})},
      {par, par, par, red}, [](OpBuilder &nb, Location l, ValueRange a) {
        Value c = linalg::IndexOp::create(nb, l, 2);
        Value c2 = linalg::IndexOp::create(nb, l, 3);
        Value before = cmp(nb, l, arith::CmpIPredicate::ult, c2, c);
        Value zero = constI32(nb, l, 0);
        linalg::YieldOp::create(
            nb, l,
            ValueRange{arith::AddIOp::create(
                           nb, l, a[2],
                           arith::SelectOp::create(nb, l, before, a[0], zero)),
                       arith::AddIOp::create(nb, l, a[3],
                                             arith::SelectOp::create(
                                                 nb, l, before, a[1], zero))});
      });
  Value aboveBefore = prefixOp.getResult(0),
        equalBefore = prefixOp.getResult(1);

  // Per output slot s: the last chunk c whose kept-before count
  // A[c] + min(ties, E[c]) is <= s (a binary search over the non-decreasing
  // counts), then a scan of that chunk for the (s - count)-th kept key.
  // Steps 2^(n-1), ..., 1 reach every chunk when 2^n > #chunks; prompt
  // lengths are below 2^31 (checked), which bounds a dynamic #chunks.
  int64_t maxChunks = staticChunks.value_or(
      (std::numeric_limits<int32_t>::max() + chunk - 1) / chunk);
  int64_t searchSteps = 1;
  while ((int64_t(1) << searchSteps) <= maxChunks)
    ++searchSteps;
  int64_t need = s.keep;
  Value numChunks = getValueOrCreateConstantIndexOp(b, loc, chunks);
  SmallVector<OpFoldResult> slotShape = {ofr(s.batch), ofr(s.heads),
                                         ofr(s.keep)};
  Type posTy = RankedTensorType::get({s.batch, s.heads, s.keep}, i64);
  Type keyTy = RankedTensorType::get({s.batch, s.heads, s.keep}, i32);
  auto slotOp = generic(
      {posTy, keyTy}, {thresh, above},
      {empty(slotShape, i64), empty(slotShape, i32)},
      {map(3, {0, 1}), map(3, {0, 1}), map(3, {0, 1, 2}), map(3, {0, 1, 2})},
      {par, par, par}, [&](OpBuilder &nb, Location l, ValueRange a) {
        Value bi = linalg::IndexOp::create(nb, l, 0);
        Value hi = linalg::IndexOp::create(nb, l, 1);
        Value slot = arith::IndexCastOp::create(
            nb, l, nb.getI32Type(), linalg::IndexOp::create(nb, l, 2));
        Value thr = a[0];
        Value ties = arith::SubIOp::create(nb, l, constI32(nb, l, need), a[1]);
        auto keptBefore = [&](OpBuilder &fb, Location fl, Value c) {
          Value ab = tensor::ExtractOp::create(fb, fl, aboveBefore,
                                               ValueRange{bi, hi, c});
          Value eb = tensor::ExtractOp::create(fb, fl, equalBefore,
                                               ValueRange{bi, hi, c});
          return arith::AddIOp::create(
              fb, fl, ab, arith::MinSIOp::create(fb, fl, ties, eb));
        };
        // Binary search: steps 2^(n-1), ..., 1 from chunk 0.
        auto search = scf::ForOp::create(
            nb, l, constIndex(nb, l, 0), constIndex(nb, l, searchSteps),
            constIndex(nb, l, 1), ValueRange{constIndex(nb, l, 0)},
            [&](OpBuilder &fb, Location fl, Value iv, ValueRange acc) {
              Value shift = arith::SubIOp::create(
                  fb, fl, constIndex(fb, fl, searchSteps - 1), iv);
              Value step =
                  arith::ShLIOp::create(fb, fl, constIndex(fb, fl, 1), shift);
              Value cand = arith::AddIOp::create(fb, fl, acc[0], step);
              Value valid =
                  cmp(fb, fl, arith::CmpIPredicate::ult, cand, numChunks);
              Value safe = arith::SelectOp::create(fb, fl, valid, cand,
                                                   constIndex(fb, fl, 0));
              Value fits = cmp(fb, fl, arith::CmpIPredicate::sle,
                               keptBefore(fb, fl, safe), slot);
              Value take = arith::AndIOp::create(fb, fl, valid, fits);
              scf::YieldOp::create(fb, fl,
                                   ValueRange{arith::SelectOp::create(
                                       fb, fl, take, cand, acc[0])});
            });
        Value c = search.getResult(0);
        Value base = arith::MulIOp::create(nb, l, c, constIndex(nb, l, chunk));
        Value count0 = keptBefore(nb, l, c);
        Value equal0 = tensor::ExtractOp::create(nb, l, equalBefore,
                                                 ValueRange{bi, hi, c});
        Value zero64 =
            arith::ConstantOp::create(nb, l, nb.getI64IntegerAttr(0));
        auto scan = scf::ForOp::create(
            nb, l, constIndex(nb, l, 0), constIndex(nb, l, chunk),
            constIndex(nb, l, 1),
            ValueRange{count0, equal0, zero64, constI32(nb, l, 0)},
            [&](OpBuilder &fb, Location fl, Value i, ValueRange acc) {
              Value j = arith::AddIOp::create(fb, fl, base, i);
              Value key = tensor::ExtractOp::create(fb, fl, keys,
                                                    ValueRange{bi, hi, j});
              Value isAbove = cmp(fb, fl, arith::CmpIPredicate::ugt, key, thr);
              Value isEqual = cmp(fb, fl, arith::CmpIPredicate::eq, key, thr);
              Value room = cmp(fb, fl, arith::CmpIPredicate::slt, acc[1], ties);
              Value take = arith::OrIOp::create(
                  fb, fl, isAbove,
                  arith::AndIOp::create(fb, fl, isEqual, room));
              Value hit = arith::AndIOp::create(
                  fb, fl, take,
                  cmp(fb, fl, arith::CmpIPredicate::eq, acc[0], slot));
              Value pos =
                  arith::IndexCastOp::create(fb, fl, fb.getI64Type(), j);
              scf::YieldOp::create(
                  fb, fl,
                  ValueRange{
                      arith::AddIOp::create(fb, fl, acc[0],
                                            boolToI32(fb, fl, take)),
                      arith::AddIOp::create(fb, fl, acc[1],
                                            boolToI32(fb, fl, isEqual)),
                      arith::SelectOp::create(fb, fl, hit, pos, acc[2]),
                      arith::SelectOp::create(fb, fl, hit, key, acc[3])});
            });
        linalg::YieldOp::create(
            nb, l, ValueRange{scan.getResult(2), scan.getResult(3)});
      });
  return {slotOp.getResult(0), slotOp.getResult(1)};
}

/// Score order: rank[i] = #(kept keys above key i) + #(earlier kept keys
/// equal to it) (positions are ascending, so equal keys keep position
/// order); the position of slot r is the one whose rank is r.
Value Formulation::orderByScore(Value positions, Value keptKeys) {
  SmallVector<OpFoldResult> slotShape = {ofr(s.batch), ofr(s.heads),
                                         ofr(s.keep)};
  auto rankOp = generic(
      RankedTensorType::get({s.batch, s.heads, s.keep}, i32),
      {keptKeys, keptKeys}, {filled(slotShape, i32, cI32(0))},
      {map(4, {0, 1, 2}), map(4, {0, 1, 3}), map(4, {0, 1, 2})},
      {par, par, par, red}, [](OpBuilder &nb, Location l, ValueRange a) {
        Value i = linalg::IndexOp::create(nb, l, 2);
        Value e = linalg::IndexOp::create(nb, l, 3);
        Value higher = cmp(nb, l, arith::CmpIPredicate::ugt, a[1], a[0]);
        Value equal = cmp(nb, l, arith::CmpIPredicate::eq, a[1], a[0]);
        Value earlier = cmp(nb, l, arith::CmpIPredicate::ult, e, i);
        Value before = arith::OrIOp::create(
            nb, l, higher, arith::AndIOp::create(nb, l, equal, earlier));
        linalg::YieldOp::create(nb, l,
                                ValueRange{arith::AddIOp::create(
                                    nb, l, a[2], boolToI32(nb, l, before))});
      });
  auto placeOp = generic(
      RankedTensorType::get({s.batch, s.heads, s.keep}, i64),
      {rankOp.getResult(0), positions},
      {filled(slotShape, i64,
              arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(0)))},
      {map(4, {0, 1, 3}), map(4, {0, 1, 3}), map(4, {0, 1, 2})},
      {par, par, par, red}, [](OpBuilder &nb, Location l, ValueRange a) {
        Value slot = arith::IndexCastOp::create(
            nb, l, nb.getI32Type(), linalg::IndexOp::create(nb, l, 2));
        Value mine = cmp(nb, l, arith::CmpIPredicate::eq, a[0], slot);
        Value zero = arith::ConstantOp::create(nb, l, nb.getI64IntegerAttr(0));
        linalg::YieldOp::create(
            nb, l,
            ValueRange{arith::AddIOp::create(
                nb, l, a[2],
                arith::SelectOp::create(nb, l, mine, a[1], zero))});
      });
  return placeOp.getResult(0);
}

/// [B, Hc, C]: the K kept prefix positions, then the window P .. P+W-1.
/// The positions are read through an indexing map (padded to C), not by
/// tensor.extract in the body: an IREE-style compiler can then tile the
/// slot search with this op instead of recomputing all of it in every
/// workgroup of this op's dispatch.
Value Formulation::withWindow(Value prefixPositions, Value prefix, Value dest) {
  int64_t keep = s.keep;
  Value prefix64 = arith::IndexCastOp::create(b, loc, i64, prefix);
  Value padded = tensor::PadOp::create(
      b, loc, Type(), prefixPositions,
      ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(0)},
      ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(s.window)},
      Value(arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(0))));
  auto op = generic(
      RankedTensorType::get({s.batch, s.heads, s.capacity}, i64), {padded},
      {dest ? dest : empty({ofr(s.batch), ofr(s.heads), ofr(s.capacity)}, i64)},
      {map(3, {0, 1, 2}), map(3, {0, 1, 2})}, {par, par, par},
      [=](OpBuilder &nb, Location l, ValueRange a) {
        Value slot = linalg::IndexOp::create(nb, l, 2);
        Value inPrefix = cmp(nb, l, arith::CmpIPredicate::ult, slot,
                             constIndex(nb, l, keep));
        Value t = arith::IndexCastOp::create(
            nb, l, nb.getI64Type(),
            arith::SubIOp::create(nb, l, slot, constIndex(nb, l, keep)));
        Value windowPos = arith::AddIOp::create(nb, l, prefix64, t);
        linalg::YieldOp::create(nb, l,
                                ValueRange{arith::SelectOp::create(
                                    nb, l, inPrefix, a[0], windowPos)});
      });
  return op.getResult(0);
}

/// [B, Hc, L] = 0 .. L-1 (the short-prompt bypass keeps everything).
Value Formulation::allPositions(OpFoldResult length) {
  Value init = empty({ofr(s.batch), ofr(s.heads), length}, i64);
  auto op = generic(
      init.getType(), {}, {init}, {map(3, {0, 1, 2})}, {par, par, par},
      [](OpBuilder &nb, Location l, ValueRange) {
        Value j = linalg::IndexOp::create(nb, l, 2);
        linalg::YieldOp::create(
            nb, l,
            ValueRange{arith::IndexCastOp::create(nb, l, nb.getI64Type(), j)});
      });
  return op.getResult(0);
}

/// out[b, h, s, :] = source[b, kvhead(h), indices[b, h, s], :], an exact
/// copy of the row (no arithmetic touches the element). The row index is
/// read inside the body from the outer loop indices only, so a vectoriser
/// sees one index per row and a contiguous copy along d.
Value Formulation::gather(Value source, Value indices, OpFoldResult kept,
                          Value dest, Value clampLength) {
  Value init =
      dest ? dest
           : empty({ofr(s.batch), ofr(s.heads), kept, ofr(s.dim)}, s.elemTy);
  int64_t g = s.expand() ? s.group : 1;
  Value last;
  if (clampLength)
    last = arith::IndexCastOp::create(
        b, loc, i64, arith::SubIOp::create(b, loc, clampLength, cIndex(1)));
  auto op = generic(
      init.getType(), {}, {init}, {map(4, {0, 1, 2, 3})}, {par, par, par, par},
      [source, indices, g, last](OpBuilder &nb, Location l, ValueRange) {
        Value bi = linalg::IndexOp::create(nb, l, 0);
        Value h = linalg::IndexOp::create(nb, l, 1);
        Value slot = linalg::IndexOp::create(nb, l, 2);
        Value d = linalg::IndexOp::create(nb, l, 3);
        Value kv = h;
        if (g != 1)
          kv = arith::DivUIOp::create(nb, l, h, constIndex(nb, l, g));
        Value index =
            tensor::ExtractOp::create(nb, l, indices, ValueRange{bi, h, slot});
        if (last)
          index = arith::MaxSIOp::create(
              nb, l, arith::MinSIOp::create(nb, l, index, last),
              arith::ConstantOp::create(nb, l, nb.getI64IntegerAttr(0)));
        Value pos = arith::IndexCastOp::create(nb, l, nb.getIndexType(), index);
        Value v = tensor::ExtractOp::create(nb, l, source,
                                            ValueRange{bi, kv, pos, d});
        linalg::YieldOp::create(nb, l, ValueRange{v});
      });
  // GPU (snapkv.gather only; a select gathers in its row blocks): one block
  // per (batch, head) row.
  blockGroup(op, {1, 1});
  return op.getResult(0);
}
