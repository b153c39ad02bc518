//===- AdaptiveDecomposition.cpp - snapkv.select_adaptive as stage ops ----===//
//
// snapkv.select_adaptive = snapkv.score -> the floor (snapkv.top_positions
// per head; those positions raised to +inf) -> snapkv.top_positions over the
// layer's flattened [Hc x P] scores -> linalg ops that count each head's
// chosen positions and place its rows -> snapkv.gather of the keys and of
// the values from their flattened [Hkv x L] rows.
//
// Pooled scores are sums of softmax probabilities, finite or NaN, so +inf
// ranks the floor positions above every other one: the flattened top
// Hc x K takes them all, then the best of the rest. The flat index h x P + j
// orders exact ties by head, then position (docs/semantics.md, "Budgets"),
// and ascending flat indices list each head's positions ascending.
//
//===----------------------------------------------------------------------===//

#include "DecompositionUtils.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

using namespace mlir;
using namespace mlir::snapkv;

namespace {

using utils::IteratorType;
constexpr IteratorType par = IteratorType::parallel;
constexpr IteratorType red = IteratorType::reduction;

class AdaptiveDecomposition {
public:
  AdaptiveDecomposition(OpBuilder &b, SelectAdaptiveOp op)
      : b(b), op(op), loc(op.getLoc()), i64(b.getI64Type()) {
    batch = op.getQueries().getType().getDimSize(0);
    heads = op.getSelectionHeads();
    headsPerKv = heads / op.getKeys().getType().getDimSize(1);
    window = op.getWindowAttr().getInt();
    capacity = op.getCapacityAttr().getInt();
    keep = capacity - window;
    floor = op.getFloorAttr().getInt();
  }

  SmallVector<Value> run() {
    OpFoldResult length = snapkv::detail::promptLength(
        b, loc, op.getKeys(), op.getValues(), window, "snapkv.select_adaptive",
        heads, "heads x prompt length must be below 2^31 - 1");
    return snapkv::detail::bypassOrSelect(
        b, loc, op->getResultTypes(), length, capacity,
        [&](OpFoldResult l) { return bypass(l); },
        [&](OpFoldResult l) { return selection(l); });
  }

private:
  Value cIndex(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value cI64(OpBuilder &nb, Location l, int64_t v) {
    return arith::ConstantIntOp::create(nb, l, i64, v);
  }
  Value asI64(OpFoldResult v) {
    if (std::optional<int64_t> c = getConstantIntValue(v))
      return cI64(b, loc, *c);
    return arith::IndexCastOp::create(b, loc, i64, cast<Value>(v));
  }
  Value asIndex(OpBuilder &nb, Location l, Value v) {
    return arith::IndexCastOp::create(nb, l, nb.getIndexType(), v);
  }
  Value indexI64(OpBuilder &nb, Location l, unsigned dim) {
    return arith::IndexCastOp::create(nb, l, i64,
                                      linalg::IndexOp::create(nb, l, dim));
  }
  AffineMap map(unsigned numDims, ArrayRef<unsigned> dims) {
    SmallVector<AffineExpr> exprs;
    for (unsigned d : dims)
      exprs.push_back(b.getAffineDimExpr(d));
    return AffineMap::get(numDims, 0, exprs, b.getContext());
  }
  /// The `sizes` of `source` at `offsets` (unit strides) as `type`.
  Value slice(RankedTensorType type, Value source, ArrayRef<int64_t> offsets,
              ArrayRef<int64_t> sizes) {
    auto attrs = [&](ArrayRef<int64_t> values) {
      return llvm::map_to_vector(
          values, [&](int64_t v) -> OpFoldResult { return b.getIndexAttr(v); });
    };
    return tensor::ExtractSliceOp::create(
        b, loc, type, source, attrs(offsets), attrs(sizes),
        attrs(SmallVector<int64_t>(offsets.size(), 1)));
  }
  /// A new [shape] x i64 tensor of zeros.
  Value zeros(ArrayRef<int64_t> shape) {
    Value empty = tensor::EmptyOp::create(b, loc, shape, i64);
    return linalg::FillOp::create(b, loc, cI64(b, loc, 0), empty).getResult(0);
  }
  /// `op` with one result per output, the body yielding `body`'s values.
  Operation *
  generic(TypeRange types, ValueRange ins, ValueRange outs,
          ArrayRef<AffineMap> maps, ArrayRef<IteratorType> iters,
          function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange)>
              body) {
    return linalg::GenericOp::create(
        b, loc, types, ins, outs, maps, iters,
        [&](OpBuilder &nb, Location l, ValueRange args) {
          linalg::YieldOp::create(nb, l, body(nb, l, args));
        });
  }

