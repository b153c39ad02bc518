#ifndef SNAPKV_DIALECT_SNAPKV_IR_SNAPKVDIALECT_H
#define SNAPKV_DIALECT_SNAPKV_IR_SNAPKVDIALECT_H

#include "mlir/IR/Dialect.h"

#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h.inc"

#endif // SNAPKV_DIALECT_SNAPKV_IR_SNAPKVDIALECT_H
