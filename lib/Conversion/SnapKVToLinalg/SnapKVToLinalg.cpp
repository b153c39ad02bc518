//===- SnapKVToLinalg.cpp - snapkv.select to tensor-level linalg ----------===//
//
// The selection is emitted as batched linalg.generic ops (everything that is
// a map or a reduction: logits, softmax statistics, votes, GQA aggregation,
// pooling, top-k threshold search, ranks, gathers) plus scf.for loops for the
// two inherently sequential steps (compacting kept positions in order and
// scattering them by rank). See docs/lowering.md for the structure.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Conversion/SnapKVToLinalg/SnapKVToLinalg.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "llvm/Support/FormatVariadic.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <limits>

namespace mlir::snapkv {
#define GEN_PASS_DEF_CONVERTSNAPKVTOLINALG
#include "snapkv/Conversion/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {

using utils::IteratorType;
constexpr IteratorType par = IteratorType::parallel;
constexpr IteratorType red = IteratorType::reduction;

/// What a selection needs to know, from snapkv.select or snapkv.score (which
/// has no values, capacity or order).
struct SelectionParams {
  Value queries, keys, values;
  int64_t window, capacity, kernel;
  PoolingKind pooling;
  GqaPolicy gqa;
  Order order;
  double scale;
  TypeRange resultTypes;
  StringRef opName; // for run-time check messages
};

/// Emits the lowering of one snapkv.select / snapkv.score. Shapes follow
/// SPEC section 2: B batch, Hq/Hkv query/kv heads, G = Hq / Hkv, W window,
/// D head dim, L prompt length (maybe dynamic), P = L - W, K = C - W kept
/// prefix rows, Hc selection heads (Hq for expand, Hkv otherwise).
class SelectEmitter {
public:
  SelectEmitter(const SelectionParams &params, PatternRewriter &rewriter,
                Location loc)
      : p(params), b(rewriter), loc(loc) {
    auto qTy = cast<RankedTensorType>(p.queries.getType());
    auto kTy = cast<RankedTensorType>(p.keys.getType());
    elemTy = qTy.getElementType();
    f32 = b.getF32Type();
    i32 = b.getI32Type();
    i64 = b.getI64Type();
    batch = qTy.getDimSize(0);
    queryHeads = qTy.getDimSize(1);
    kvHeads = kTy.getDimSize(1);
    group = queryHeads / kvHeads;
    window = p.window;
    dim = qTy.getDimSize(3);
    capacity = p.capacity;
    keep = capacity - window;
    expand = p.gqa == GqaPolicy::expand;
    heads = expand ? queryHeads : kvHeads;
    scale = p.scale;
  }

  /// snapkv.score: (votes, pooled), each [B, Hc, P] f32.
  SmallVector<Value> emitScores();

  /// Returns the replacement values (keys, values, indices).
  SmallVector<Value> emit();

private:
  // --- small builders -----------------------------------------------------
  Value cIndex(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value cI32(int32_t v) {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
  }
  Value cF32(float v) {
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
  }
  Value empty(ArrayRef<OpFoldResult> shape, Type elem) {
    return tensor::EmptyOp::create(b, loc, shape, elem);
  }
  Value filled(ArrayRef<OpFoldResult> shape, Type elem, Value init) {
    return linalg::FillOp::create(b, loc, init, empty(shape, elem))
        .getResult(0);
  }
  OpFoldResult ofr(int64_t v) { return b.getIndexAttr(v); }
  AffineMap map(unsigned numDims, ArrayRef<unsigned> dims) {
    SmallVector<AffineExpr> exprs;
    for (unsigned d : dims)
      exprs.push_back(b.getAffineDimExpr(d));
    return AffineMap::get(numDims, 0, exprs, b.getContext());
  }
  Value generic(Type resultTy, ValueRange ins, Value init,
                ArrayRef<AffineMap> maps, ArrayRef<IteratorType> iters,
                function_ref<void(OpBuilder &, Location, ValueRange)> body) {
    return linalg::GenericOp::create(b, loc, TypeRange{resultTy}, ins,
                                     ValueRange{init}, maps, iters, body)
        .getResult(0);
  }
  /// Records the CPU tile shape that suits this op (see the
  /// snapkv-vectorize-linalg pass); other targets ignore it.
  static void setTileSizes(Value result, ArrayRef<int64_t> sizes) {
    Operation *producer = result.getDefiningOp();
    producer->setAttr("snapkv.tile_sizes",
                      DenseI64ArrayAttr::get(producer->getContext(), sizes));
  }
  /// x - max, except that an x equal to the row max gives 0: an infinite
  /// maximum then still yields probabilities (1 / #maxima) instead of
  /// inf - inf = NaN.
  static Value shifted(OpBuilder &nb, Location l, Value x, Value max) {
    Value isMax =
        arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, x, max);
    Value zero = arith::ConstantOp::create(nb, l, nb.getF32FloatAttr(0.0f));
    return arith::SelectOp::create(nb, l, isMax, zero,
                                   arith::SubFOp::create(nb, l, x, max));
  }
  static Value toF32(OpBuilder &nb, Location l, Value v) {
    if (v.getType().isF32())
      return v;
    return arith::ExtFOp::create(nb, l, nb.getF32Type(), v);
  }

