//===- DecompositionUtils.cpp - shared by the select decompositions -------===//

#include "DecompositionUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/Support/FormatVariadic.h"

#include <limits>

using namespace mlir;
using namespace mlir::snapkv;

Value snapkv::detail::checkedPromptLength(OpBuilder &b, Location loc,
                                          Value keys, Value values,
                                          int64_t window, StringRef opName,
                                          int64_t factor,
                                          StringRef limitMessage) {
  Value length = tensor::DimOp::create(b, loc, keys, 2);
  Value valuesLength = tensor::DimOp::create(b, loc, values, 2);
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
      (opName + ": prompt length of 'values' differs from 'keys'").str());
  check(arith::CmpIPredicate::sge, length, window,
        llvm::formatv("{0}: prompt length (keys dim 2) is shorter than window "
                      "{1}",
                      opName, window)
            .str());
  // factor x length < 2^31 - 1  <=>  length <= (2^31 - 2) / factor.
  check(arith::CmpIPredicate::sle, length,
        (std::numeric_limits<int32_t>::max() - 1) / factor,
        (opName + ": " + limitMessage).str());
  return length;
}

OpFoldResult snapkv::detail::promptLength(OpBuilder &b, Location loc,
                                          Value keys, Value values,
                                          int64_t window, StringRef opName,
                                          int64_t factor,
                                          StringRef limitMessage) {
  auto kTy = cast<RankedTensorType>(keys.getType());
  auto vTy = cast<RankedTensorType>(values.getType());
  if (!kTy.isDynamicDim(2) && !vTy.isDynamicDim(2))
    return b.getIndexAttr(kTy.getDimSize(2));
  return checkedPromptLength(b, loc, keys, values, window, opName, factor,
                             limitMessage);
}

ScoreOp snapkv::detail::createScore(OpBuilder &b, Location loc, Value queries,
                                    Value keys, OpFoldResult length,
                                    IntegerAttr window, IntegerAttr kernel,
                                    PoolingKindAttr pooling, GqaPolicyAttr gqa,
                                    FloatAttr scale, Scoring scoring,
                                    IntegerAttr block) {
  auto qTy = cast<RankedTensorType>(queries.getType());
  auto kTy = cast<RankedTensorType>(keys.getType());
  auto scoresTy = ScoreOp::getResultType(
      qTy, kTy, window.getInt(), gqa ? gqa.getValue() : GqaPolicy::expand);
  SmallVector<Value> prefix;
  if (scoresTy.isDynamicDim(2))
    prefix.push_back(arith::SubIOp::create(
        b, loc, cast<Value>(length),
        arith::ConstantIndexOp::create(b, loc, window.getInt())));
  Value votesInit = tensor::EmptyOp::create(b, loc, scoresTy, prefix);
  Value pooledInit = tensor::EmptyOp::create(b, loc, scoresTy, prefix);
  ScoringAttr scoringAttr;
  if (scoring != Scoring::votes)
    scoringAttr = ScoringAttr::get(b.getContext(), scoring);
  return ScoreOp::create(b, loc, scoresTy, scoresTy, queries, keys, votesInit,
                         pooledInit, window, kernel, pooling, gqa, scale,
                         scoringAttr, block);
}

SmallVector<Value> snapkv::detail::bypassOrSelect(
    OpBuilder &b, Location loc, TypeRange resultTypes, OpFoldResult length,
    int64_t capacity, function_ref<SmallVector<Value>(OpFoldResult)> bypass,
    function_ref<SmallVector<Value>(OpFoldResult)> selection) {
  auto castToResults = [&](SmallVector<Value> values) {
    for (auto [value, type] : llvm::zip(values, resultTypes))
      if (value.getType() != type)
        value = tensor::CastOp::create(b, loc, type, value);
    return values;
  };
  if (std::optional<int64_t> constant = getConstantIntValue(length))
    return castToResults(*constant < capacity ? bypass(length)
                                              : selection(length));
  Value isShort = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::slt, cast<Value>(length),
      arith::ConstantIndexOp::create(b, loc, capacity));
  auto ifOp = scf::IfOp::create(b, loc, resultTypes, isShort,
                                /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  scf::YieldOp::create(b, loc, castToResults(bypass(length)));
  b.setInsertionPointToStart(ifOp.elseBlock());
  scf::YieldOp::create(b, loc, castToResults(selection(length)));
  return SmallVector<Value>(ifOp.getResults());
}
