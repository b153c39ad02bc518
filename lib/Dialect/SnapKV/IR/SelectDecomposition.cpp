//===- SelectDecomposition.cpp - snapkv.select as its stage ops -----------===//
//
// snapkv.select = snapkv.score (votes, pooled) -> snapkv.top_positions ->
// snapkv.gather of the keys and of the values, each destination-style and
// tileable on its own. The short-prompt bypass keeps every position
// (tensor.generate of 0 .. L-1, then the same gathers); with a dynamic
// prompt length an scf.if picks the branch at run time after the checks the
// whole op's lowering makes. The stages compute exactly what the whole op
// does (same scoring, same pooled scores, same search), so indices and rows
// are bit-identical.
//
//===----------------------------------------------------------------------===//

#include "DecompositionUtils.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::snapkv;

namespace {

class Decomposition {
public:
  Decomposition(OpBuilder &b, SelectOp op)
      : b(b), op(op), loc(op.getLoc()),
        indicesTy(cast<RankedTensorType>(op.getIndices().getType())),
        rowsTy(cast<RankedTensorType>(op.getSelectedKeys().getType())) {}

  SmallVector<Value> run() {
    // The run-time checks of the whole op's lowering, with its messages.
    OpFoldResult length = snapkv::detail::promptLength(
        b, loc, op.getKeys(), op.getValues(), op.getWindow(), "snapkv.select",
        /*factor=*/1, "prompt length (keys dim 2) must be below 2^31 - 1");
    return snapkv::detail::bypassOrSelect(
        b, loc, op->getResultTypes(), length, op.getCapacity(),
        [&](OpFoldResult l) { return bypass(l); },
        [&](OpFoldResult l) { return selection(l); });
  }

private:
  /// The kept rows of keys and values for `indices` ([B, Hc, S]).
  SmallVector<Value> gathered(Value indices, OpFoldResult slots) {
    SmallVector<Value> results;
    for (Value source : {op.getKeys(), op.getValues()}) {
      SmallVector<OpFoldResult> shape = {b.getIndexAttr(rowsTy.getDimSize(0)),
                                         b.getIndexAttr(rowsTy.getDimSize(1)),
                                         slots,
                                         b.getIndexAttr(rowsTy.getDimSize(3))};
      Value init =
          tensor::EmptyOp::create(b, loc, shape, rowsTy.getElementType());
      results.push_back(
          GatherOp::create(b, loc, init.getType(), source, indices, init));
    }
    results.push_back(indices);
    return results;
  }

  SmallVector<Value> selection(OpFoldResult length) {
    RankedTensorType qTy = op.getQueries().getType();
    ScoreOp score = snapkv::detail::createScore(
        b, loc, op.getQueries(), op.getKeys(), length, op.getWindowAttr(),
        op.getKernelAttr(), op.getPoolingAttr(), op.getGqaAttr(),
        op.getScaleAttr(), op.getScoring(), op.getBlockAttr());
    int64_t capacity = op.getCapacity();
    Value init = tensor::EmptyOp::create(
        b, loc,
        ArrayRef<int64_t>{qTy.getDimSize(0), indicesTy.getDimSize(1), capacity},
        b.getI64Type());
    auto top = TopPositionsOp::create(b, loc, init.getType(), score.getPooled(),
                                      init, op.getWindowAttr(),
                                      op.getCapacityAttr(), op.getOrderAttr());
    return gathered(top.getResult(), b.getIndexAttr(capacity));
  }

  /// L < capacity: every position, in order.
  SmallVector<Value> bypass(OpFoldResult length) {
    std::optional<int64_t> staticLength = getConstantIntValue(length);
    auto type =
        RankedTensorType::get({indicesTy.getDimSize(0), indicesTy.getDimSize(1),
                               staticLength.value_or(ShapedType::kDynamic)},
                              b.getI64Type());
    SmallVector<Value> extents;
    if (!staticLength)
      extents.push_back(cast<Value>(length));
    auto all = tensor::GenerateOp::create(
        b, loc, type, extents, [](OpBuilder &nb, Location l, ValueRange ivs) {
          tensor::YieldOp::create(
              nb, l,
              arith::IndexCastOp::create(nb, l, nb.getI64Type(), ivs[2])
                  .getResult());
        });
    return gathered(all, length);
  }

  OpBuilder &b;
  SelectOp op;
  Location loc;
  RankedTensorType indicesTy, rowsTy;
};

} // namespace

FailureOr<SmallVector<Value>> SelectOp::decomposeOperation(OpBuilder &b) {
  // `recent` and `random` rank by position or hash, `keydiff` by the keys
  // alone: snapkv.score computes none of them.
  if (getScoring() == Scoring::recent || getScoring() == Scoring::random ||
      getScoring() == Scoring::keydiff)
    return failure();
  return Decomposition(b, *this).run();
}