  // --- the steps ------------------------------------------------------------
  Value logits(OpFoldResult length);
  std::pair<Value, Value> rowStatistics(Value logits, OpFoldResult prefix);
  Value votes(Value logits, Value rowMax, Value rowSum, OpFoldResult prefix);
  Value aggregateHeads(Value votes);
  Value pool(Value votes);
  Value orderKeys(Value pooled);
  Value threshold(Value keys);
  Value tiesNeeded(Value keys, Value thresh);
  std::pair<Value, Value> compact(Value keys, Value thresh, Value ties,
                                  Value prefix);
  Value orderByScore(Value positions, Value keys);
  Value appendWindow(Value prefixRows, Value prefix);
  Value iota(OpFoldResult length);
  Value gather(Value source, Value indices, OpFoldResult kept);

  OpFoldResult prefixLength(OpFoldResult length);
  /// (GQA-aggregated votes, pooled scores), each [B, Hc, P] f32.
  std::pair<Value, Value> scores(OpFoldResult length);
  SmallVector<Value> emitSelection(OpFoldResult length);
  SmallVector<Value> emitBypass(OpFoldResult length);
  /// The prompt length as an index, with run-time checks (dynamic case).
  Value checkedLength();
  SmallVector<Value> castToResults(SmallVector<Value> values);

  SelectionParams p;
  PatternRewriter &b;
  Location loc;
  Type elemTy, f32, i32, i64;
  int64_t batch, queryHeads, kvHeads, group, window, dim, capacity, keep,
      heads;
  bool expand;
  double scale;
};

/// logits[b, kv, g, t, j] = <q[b, kv*G + g, t], k[b, kv, j]> in f32 (unscaled).
/// K is packed into panels Kp[b, kv, j / 16, d, j % 16] (zero-padded to a
/// multiple of 16 keys) so the innermost loop reads one contiguous 64-byte
/// row of a panel per d and each step is a broadcast of one query element
/// times 16 keys, accumulated in a [t, j] register tile. The padded columns
/// are sliced off again.
Value SelectEmitter::logits(OpFoldResult length) {
  constexpr int64_t panel = 16;
  auto qExpTy =
      RankedTensorType::get({batch, kvHeads, group, window, dim}, elemTy);
  Value q = tensor::ExpandShapeOp::create(
      b, loc, qExpTy, p.queries,
      ArrayRef<ReassociationIndices>{{0}, {1, 2}, {3}, {4}});

  // Pad L up to a multiple of the panel width.
  AffineExpr l0 = b.getAffineSymbolExpr(0);
  OpFoldResult panels = affine::makeComposedFoldedAffineApply(
      b, loc, (l0 + panel - 1).floorDiv(panel), {length});
  OpFoldResult extra = affine::makeComposedFoldedAffineApply(
      b, loc, (l0 + panel - 1).floorDiv(panel) * panel - l0, {length});
  Value keys = p.keys;
  if (!isConstantIntValue(extra, 0)) {
    Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(elemTy));
    keys = tensor::PadOp::create(
        b, loc, Type(), keys,
        ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(0), ofr(0)},
        ArrayRef<OpFoldResult>{ofr(0), ofr(0), extra, ofr(0)}, zero);
  }
  SmallVector<OpFoldResult> splitShape = {ofr(batch), ofr(kvHeads), panels,
                                          ofr(panel), ofr(dim)};
  Type splitTy = RankedTensorType::get(
      {batch, kvHeads, getConstantIntValue(panels).value_or(ShapedType::kDynamic),
       panel, dim},
      elemTy);
  Value split = tensor::ExpandShapeOp::create(
      b, loc, splitTy, keys,
      ArrayRef<ReassociationIndices>{{0}, {1}, {2, 3}, {4}}, splitShape);
  Value packed =
      empty({ofr(batch), ofr(kvHeads), panels, ofr(dim), ofr(panel)}, elemTy);
  packed = generic(packed.getType(), {split}, packed,
                   {map(5, {0, 1, 2, 4, 3}), map(5, {0, 1, 2, 3, 4})},
                   {par, par, par, par, par},
                   [](OpBuilder &nb, Location l, ValueRange args) {
                     linalg::YieldOp::create(nb, l, ValueRange{args[0]});
                   });
  setTileSizes(packed, {1, 1, 1, 16, 16});

  // Loops (b, kv, g, t, jp, jj, d) over logits viewed as [.., L/16, 16].
  Value init = filled({ofr(batch), ofr(kvHeads), ofr(group), ofr(window),
                       panels, ofr(panel)},
                      f32, cF32(0.0f));
  Value result = generic(
      init.getType(), {q, packed}, init,
      {map(7, {0, 1, 2, 3, 6}), map(7, {0, 1, 4, 6, 5}),
       map(7, {0, 1, 2, 3, 4, 5})},
      {par, par, par, par, par, par, red},
      [](OpBuilder &nb, Location l, ValueRange args) {
        // `contract` lets snapkv-optimize-math fuse the multiply-add.
        auto contract = arith::FastMathFlags::contract;
        Value prod = arith::MulFOp::create(nb, l, toF32(nb, l, args[0]),
                                           toF32(nb, l, args[1]), contract);
        linalg::YieldOp::create(
            nb, l,
            ValueRange{arith::AddFOp::create(nb, l, args[2], prod, contract)});
      });
  setTileSizes(result, {1, 1, 1, std::min<int64_t>(window, 4), 1, panel, 1});
  // Loop order (b, kv, jp, g, t, jj, d): one 8 KiB panel stays in L1 while
  // every query row of the kv head uses it.
  result.getDefiningOp()->setAttr(
      "snapkv.tile_interchange",
      b.getDenseI64ArrayAttr({0, 1, 4, 2, 3, 5, 6}));
  Value flat = tensor::CollapseShapeOp::create(
      b, loc, result,
      ArrayRef<ReassociationIndices>{{0}, {1}, {2}, {3}, {4, 5}});
  if (isConstantIntValue(extra, 0))
    return flat;
  SmallVector<OpFoldResult> offsets(5, ofr(0)), strides(5, ofr(1));
  SmallVector<OpFoldResult> sizes = {ofr(batch), ofr(kvHeads), ofr(group),
                                     ofr(window), length};
  return tensor::ExtractSliceOp::create(b, loc, flat, offsets, sizes, strides);
}

