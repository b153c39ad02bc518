#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::snapkv;

#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "snapkv/Dialect/SnapKV/IR/SnapKVAttrs.cpp.inc"

void SnapKVDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "snapkv/Dialect/SnapKV/IR/SnapKVAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.cpp.inc"
      >();
}