  /// Whether score `a` ranks above `b` (NaN below every number) and whether
  /// they tie (-0 == +0, NaN == NaN), as snapkv.top_positions ranks them.
  Value ranksAbove(OpBuilder &nb, Location l, Value a, Value bv) {
    Value aNumber =
        arith::CmpFOp::create(nb, l, arith::CmpFPredicate::ORD, a, a);
    Value bNaN =
        arith::CmpFOp::create(nb, l, arith::CmpFPredicate::UNO, bv, bv);
    Value greater =
        arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OGT, a, bv);
    return arith::AndIOp::create(nb, l, aNumber,
                                 arith::OrIOp::create(nb, l, bNaN, greater));
  }
  Value ties(OpBuilder &nb, Location l, Value a, Value bv) {
    Value equal =
        arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, a, bv);
    Value bothNaN = arith::AndIOp::create(
        nb, l, arith::CmpFOp::create(nb, l, arith::CmpFPredicate::UNO, a, a),
        arith::CmpFOp::create(nb, l, arith::CmpFPredicate::UNO, bv, bv));
    return arith::OrIOp::create(nb, l, equal, bothNaN);
  }

  /// `pooled` with each head's best `floor` positions raised to +inf. A
  /// head's floor is every position that ranks above its floor's last score
  /// `m`, and those tying with `m` up to the last one the floor took (ties go
  /// to the lower position): elementwise ops, no scatter.
  Value raiseFloor(Value pooled) {
    Value init = tensor::EmptyOp::create(
        b, loc, ArrayRef<int64_t>{batch, heads, floor + 1}, i64);
    // top_positions appends a window; its last position (P) is not read.
    Value best =
        TopPositionsOp::create(b, loc, init.getType(), pooled, init,
                               b.getI64IntegerAttr(1),
                               b.getI64IntegerAttr(floor + 1), OrderAttr())
            .getResult();
    Value floorPositions =
        slice(RankedTensorType::get({batch, heads, floor}, i64), best,
              {0, 0, 0}, {batch, heads, floor});
    Type f32 = b.getF32Type();
    auto scoreAt = [&](OpBuilder &nb, Location l, Value position) -> Value {
      return tensor::ExtractOp::create(
          nb, l, pooled,
          ValueRange{linalg::IndexOp::create(nb, l, 0),
                     linalg::IndexOp::create(nb, l, 1),
                     asIndex(nb, l, position)});
    };
    auto filled = [&](Type type, TypedAttr value) {
      Value empty = tensor::EmptyOp::create(
          b, loc, ArrayRef<int64_t>{batch, heads}, type);
      Value constant = arith::ConstantOp::create(b, loc, value);
      return linalg::FillOp::create(b, loc, constant, empty).getResult(0);
    };
    auto rowTy = [&](Type type) {
      return RankedTensorType::get({batch, heads}, type);
    };
    // m: the lowest-ranked score of the floor.
    Value last =
        generic({rowTy(f32)}, {floorPositions},
                {filled(f32, b.getF32FloatAttr(
                                 std::numeric_limits<float>::infinity()))},
                {map(3, {0, 1, 2}), map(3, {0, 1})}, {par, par, red},
                [&](OpBuilder &nb, Location l, ValueRange args) {
                  Value x = scoreAt(nb, l, args[0]);
                  return SmallVector<Value>{arith::SelectOp::create(
                      nb, l, ranksAbove(nb, l, args[1], x), x, args[1])};
                })
            ->getResult(0);
    // The last position of the floor whose score ties with m.
    Value lastTied =
        generic({rowTy(i64)}, {floorPositions, last},
                {filled(i64, b.getI64IntegerAttr(-1))},
                {map(3, {0, 1, 2}), map(3, {0, 1}), map(3, {0, 1})},
                {par, par, red},
                [&](OpBuilder &nb, Location l, ValueRange args) {
                  Value tied = ties(nb, l, scoreAt(nb, l, args[0]), args[1]);
                  Value later = arith::MaxSIOp::create(nb, l, args[2], args[0]);
                  return SmallVector<Value>{
                      arith::SelectOp::create(nb, l, tied, later, args[2])};
                })
            ->getResult(0);
    auto scoresTy = cast<RankedTensorType>(pooled.getType());
    SmallVector<Value> dynamic;
    if (scoresTy.isDynamicDim(2))
      dynamic.push_back(tensor::DimOp::create(b, loc, pooled, 2));
    Value raisedInit = tensor::EmptyOp::create(b, loc, scoresTy, dynamic);
    return generic(
               {scoresTy}, {pooled, last, lastTied}, {raisedInit},
               {map(3, {0, 1, 2}), map(3, {0, 1}), map(3, {0, 1}),
                map(3, {0, 1, 2})},
               {par, par, par},
               [&](OpBuilder &nb, Location l, ValueRange args) {
                 Value x = args[0];
                 Value position = indexI64(nb, l, 2);
                 Value inFloor = arith::OrIOp::create(
                     nb, l, ranksAbove(nb, l, x, args[1]),
                     arith::AndIOp::create(
                         nb, l, ties(nb, l, x, args[1]),
                         arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sle,
                                               position, args[2])));
                 Value inf = arith::ConstantOp::create(
                     nb, l,
                     nb.getF32FloatAttr(
                         std::numeric_limits<float>::infinity()));
                 return SmallVector<Value>{
                     arith::SelectOp::create(nb, l, inFloor, inf, x)};
               })
        ->getResult(0);
  }

  SmallVector<Value> selection(OpFoldResult length) {
    ScoreOp score = snapkv::detail::createScore(
        b, loc, op.getQueries(), op.getKeys(), length, op.getWindowAttr(),
        op.getKernelAttr(), op.getPoolingAttr(), op.getGqaAttr(),
        op.getScaleAttr(), op.getScoring());
    Value pooled = score.getPooled();
    if (floor > 0)
      pooled = raiseFloor(pooled);

    // The layer's scores as one row of Hc x P (head-major).
    int64_t prefix = cast<RankedTensorType>(pooled.getType()).getDimSize(2);
    int64_t flatSize =
        ShapedType::isDynamic(prefix) ? ShapedType::kDynamic : heads * prefix;
    Type f32 = b.getF32Type();
    Value rows = tensor::CollapseShapeOp::create(
        b, loc, RankedTensorType::get({batch, flatSize}, f32), pooled,
        SmallVector<ReassociationIndices>{{0}, {1, 2}});
    OpFoldResult flatExtent =
        ShapedType::isDynamic(flatSize)
            ? OpFoldResult(tensor::DimOp::create(b, loc, rows, 1).getResult())
            : b.getIndexAttr(flatSize);
    Value flat = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get({batch, 1, flatSize}, f32), rows,
        SmallVector<ReassociationIndices>{{0, 1}, {2}},
        ArrayRef<OpFoldResult>{b.getIndexAttr(batch), b.getIndexAttr(1),
                               flatExtent});
    int64_t budget = heads * keep;
    Value init = tensor::EmptyOp::create(
        b, loc, ArrayRef<int64_t>{batch, 1, budget + 1}, i64);
    Value top = TopPositionsOp::create(
                    b, loc, init.getType(), flat, init, b.getI64IntegerAttr(1),
                    b.getI64IntegerAttr(budget + 1), OrderAttr())
                    .getResult();
    // The budget's flat indices, ascending (the appended window dropped).
    Value chosen = slice(RankedTensorType::get({batch, budget}, i64), top,
                         {0, 0, 0}, {batch, 1, budget});

    Value prefix64 = asI64(
        prefix == ShapedType::kDynamic
            ? OpFoldResult(arith::SubIOp::create(b, loc, cast<Value>(length),
                                                 cIndex(window))
                               .getResult())
            : b.getIndexAttr(prefix));
    // counts[b, h]: the chosen flat indices in head h's span.
    Value counts =
        generic({RankedTensorType::get({batch, heads}, i64)}, {chosen},
                {zeros({batch, heads})}, {map(3, {0, 2}), map(3, {0, 1})},
                {par, par, red},
                [&](OpBuilder &nb, Location l, ValueRange args) {
                  Value head = arith::DivUIOp::create(nb, l, args[0], prefix64);
                  Value mine =
                      arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                            head, indexI64(nb, l, 1));
                  Value one = arith::ExtUIOp::create(nb, l, i64, mine);
                  return SmallVector<Value>{
                      arith::AddIOp::create(nb, l, args[1], one)};
                })
            ->getResult(0);
    // offsets[b, h]: the rows of the heads before h (their positions and
    // windows).
    Value offsets = generic({RankedTensorType::get({batch, heads + 1}, i64)},
                            {counts}, {zeros({batch, heads + 1})},
                            {map(3, {0, 2}), map(3, {0, 1})}, {par, par, red},
                            [&](OpBuilder &nb, Location l, ValueRange args) {
                              Value before = arith::CmpIOp::create(
                                  nb, l, arith::CmpIPredicate::ult,
                                  indexI64(nb, l, 2), indexI64(nb, l, 1));
                              Value rowsOfHead = arith::AddIOp::create(
                                  nb, l, args[0], cI64(nb, l, window));
                              Value add = arith::SelectOp::create(
                                  nb, l, before, rowsOfHead, cI64(nb, l, 0));
                              return SmallVector<Value>{
                                  arith::AddIOp::create(nb, l, args[1], add)};
                            })
                        ->getResult(0);
    return placeRows(top, counts, offsets, prefix64, length);
  }

  /// Each row's position and head from the chosen flat indices (`top`,
  /// [B, 1, budget + 1]): head h's rows are its counts[h] chosen positions,
  /// then its window.
  SmallVector<Value> placeRows(Value top, Value counts, Value offsets,
                               Value prefix64, OpFoldResult length) {
    int64_t total = heads * capacity;
    Value ends = slice(RankedTensorType::get({batch, heads}, i64), offsets,
                       {0, 1}, {batch, heads});
    // The head of row s: how many heads end at or before s.
    Value rowHead =
        generic(
            {RankedTensorType::get({batch, total}, i64)}, {ends},
            {zeros({batch, total})}, {map(3, {0, 2}), map(3, {0, 1})},
            {par, par, red},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              Value past =
                  arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge,
                                        indexI64(nb, l, 1), args[0]);
              return SmallVector<Value>{arith::AddIOp::create(
                  nb, l, args[1], arith::ExtUIOp::create(nb, l, i64, past))};
            })
            ->getResult(0);
    Value length64 = asI64(length);
    auto rowTy = RankedTensorType::get({batch, total}, i64);
    Operation *placed = generic(
        {rowTy, rowTy}, {rowHead},
        {tensor::EmptyOp::create(b, loc, rowTy.getShape(), i64),
         tensor::EmptyOp::create(b, loc, rowTy.getShape(), i64)},
        {map(2, {0, 1}), map(2, {0, 1}), map(2, {0, 1})}, {par, par},
        [&](OpBuilder &nb, Location l, ValueRange args) {
          Value head = args[0];
          Value bi = linalg::IndexOp::create(nb, l, 0);
          Value headIndex = asIndex(nb, l, head);
          Value start = tensor::ExtractOp::create(nb, l, offsets,
                                                  ValueRange{bi, headIndex});
          Value count = tensor::ExtractOp::create(nb, l, counts,
                                                  ValueRange{bi, headIndex});
          Value s = indexI64(nb, l, 1);
          Value r = arith::SubIOp::create(nb, l, s, start);
          Value isChosen =
              arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt, r, count);
          // Row s of a chosen position is chosen[s - h x W] (the windows of
          // the heads before it precede it); a window row reads nothing.
          Value flatSlot = arith::SubIOp::create(
              nb, l, s,
              arith::MulIOp::create(nb, l, head, cI64(nb, l, window)));
          flatSlot = arith::SelectOp::create(nb, l, isChosen, flatSlot,
                                             cI64(nb, l, 0));
          Value flatIndex = tensor::ExtractOp::create(
              nb, l, top,
              ValueRange{bi, arith::ConstantIndexOp::create(nb, l, 0),
                         asIndex(nb, l, flatSlot)});
          Value chosenPosition = arith::SubIOp::create(
              nb, l, flatIndex, arith::MulIOp::create(nb, l, head, prefix64));
          Value windowPosition = arith::AddIOp::create(
              nb, l, prefix64, arith::SubIOp::create(nb, l, r, count));
          Value position = arith::SelectOp::create(
              nb, l, isChosen, chosenPosition, windowPosition);
          return SmallVector<Value>{position,
                                    sourceRow(nb, l, head, position, length64)};
        });
    return gathered(placed->getResult(0), placed->getResult(1),
                    b.getIndexAttr(total), offsets, length);
  }

  /// The row of the flattened [Hkv x L] source that head `head` reads at
  /// `position`.
  Value sourceRow(OpBuilder &nb, Location l, Value head, Value position,
                  Value length64) {
    Value kvHead = arith::DivUIOp::create(nb, l, head, cI64(nb, l, headsPerKv));
    return arith::AddIOp::create(
        nb, l, arith::MulIOp::create(nb, l, kvHead, length64), position);
  }

  /// L < capacity: every head keeps every position.
  SmallVector<Value> bypass(OpFoldResult length) {
    std::optional<int64_t> staticLength = getConstantIntValue(length);
    int64_t total = staticLength ? heads * *staticLength : ShapedType::kDynamic;
    SmallVector<Value> extents;
    OpFoldResult rows = b.getIndexAttr(total);
    if (!staticLength) {
      Value t =
          arith::MulIOp::create(b, loc, cast<Value>(length), cIndex(heads));
      extents.push_back(t);
      rows = t;
    }
    Value length64 = asI64(length);
    auto rowTy = RankedTensorType::get({batch, total}, i64);
    // A linalg.generic over the indices (not tensor.generate, which IREE does
    // not take with a dynamic shape).
    auto generate =
        [&](RankedTensorType type, ValueRange dynamic,
            function_ref<Value(OpBuilder &, Location, ValueRange)> element) {
          Value init = tensor::EmptyOp::create(b, loc, type, dynamic);
          return generic({type}, {}, {init}, {map(2, {0, 1})}, {par, par},
                         [&](OpBuilder &nb, Location l, ValueRange) {
                           SmallVector<Value> ivs = {
                               linalg::IndexOp::create(nb, l, 0),
                               linalg::IndexOp::create(nb, l, 1)};
                           return SmallVector<Value>{element(nb, l, ivs)};
                         })
              ->getResult(0);
        };
    auto rowOf = [&](OpBuilder &nb, Location l, Value s) {
      Value s64 = arith::IndexCastOp::create(nb, l, i64, s);
      return std::pair{
          arith::DivUIOp::create(nb, l, s64, length64).getResult(),
          arith::RemUIOp::create(nb, l, s64, length64).getResult()};
    };
    Value indices = generate(rowTy, extents,
                             [&](OpBuilder &nb, Location l, ValueRange ivs) {
                               return rowOf(nb, l, ivs[1]).second;
                             });
    Value source = generate(rowTy, extents,
                            [&](OpBuilder &nb, Location l, ValueRange ivs) {
                              auto [head, position] = rowOf(nb, l, ivs[1]);
                              return sourceRow(nb, l, head, position, length64);
                            });
    Value offsets = generate(
        RankedTensorType::get({batch, heads + 1}, i64), {},
        [&](OpBuilder &nb, Location l, ValueRange ivs) -> Value {
          return arith::MulIOp::create(
              nb, l, arith::IndexCastOp::create(nb, l, i64, ivs[1]), length64);
        });
    return gathered(indices, source, rows, offsets, length);
  }

  /// keys, values, indices, offsets: the rows at `sourceRows` of the keys
  /// and values flattened to [B, 1, Hkv x L, D].
  SmallVector<Value> gathered(Value indices, Value sourceRows,
                              OpFoldResult rows, Value offsets,
                              OpFoldResult length) {
    std::optional<int64_t> staticRows = getConstantIntValue(rows);
    int64_t rowsDim = staticRows.value_or(ShapedType::kDynamic);
    Value where = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get({batch, 1, rowsDim}, i64), sourceRows,
        SmallVector<ReassociationIndices>{{0, 1}, {2}},
        ArrayRef<OpFoldResult>{b.getIndexAttr(batch), b.getIndexAttr(1), rows});
    SmallVector<Value> results;
    for (Value source : {op.getKeys(), op.getValues()}) {
      auto srcTy = cast<RankedTensorType>(source.getType());
      int64_t kvHeads = srcTy.getDimSize(1), dim = srcTy.getDimSize(3);
      std::optional<int64_t> staticLength = getConstantIntValue(length);
      int64_t flatRows =
          staticLength ? kvHeads * *staticLength : ShapedType::kDynamic;
      Type elem = srcTy.getElementType();
      Value collapsed = tensor::CollapseShapeOp::create(
          b, loc, RankedTensorType::get({batch, flatRows, dim}, elem), source,
          SmallVector<ReassociationIndices>{{0}, {1, 2}, {3}});
      OpFoldResult flatExtent =
          staticLength
              ? OpFoldResult(b.getIndexAttr(flatRows))
              : OpFoldResult(
                    tensor::DimOp::create(b, loc, collapsed, 1).getResult());
      Value flat = tensor::ExpandShapeOp::create(
          b, loc, RankedTensorType::get({batch, 1, flatRows, dim}, elem),
          collapsed, SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}},
          ArrayRef<OpFoldResult>{b.getIndexAttr(batch), b.getIndexAttr(1),
                                 flatExtent, b.getIndexAttr(dim)});
      SmallVector<OpFoldResult> shape = {
          b.getIndexAttr(batch), b.getIndexAttr(1), rows, b.getIndexAttr(dim)};
      Value init = tensor::EmptyOp::create(b, loc, shape, elem);
      Value gathered =
          GatherOp::create(b, loc, init.getType(), flat, where, init);
      results.push_back(tensor::CollapseShapeOp::create(
          b, loc, RankedTensorType::get({batch, rowsDim, dim}, elem), gathered,
          SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}}));
    }
    results.push_back(indices);
    results.push_back(offsets);
    return results;
  }

  OpBuilder &b;
  SelectAdaptiveOp op;
  Location loc;
  Type i64;
  int64_t batch, heads, headsPerKv, window, capacity, keep, floor;
};

} // namespace

FailureOr<SmallVector<Value>>
SelectAdaptiveOp::decomposeOperation(OpBuilder &b) {
  return AdaptiveDecomposition(b, *this).run();
}