/// Row maximum and row sum of exp(scaled logit - max) over the causally
/// visible columns j <= P + t: the FULL softmax denominator (prefix and
/// window columns alike).
std::pair<Value, Value> SelectEmitter::rowStatistics(Value logitsT,
                                                     OpFoldResult prefixLen) {
  Value prefix = getValueOrCreateConstantIndexOp(b, loc, prefixLen);
  SmallVector<OpFoldResult> rowShape = {ofr(batch), ofr(kvHeads), ofr(group),
                                        ofr(window)};
  SmallVector<AffineMap> maps = {map(5, {0, 1, 2, 3, 4}),
                                 map(5, {0, 1, 2, 3})};
  SmallVector<IteratorType> iters = {par, par, par, par, red};
  double s = scale;
  auto visible = [prefix](OpBuilder &nb, Location l) {
    Value t = linalg::IndexOp::create(nb, l, 3);
    Value j = linalg::IndexOp::create(nb, l, 4);
    Value last = arith::AddIOp::create(nb, l, prefix, t);
    return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ule, j, last);
  };
  auto scaled = [s](OpBuilder &nb, Location l, Value raw) {
    Value sc = arith::ConstantOp::create(nb, l, nb.getF32FloatAttr(s));
    return arith::MulFOp::create(nb, l, raw, sc);
  };

  // Bodies are `acc <combiner> select(visible, x, neutral)` so that the
  // vectoriser recognises the reduction.
  float negInf = -std::numeric_limits<float>::infinity();
  Value maxInit = filled(rowShape, f32, cF32(negInf));
  Value rowMax = generic(
      maxInit.getType(), {logitsT}, maxInit, maps, iters,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value neutral =
            arith::ConstantOp::create(nb, l, nb.getF32FloatAttr(negInf));
        Value x = arith::SelectOp::create(nb, l, visible(nb, l),
                                          scaled(nb, l, args[0]), neutral);
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::MaximumFOp::create(nb, l, args[1], x)});
      });

  maps.insert(maps.begin() + 1, map(5, {0, 1, 2, 3}));
  Value sumInit = filled(rowShape, f32, cF32(0.0f));
  Value rowSum = generic(
      sumInit.getType(), {logitsT, rowMax}, sumInit, maps, iters,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value x = shifted(nb, l, scaled(nb, l, args[0]), args[1]);
        Value zero = arith::ConstantOp::create(nb, l, nb.getF32FloatAttr(0.0f));
        Value e = arith::SelectOp::create(nb, l, visible(nb, l),
                                          math::ExpOp::create(nb, l, x), zero);
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::AddFOp::create(nb, l, args[2], e)});
      });
  return {rowMax, rowSum};
}

/// votes[b, kv, g, j] = sum_t exp(scaled logit - max_t) / sum_t, j < P.
/// Every window query sees every prefix column, so no mask is needed here.
Value SelectEmitter::votes(Value logitsT, Value rowMax, Value rowSum,
                           OpFoldResult prefix) {
  SmallVector<OpFoldResult> sliceOffsets(5, ofr(0));
  SmallVector<OpFoldResult> sliceSizes = {ofr(batch), ofr(kvHeads),
                                          ofr(group), ofr(window), prefix};
  SmallVector<OpFoldResult> strides(5, ofr(1));
  Value prefixLogits = tensor::ExtractSliceOp::create(
      b, loc, logitsT, sliceOffsets, sliceSizes, strides);
  Value init = filled({ofr(batch), ofr(kvHeads), ofr(group), prefix}, f32,
                      cF32(0.0f));
  double s = scale;
  return generic(
      init.getType(), {prefixLogits, rowMax, rowSum}, init,
      // Loops (b, kv, g, t, j): the reduction over t is outside the
      // contiguous j loop, so rows are read and accumulated lane-wise.
      {map(5, {0, 1, 2, 3, 4}), map(5, {0, 1, 2, 3}), map(5, {0, 1, 2, 3}),
       map(5, {0, 1, 2, 4})},
      {par, par, par, red, par},
      [s](OpBuilder &nb, Location l, ValueRange args) {
        Value sc = arith::ConstantOp::create(nb, l, nb.getF32FloatAttr(s));
        Value x =
            shifted(nb, l, arith::MulFOp::create(nb, l, args[0], sc), args[1]);
        Value prob =
            arith::DivFOp::create(nb, l, math::ExpOp::create(nb, l, x), args[2]);
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::AddFOp::create(nb, l, args[3], prob)});
      });
}

