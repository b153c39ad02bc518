#ifndef SNAPKV_DIALECT_SNAPKV_IR_SNAPKVOPS_H
#define SNAPKV_DIALECT_SNAPKV_IR_SNAPKVOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
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
} // namespace mlir::snapkv

#endif // SNAPKV_DIALECT_SNAPKV_IR_SNAPKVOPS_H
