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

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/Support/FormatVariadic.h"

#include <limits>

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
    RankedTensorType kTy = op.getKeys().getType();
    RankedTensorType vTy = op.getValues().getType();
    int64_t capacity = op.getCapacity();
    if (!kTy.isDynamicDim(2) && !vTy.isDynamicDim(2)) {
      int64_t length = kTy.getDimSize(2);
      return castToResults(length < capacity
                               ? bypass(b.getIndexAttr(length))
                               : selection(b.getIndexAttr(length)));
    }
    Value length = checkedLength();
    Value isShort =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, length,
                              arith::ConstantIndexOp::create(b, loc, capacity));
    auto ifOp = scf::IfOp::create(b, loc, op->getResultTypes(), isShort,
                                  /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(b, loc, castToResults(bypass(length)));
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, loc, castToResults(selection(length)));
    return SmallVector<Value>(ifOp.getResults());
  }

private:
  /// The run-time checks of the whole op's lowering, with its messages.
  Value checkedLength() {
    Value length = tensor::DimOp::create(b, loc, op.getKeys(), 2);
    Value valuesLength = tensor::DimOp::create(b, loc, op.getValues(), 2);
    auto check = [&](arith::CmpIPredicate pred, Value lhs, int64_t rhs,
                     const std::string &message) {
      Value ok = arith::CmpIOp::create(
          b, loc, pred, lhs, arith::ConstantIndexOp::create(b, loc, rhs));
      cf::AssertOp::create(b, loc, ok, message);
    };
    cf::AssertOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, length,
                              valuesLength),
        "snapkv.select: prompt length of 'values' differs from 'keys'");
    check(arith::CmpIPredicate::sge, length, op.getWindow(),
          llvm::formatv("snapkv.select: prompt length (keys dim 2) is shorter "
                        "than window {0}",
                        op.getWindow())
              .str());
    check(arith::CmpIPredicate::slt, length,
          std::numeric_limits<int32_t>::max(),
          "snapkv.select: prompt length (keys dim 2) must be below 2^31 - 1");
    return length;
  }

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
    int64_t window = op.getWindow();
    RankedTensorType qTy = op.getQueries().getType();
    auto scoresTy = ScoreOp::getResultType(qTy, op.getKeys().getType(), window,
                                           op.getGqa());
    SmallVector<Value> prefix;
    if (scoresTy.isDynamicDim(2))
      prefix.push_back(arith::SubIOp::create(
          b, loc, cast<Value>(length),
          arith::ConstantIndexOp::create(b, loc, window)));
    Value votesInit = tensor::EmptyOp::create(b, loc, scoresTy, prefix);
    Value pooledInit = tensor::EmptyOp::create(b, loc, scoresTy, prefix);
    ScoringAttr scoring;
    if (op.getScoring() != Scoring::votes)
      scoring = ScoringAttr::get(b.getContext(), op.getScoring());
    auto score = ScoreOp::create(
        b, loc, scoresTy, scoresTy, op.getQueries(), op.getKeys(), votesInit,
        pooledInit, op.getWindowAttr(), op.getKernelAttr(), op.getPoolingAttr(),
        op.getGqaAttr(), op.getScaleAttr(), scoring);
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

  SmallVector<Value> castToResults(SmallVector<Value> values) {
    for (auto [value, type] : llvm::zip(values, op->getResultTypes()))
      if (value.getType() != type)
        value = tensor::CastOp::create(b, loc, type, value);
    return values;
  }

  OpBuilder &b;
  SelectOp op;
  Location loc;
  RankedTensorType indicesTy, rowsTy;
};

} // namespace

FailureOr<SmallVector<Value>> SelectOp::decomposeOperation(OpBuilder &b) {
  // `recent` and `random` rank by position or hash, not by scores.
  if (getScoring() != Scoring::votes && getScoring() != Scoring::prefix_votes)
    return failure();
  return Decomposition(b, *this).run();
}