/// [B, Hkv, G, P] -> [B, Hc, P] following the GQA policy.
Value SelectEmitter::aggregateHeads(Value votesT) {
  if (expand)
    return tensor::CollapseShapeOp::create(
        b, loc, votesT, ArrayRef<ReassociationIndices>{{0}, {1, 2}, {3}});
  bool mean = p.gqa == GqaPolicy::mean;
  OpFoldResult prefix = tensor::getMixedSize(b, loc, votesT, 3);
  Value init = filled({ofr(batch), ofr(kvHeads), prefix}, f32,
                      cF32(mean ? 0.0f
                                : -std::numeric_limits<float>::infinity()));
  float groupSize = static_cast<float>(group);
  return generic(
      init.getType(), {votesT}, init,
      {map(4, {0, 1, 2, 3}), map(4, {0, 1, 3})}, {par, par, red, par},
      [mean, groupSize](OpBuilder &nb, Location l, ValueRange args) {
        Value r;
        if (mean) {
          // Accumulate v / G so the mean needs no second pass.
          Value g = arith::ConstantOp::create(nb, l,
                                              nb.getF32FloatAttr(groupSize));
          r = arith::AddFOp::create(
              nb, l, args[1], arith::DivFOp::create(nb, l, args[0], g));
        } else {
          r = arith::MaximumFOp::create(nb, l, args[1], args[0]);
        }
        linalg::YieldOp::create(nb, l, ValueRange{r});
      });
}

/// Stride-1 pooling with kernel/2 neighbours on each side. avg: zero padding
/// and division by the kernel size (count_include_pad); max: -inf padding,
/// i.e. the maximum over in-range neighbours.
Value SelectEmitter::pool(Value aggregated) {
  int64_t kernel = p.kernel;
  bool avg = p.pooling == PoolingKind::avg;
  float padValue = avg ? 0.0f : -std::numeric_limits<float>::infinity();
  OpFoldResult prefix = tensor::getMixedSize(b, loc, aggregated, 2);
  Value source = aggregated;
  if (kernel > 1) {
    int64_t radius = kernel / 2;
    SmallVector<OpFoldResult> low = {ofr(0), ofr(0), ofr(radius)};
    source = tensor::PadOp::create(b, loc, Type(), aggregated, low, low,
                                   cF32(padValue));
  }
  Value window = empty({ofr(kernel)}, f32);
  Value init = filled({ofr(batch), ofr(heads), prefix}, f32, cF32(padValue));
  AffineExpr d0 = b.getAffineDimExpr(0), d1 = b.getAffineDimExpr(1),
             d2 = b.getAffineDimExpr(2), d3 = b.getAffineDimExpr(3);
  AffineMap padMap = AffineMap::get(4, 0, {d0, d1, d2 + d3}, b.getContext());
  Value pooled = generic(
      init.getType(), {source, window}, init,
      {padMap, map(4, {3}), map(4, {0, 1, 2})}, {par, par, par, red},
      [avg](OpBuilder &nb, Location l, ValueRange args) {
        Value r = avg ? Value(arith::AddFOp::create(nb, l, args[2], args[0]))
                      : Value(arith::MaximumFOp::create(nb, l, args[2],
                                                        args[0]));
        linalg::YieldOp::create(nb, l, ValueRange{r});
      });
  if (!avg)
    return pooled;
  float k = static_cast<float>(kernel);
  Value out = empty({ofr(batch), ofr(heads), prefix}, f32);
  return generic(out.getType(), {pooled}, out,
                 {map(3, {0, 1, 2}), map(3, {0, 1, 2})}, {par, par, par},
                 [k](OpBuilder &nb, Location l, ValueRange args) {
                   Value kc =
                       arith::ConstantOp::create(nb, l, nb.getF32FloatAttr(k));
                   linalg::YieldOp::create(
                       nb, l,
                       ValueRange{arith::DivFOp::create(nb, l, args[0], kc)});
                 });
}

/// Maps each pooled score to an i32 whose unsigned order is the score order:
/// -0 is folded into +0 (they tie) and NaN maps to 0, below every number.
Value SelectEmitter::orderKeys(Value pooled) {
  OpFoldResult prefix = tensor::getMixedSize(b, loc, pooled, 2);
  Value out = empty({ofr(batch), ofr(heads), prefix}, i32);
  return generic(
      out.getType(), {pooled}, out, {map(3, {0, 1, 2}), map(3, {0, 1, 2})},
      {par, par, par}, [](OpBuilder &nb, Location l, ValueRange args) {
        auto c32 = [&](int32_t v) {
          return arith::ConstantOp::create(nb, l, nb.getI32IntegerAttr(v));
        };
        Value zero = arith::ConstantOp::create(nb, l, nb.getF32FloatAttr(0.0f));
        Value x = arith::AddFOp::create(nb, l, args[0], zero);
        Value bits = arith::BitcastOp::create(nb, l, nb.getI32Type(), x);
        Value negative = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt,
                                               bits, c32(0));
        Value flipped = arith::XOrIOp::create(nb, l, bits, c32(-1));
        Value signSet = arith::OrIOp::create(
            nb, l, bits, c32(std::numeric_limits<int32_t>::min()));
        Value key = arith::SelectOp::create(nb, l, negative, flipped, signSet);
        Value isNan = arith::CmpFOp::create(nb, l, arith::CmpFPredicate::UNO,
                                            args[0], args[0]);
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::SelectOp::create(nb, l, isNan, c32(0),
                                                      key)});
      });
}

