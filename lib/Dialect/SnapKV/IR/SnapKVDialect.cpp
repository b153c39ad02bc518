#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

using namespace mlir;
using namespace mlir::snapkv;

#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.cpp.inc"

void SnapKVDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.cpp.inc"
      >();
}
