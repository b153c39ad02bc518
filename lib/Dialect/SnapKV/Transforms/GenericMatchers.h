//===- GenericMatchers.h - small matchers of linalg.generic bodies --------===//
//
// Shared by the attention matcher (AttentionMatcher.cpp) and the mask and
// position analysis (CausalMask.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_GENERICMATCHERS_H
#define SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_GENERICMATCHERS_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Matchers.h"

#include <optional>

namespace mlir::snapkv::matchers {

/// The op that produces yield operand `result` of `generic`, if it is an OpTy.
template <typename OpTy>
OpTy yielded(linalg::GenericOp generic, unsigned result = 0) {
  auto yield = cast<linalg::YieldOp>(generic.getBody()->getTerminator());
  if (result >= yield.getNumOperands())
    return nullptr;
  return yield.getOperand(result).getDefiningOp<OpTy>();
}

inline bool isBlockArg(Value value, linalg::GenericOp generic,
                       unsigned number) {
  auto arg = dyn_cast<BlockArgument>(value);
  return arg && arg.getOwner() == generic.getBody() &&
         arg.getArgNumber() == number;
}

inline bool allParallel(linalg::GenericOp generic) {
  return llvm::all_of(generic.getIteratorTypesArray(), [](auto type) {
    return type == utils::IteratorType::parallel;
  });
}

/// An elementwise generic with `inputs` inputs whose single result is
/// `OpTy(arg lhsArg, arg rhsArg)`.
template <typename OpTy>
linalg::GenericOp elementwise(Value value, unsigned inputs, unsigned lhsArg,
                              unsigned rhsArg) {
  auto generic = value.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 ||
      generic.getNumDpsInputs() != inputs || !allParallel(generic))
    return nullptr;
  auto op = yielded<OpTy>(generic);
  if (!op || op->getNumOperands() != 2 ||
      !isBlockArg(op->getOperand(0), generic, lhsArg) ||
      !isBlockArg(op->getOperand(1), generic, rhsArg))
    return nullptr;
  return generic;
}

inline bool isIdentity(AffineMap map) { return map.isIdentity(); }

/// A splat float constant, as a scalar or as a (0-d) tensor.
inline std::optional<double> floatConstant(Value value) {
  FloatAttr scalar;
  if (matchPattern(value, m_Constant(&scalar)))
    return scalar.getValueAsDouble();
  DenseFPElementsAttr dense;
  if (matchPattern(value, m_Constant(&dense)) && dense.isSplat())
    return dense.getSplatValue<APFloat>().convertToDouble();
  return std::nullopt;
}

/// A 3-input generic yielding `select(arg0, arg1, arg2)`.
inline linalg::GenericOp selectGeneric(Value value) {
  auto generic = value.getDefiningOp<linalg::GenericOp>();
  if (!generic || generic.getNumResults() != 1 ||
      generic.getNumDpsInputs() != 3 || !allParallel(generic))
    return nullptr;
  auto pick = yielded<arith::SelectOp>(generic);
  if (!pick || !isBlockArg(pick.getCondition(), generic, 0) ||
      !isBlockArg(pick.getTrueValue(), generic, 1) ||
      !isBlockArg(pick.getFalseValue(), generic, 2))
    return nullptr;
  return generic;
}

} // namespace mlir::snapkv::matchers

#endif // SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_GENERICMATCHERS_H