/// The K-th largest key per row, found bit by bit from the top: a candidate
/// prefix survives when at least K keys are >= it. 32 vectorisable counting
/// passes instead of a sort.
Value SelectEmitter::threshold(Value keys) {
  SmallVector<OpFoldResult> rowShape = {ofr(batch), ofr(heads)};
  Value start = filled(rowShape, i32, cI32(0));
  Value lb = cIndex(0), ub = cIndex(32), step = cIndex(1);
  int32_t need = static_cast<int32_t>(keep);
  auto loop = scf::ForOp::create(
      b, loc, lb, ub, step, ValueRange{start},
      [&](OpBuilder &nb, Location l, Value iv, ValueRange iterArgs) {
        Value prefixKey = iterArgs[0];
        Value shift = arith::SubIOp::create(
            nb, l,
            arith::ConstantOp::create(nb, l, nb.getI32IntegerAttr(31)),
            arith::IndexCastOp::create(nb, l, nb.getI32Type(), iv));
        Value bit = arith::ShLIOp::create(
            nb, l, arith::ConstantOp::create(nb, l, nb.getI32IntegerAttr(1)),
            shift);
        Value zeros = linalg::FillOp::create(
                          nb, l,
                          ValueRange{arith::ConstantOp::create(
                              nb, l, nb.getI32IntegerAttr(0))},
                          ValueRange{tensor::EmptyOp::create(
                              nb, l, rowShape, nb.getI32Type())})
                          .getResult(0);
        Value count =
            linalg::GenericOp::create(
                nb, l, TypeRange{zeros.getType()}, ValueRange{keys, prefixKey},
                ValueRange{zeros},
                ArrayRef<AffineMap>{map(3, {0, 1, 2}), map(3, {0, 1}),
                                    map(3, {0, 1})},
                ArrayRef<IteratorType>{par, par, red},
                [bit](OpBuilder &bb, Location bl, ValueRange args) {
                  Value cand = arith::OrIOp::create(bb, bl, args[1], bit);
                  Value ge = arith::CmpIOp::create(
                      bb, bl, arith::CmpIPredicate::uge, args[0], cand);
                  Value one =
                      arith::ExtUIOp::create(bb, bl, bb.getI32Type(), ge);
                  linalg::YieldOp::create(
                      bb, bl,
                      ValueRange{arith::AddIOp::create(bb, bl, args[2], one)});
                })
                .getResult(0);
        // Updated in place so the loop-carried tensor stays one buffer.
        Value next =
            linalg::GenericOp::create(
                nb, l, TypeRange{prefixKey.getType()}, ValueRange{count},
                ValueRange{prefixKey},
                ArrayRef<AffineMap>{map(2, {0, 1}), map(2, {0, 1})},
                ArrayRef<IteratorType>{par, par},
                [bit, need](OpBuilder &bb, Location bl, ValueRange args) {
                  Value cand = arith::OrIOp::create(bb, bl, args[1], bit);
                  Value enough = arith::CmpIOp::create(
                      bb, bl, arith::CmpIPredicate::sge, args[0],
                      arith::ConstantOp::create(bb, bl,
                                                bb.getI32IntegerAttr(need)));
                  linalg::YieldOp::create(
                      bb, bl,
                      ValueRange{arith::SelectOp::create(bb, bl, enough, cand,
                                                         args[1])});
                })
                .getResult(0);
        scf::YieldOp::create(nb, l, ValueRange{next});
      });
  return loop.getResult(0);
}

/// K minus the number of keys strictly above the threshold: how many keys
/// equal to the threshold are kept (the lowest positions among them).
Value SelectEmitter::tiesNeeded(Value keys, Value thresh) {
  Value init = filled({ofr(batch), ofr(heads)}, i32, cI32(0));
  Value above = generic(
      init.getType(), {keys, thresh}, init,
      {map(3, {0, 1, 2}), map(3, {0, 1}), map(3, {0, 1})}, {par, par, red},
      [](OpBuilder &nb, Location l, ValueRange args) {
        Value gt = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ugt,
                                         args[0], args[1]);
        Value one = arith::ExtUIOp::create(nb, l, nb.getI32Type(), gt);
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::AddIOp::create(nb, l, args[2], one)});
      });
  int32_t need = static_cast<int32_t>(keep);
  Value out = empty({ofr(batch), ofr(heads)}, i32);
  return generic(out.getType(), {above}, out,
                 {map(2, {0, 1}), map(2, {0, 1})}, {par, par},
                 [need](OpBuilder &nb, Location l, ValueRange args) {
                   Value k = arith::ConstantOp::create(
                       nb, l, nb.getI32IntegerAttr(need));
                   linalg::YieldOp::create(
                       nb, l,
                       ValueRange{arith::SubIOp::create(nb, l, k, args[0])});
                 });
}

