#ifndef SNAPKV_DIALECT_SNAPKV_IR_SNAPKVOPS_H
#define SNAPKV_DIALECT_SNAPKV_IR_SNAPKVOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/TilingInterface.h"

#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "snapkv/Dialect/SnapKV/IR/SnapKVAttrs.h.inc"

#define GET_OP_CLASSES
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h.inc"

namespace mlir::snapkv {
/// Gives the snapkv ops among `created` (and nested in them) that have no
/// `snapkv.lowering_config` the one of `from`, if it has one: the stages a
/// decomposition or a lowering made of `from` are lowered as it would be.
void inheritLoweringConfig(Operation *from,
                           llvm::iterator_range<Block::iterator> created);

/// snapkv.attention's query and key lengths and causal offset (Lk - Lq unless
/// `offset` is given), with the run-time check the verifier cannot make on
/// dynamic lengths: values as long as the keys (their tiles are read at the
/// keys' positions; left out with `checked`, where the caller made it).
/// `dynamic`: a key or value length is dynamic.
struct AttentionLengths {
  Value lq, lk, offset;
  bool dynamic;
};
AttentionLengths attentionLengths(OpBuilder &b, Location loc, Value queries,
                                  Value keys, Value values, Value offset,
                                  bool checked = false);

/// Scoring sum / norm_sum: the votes of every query given, not the window's.
inline bool isAccumulated(Scoring scoring) {
  return scoring == Scoring::sum || scoring == Scoring::norm_sum;
}
/// A select or score that ranks by accumulated votes (lowered for the CPU
/// only).
inline bool scoresAccumulated(Operation *op) {
  auto scoring = op->getAttrOfType<ScoringAttr>("scoring");
  return isa<SelectOp, ScoreOp>(op) && scoring &&
         isAccumulated(scoring.getValue());
}
/// A select or score whose scoring is lowered for the CPU only: the
/// accumulated ones and `keydiff`.
inline bool scoresOnCpuOnly(Operation *op) {
  auto scoring = op->getAttrOfType<ScoringAttr>("scoring");
  return scoresAccumulated(op) || (isa<SelectOp>(op) && scoring &&
                                   scoring.getValue() == Scoring::keydiff);
}
} // namespace mlir::snapkv

#endif // SNAPKV_DIALECT_SNAPKV_IR_SNAPKVOPS_H