/// Walks each row in position order and writes the kept positions (and their
/// keys) densely. Every position is written at the current count and the
/// count advances only when it is kept, so later writes overwrite rejected
/// ones; the extra last slot absorbs writes after the K-th kept position.
std::pair<Value, Value> SelectEmitter::compact(Value keys, Value thresh,
                                               Value ties, Value prefix) {
  SmallVector<OpFoldResult> bufShape = {ofr(batch), ofr(heads),
                                        ofr(keep + 1)};
  Value posBuf = empty(bufShape, i64);
  Value keyBuf = empty(bufShape, i32);
  Value zero = cIndex(0), one = cIndex(1), numHeads = cIndex(heads);
  auto outer = scf::ForOp::create(
      b, loc, zero, cIndex(batch), one, ValueRange{posBuf, keyBuf},
      [&](OpBuilder &b1, Location l, Value bi, ValueRange bArgs) {
        auto inner = scf::ForOp::create(
            b1, l, zero, numHeads, one, bArgs,
            [&](OpBuilder &b2, Location l2, Value hi, ValueRange hArgs) {
              Value t = tensor::ExtractOp::create(b2, l2, thresh,
                                                  ValueRange{bi, hi});
              Value needTies = arith::IndexCastOp::create(
                  b2, l2, b2.getIndexType(),
                  tensor::ExtractOp::create(b2, l2, ties,
                                            ValueRange{bi, hi}));
              auto scan = scf::ForOp::create(
                  b2, l2, zero, prefix, one,
                  ValueRange{hArgs[0], hArgs[1], zero, zero},
                  [&](OpBuilder &b3, Location l3, Value j, ValueRange a) {
                    Value key = tensor::ExtractOp::create(
                        b3, l3, keys, ValueRange{bi, hi, j});
                    Value count = a[2], tiesTaken = a[3];
                    Value pos = arith::IndexCastOp::create(
                        b3, l3, b3.getI64Type(), j);
                    Value p = tensor::InsertOp::create(
                        b3, l3, pos, a[0], ValueRange{bi, hi, count});
                    Value kb = tensor::InsertOp::create(
                        b3, l3, key, a[1], ValueRange{bi, hi, count});
                    Value above = arith::CmpIOp::create(
                        b3, l3, arith::CmpIPredicate::ugt, key, t);
                    Value equal = arith::CmpIOp::create(
                        b3, l3, arith::CmpIPredicate::eq, key, t);
                    Value room = arith::CmpIOp::create(
                        b3, l3, arith::CmpIPredicate::ult, tiesTaken,
                        needTies);
                    Value tie = arith::AndIOp::create(b3, l3, equal, room);
                    Value take = arith::OrIOp::create(b3, l3, above, tie);
                    Value inc = arith::IndexCastOp::create(
                        b3, l3, b3.getIndexType(),
                        arith::ExtUIOp::create(b3, l3, b3.getI64Type(), take));
                    Value tieInc = arith::IndexCastOp::create(
                        b3, l3, b3.getIndexType(),
                        arith::ExtUIOp::create(b3, l3, b3.getI64Type(), tie));
                    scf::YieldOp::create(
                        b3, l3,
                        ValueRange{p, kb,
                                   arith::AddIOp::create(b3, l3, count, inc),
                                   arith::AddIOp::create(b3, l3, tiesTaken,
                                                         tieInc)});
                  });
              scf::YieldOp::create(
                  b2, l2,
                  ValueRange{scan.getResult(0), scan.getResult(1)});
            });
        scf::YieldOp::create(b1, l, inner.getResults());
      });
  SmallVector<OpFoldResult> offsets(3, ofr(0)), strides(3, ofr(1));
  SmallVector<OpFoldResult> sizes = {ofr(batch), ofr(heads), ofr(keep)};
  Value positions = tensor::ExtractSliceOp::create(
      b, loc, outer.getResult(0), offsets, sizes, strides);
  Value keptKeys = tensor::ExtractSliceOp::create(
      b, loc, outer.getResult(1), offsets, sizes, strides);
  return {positions, keptKeys};
}

/// Score order: rank[i] = #(kept e with a higher key) + #(e < i with an equal
/// key); positions are ascending, so equal keys keep position order. Then
/// scatter each kept position to its rank.
Value SelectEmitter::orderByScore(Value positions, Value keptKeys) {
  Value init = filled({ofr(batch), ofr(heads), ofr(keep)}, i32, cI32(0));
  Value rank = generic(
      init.getType(), {keptKeys, keptKeys}, init,
      {map(4, {0, 1, 2}), map(4, {0, 1, 3}), map(4, {0, 1, 2})},
      {par, par, par, red}, [](OpBuilder &nb, Location l, ValueRange args) {
        Value i = linalg::IndexOp::create(nb, l, 2);
        Value e = linalg::IndexOp::create(nb, l, 3);
        Value higher = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ugt,
                                             args[1], args[0]);
        Value equal = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                            args[1], args[0]);
        Value earlier =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult, e, i);
        Value before = arith::OrIOp::create(
            nb, l, higher, arith::AndIOp::create(nb, l, equal, earlier));
        Value one = arith::ExtUIOp::create(nb, l, nb.getI32Type(), before);
        linalg::YieldOp::create(
            nb, l, ValueRange{arith::AddIOp::create(nb, l, args[2], one)});
      });
  Value zero = cIndex(0), one = cIndex(1), numHeads = cIndex(heads),
        numKept = cIndex(keep);
  Value out = empty({ofr(batch), ofr(heads), ofr(keep)}, i64);
  auto loops = scf::ForOp::create(
      b, loc, zero, cIndex(batch), one, ValueRange{out},
      [&](OpBuilder &b1, Location l, Value bi, ValueRange bArgs) {
        auto hLoop = scf::ForOp::create(
            b1, l, zero, numHeads, one, bArgs,
            [&](OpBuilder &b2, Location l2, Value hi, ValueRange hArgs) {
              auto iLoop = scf::ForOp::create(
                  b2, l2, zero, numKept, one, hArgs,
                  [&](OpBuilder &b3, Location l3, Value i, ValueRange a) {
                    Value r = arith::IndexCastOp::create(
                        b3, l3, b3.getIndexType(),
                        tensor::ExtractOp::create(b3, l3, rank,
                                                  ValueRange{bi, hi, i}));
                    Value pos = tensor::ExtractOp::create(
                        b3, l3, positions, ValueRange{bi, hi, i});
                    scf::YieldOp::create(
                        b3, l3,
                        ValueRange{tensor::InsertOp::create(
                            b3, l3, pos, a[0], ValueRange{bi, hi, r})});
                  });
              scf::YieldOp::create(b2, l2, iLoop.getResults());
            });
        scf::YieldOp::create(b1, l, hLoop.getResults());
      });
  return loops.getResult(0);
}

/// [B, Hc, K] kept prefix positions ++ window positions P .. P+W-1.
Value SelectEmitter::appendWindow(Value prefixRows, Value prefix) {
  Value windowInit = empty({ofr(batch), ofr(heads), ofr(window)}, i64);
  Value windowRows = generic(
      windowInit.getType(), {}, windowInit, {map(3, {0, 1, 2})},
      {par, par, par}, [prefix](OpBuilder &nb, Location l, ValueRange) {
        Value t = linalg::IndexOp::create(nb, l, 2);
        Value pos = arith::AddIOp::create(nb, l, prefix, t);
        linalg::YieldOp::create(
            nb, l,
            ValueRange{arith::IndexCastOp::create(nb, l, nb.getI64Type(),
                                                  pos)});
      });
  Value all = empty({ofr(batch), ofr(heads), ofr(capacity)}, i64);
  SmallVector<OpFoldResult> strides(3, ofr(1));
  all = tensor::InsertSliceOp::create(
      b, loc, prefixRows, all, ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(0)},
      ArrayRef<OpFoldResult>{ofr(batch), ofr(heads), ofr(keep)}, strides);
  return tensor::InsertSliceOp::create(
      b, loc, windowRows, all,
      ArrayRef<OpFoldResult>{ofr(0), ofr(0), ofr(keep)},
      ArrayRef<OpFoldResult>{ofr(batch), ofr(heads), ofr(window)}, strides);
}

/// [B, Hc, L] = 0 .. L-1 (the short-prompt bypass keeps everything).
Value SelectEmitter::iota(OpFoldResult length) {
  Value init = empty({ofr(batch), ofr(heads), length}, i64);
  return generic(init.getType(), {}, init, {map(3, {0, 1, 2})},
                 {par, par, par}, [](OpBuilder &nb, Location l, ValueRange) {
                   Value j = linalg::IndexOp::create(nb, l, 2);
                   linalg::YieldOp::create(
                       nb, l,
                       ValueRange{arith::IndexCastOp::create(
                           nb, l, nb.getI64Type(), j)});
                 });
}

/// out[b, h, s, :] = source[b, kvhead(h), indices[b, h, s], :], an exact
/// copy of the row (no arithmetic touches the element).
Value SelectEmitter::gather(Value source, Value indices, OpFoldResult kept) {
  Value init = empty({ofr(batch), ofr(heads), kept, ofr(dim)}, elemTy);
  int64_t g = expand ? group : 1;
  return generic(
      init.getType(), {indices}, init,
      {map(4, {0, 1, 2}), map(4, {0, 1, 2, 3})}, {par, par, par, par},
      [source, g](OpBuilder &nb, Location l, ValueRange args) {
        Value bi = linalg::IndexOp::create(nb, l, 0);
        Value h = linalg::IndexOp::create(nb, l, 1);
        Value d = linalg::IndexOp::create(nb, l, 3);
        Value kv = h;
        if (g != 1)
          kv = arith::DivUIOp::create(
              nb, l, h, arith::ConstantIndexOp::create(nb, l, g));
        Value pos =
            arith::IndexCastOp::create(nb, l, nb.getIndexType(), args[0]);
        Value v = tensor::ExtractOp::create(nb, l, source,
                                            ValueRange{bi, kv, pos, d});
        linalg::YieldOp::create(nb, l, ValueRange{v});
      });
}

OpFoldResult SelectEmitter::prefixLength(OpFoldResult length) {
  if (std::optional<int64_t> l = getConstantIntValue(length))
    return ofr(*l - window);
  return Value(
      arith::SubIOp::create(b, loc, cast<Value>(length), cIndex(window)));
}

std::pair<Value, Value> SelectEmitter::scores(OpFoldResult length) {
  OpFoldResult prefixLen = prefixLength(length);
  Value logitsT = logits(length);
  auto [rowMax, rowSum] = rowStatistics(logitsT, prefixLen);
  Value aggregated =
      aggregateHeads(votes(logitsT, rowMax, rowSum, prefixLen));
  return {aggregated, pool(aggregated)};
}

SmallVector<Value> SelectEmitter::emitSelection(OpFoldResult length) {
  Value prefix =
      getValueOrCreateConstantIndexOp(b, loc, prefixLength(length));
  Value keys = orderKeys(scores(length).second);
  Value thresh = threshold(keys);
  Value ties = tiesNeeded(keys, thresh);
  auto [positions, keptKeys] = compact(keys, thresh, ties, prefix);
  if (p.order == Order::score)
    positions = orderByScore(positions, keptKeys);
  Value indices = appendWindow(positions, prefix);
  return {gather(p.keys, indices, ofr(capacity)),
          gather(p.values, indices, ofr(capacity)), indices};
}

SmallVector<Value> SelectEmitter::emitBypass(OpFoldResult length) {
  Value indices = iota(length);
  OpFoldResult kept = tensor::getMixedSize(b, loc, indices, 2);
  return {gather(p.keys, indices, kept),
          gather(p.values, indices, kept), indices};
}

SmallVector<Value> SelectEmitter::castToResults(SmallVector<Value> values) {
  for (auto [v, ty] : llvm::zip(values, p.resultTypes))
    if (v.getType() != ty)
      v = tensor::CastOp::create(b, loc, ty, v);
  return values;
}

Value SelectEmitter::checkedLength() {
  auto kTy = cast<RankedTensorType>(p.keys.getType());
  Value length = kTy.isDynamicDim(2)
                     ? Value(tensor::DimOp::create(b, loc, p.keys, 2))
                     : cIndex(kTy.getDimSize(2));
  if (p.values) {
    Value valuesLength = tensor::DimOp::create(b, loc, p.values, 2);
    Value same = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                       length, valuesLength);
    cf::AssertOp::create(
        b, loc, same,
        (p.opName + ": prompt length of 'values' differs from 'keys'").str());
  }
  Value longEnough = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::sge, length, cIndex(window));
  cf::AssertOp::create(
      b, loc, longEnough,
      llvm::formatv("{0}: prompt length (keys dim 2) is shorter than window "
                    "{1}",
                    p.opName, window)
          .str());
  return length;
}

static bool hasStaticLength(Value v) {
  return !v || !cast<RankedTensorType>(v.getType()).isDynamicDim(2);
}

SmallVector<Value> SelectEmitter::emitScores() {
  if (hasStaticLength(p.keys)) {
    auto [votesT, pooled] = scores(
        ofr(cast<RankedTensorType>(p.keys.getType()).getDimSize(2)));
    return castToResults({votesT, pooled});
  }
  auto [votesT, pooled] = scores(checkedLength());
  return castToResults({votesT, pooled});
}

SmallVector<Value> SelectEmitter::emit() {
  if (hasStaticLength(p.keys) && hasStaticLength(p.values)) {
    int64_t length = cast<RankedTensorType>(p.keys.getType()).getDimSize(2);
    return castToResults(length < capacity ? emitBypass(ofr(length))
                                           : emitSelection(ofr(length)));
  }
  // Dynamic prompt length: check at run time what the verifier could not,
  // then branch between the bypass and the selection.
  Value length = checkedLength();
  Value isShort = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                        length, cIndex(capacity));
  auto ifOp = scf::IfOp::create(b, loc, p.resultTypes, isShort,
                                /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(b, loc, castToResults(emitBypass(length)));
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, loc, castToResults(emitSelection(length)));
  }
  return SmallVector<Value>(ifOp.getResults());
}

struct SelectOpLowering : OpRewritePattern<SelectOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SelectOp op,
                                PatternRewriter &rewriter) const override {
    SelectionParams params{op.getQueries(),
                           op.getKeys(),
                           op.getValues(),
                           static_cast<int64_t>(op.getWindow()),
                           static_cast<int64_t>(op.getCapacity()),
                           static_cast<int64_t>(op.getKernel()),
                           op.getPooling(),
                           op.getGqa(),
                           op.getOrder(),
                           op.getEffectiveScale(),
                           op->getResultTypes(),
                           op->getName().getStringRef()};
    SelectEmitter emitter(params, rewriter, op.getLoc());
    rewriter.replaceOp(op, emitter.emit());
    return success();
  }
};

struct ScoreOpLowering : OpRewritePattern<ScoreOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ScoreOp op,
                                PatternRewriter &rewriter) const override {
    // No selection happens: capacity only needs to exceed the window.
    int64_t window = op.getWindow();
    SelectionParams params{op.getQueries(),
                           op.getKeys(),
                           Value(),
                           window,
                           window + 1,
                           static_cast<int64_t>(op.getKernel()),
                           op.getPooling(),
                           op.getGqa(),
                           Order::position,
                           op.getEffectiveScale(),
                           op->getResultTypes(),
                           op->getName().getStringRef()};
    SelectEmitter emitter(params, rewriter, op.getLoc());
    rewriter.replaceOp(op, emitter.emitScores());
    return success();
  }
};

struct ConvertSnapKVToLinalgPass
    : snapkv::impl::ConvertSnapKVToLinalgBase<ConvertSnapKVToLinalgPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateSnapKVToLinalgPatterns(patterns);
    // Only snapkv ops are rewritten; nothing else is folded here.
    GreedyRewriteConfig config;
    config.setStrictness(GreedyRewriteStrictness::ExistingOps);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns),
                                     config)))
      return signalPassFailure();
    WalkResult leftover = getOperation()->walk([](Operation *op) {
      if (!isa<SelectOp, ScoreOp>(op))
        return WalkResult::advance();
      op->emitError() << op->getName() << " could not be lowered to linalg";
      return WalkResult::interrupt();
    });
    if (leftover.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace

void mlir::snapkv::populateSnapKVToLinalgPatterns(RewritePatternSet &patterns) {
  patterns.add<SelectOpLowering, ScoreOpLowering>(patterns.getContext());
}
