#ifndef SNAPKV_CODEGEN_PASSES_H
#define SNAPKV_CODEGEN_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::snapkv {

#define GEN_PASS_DECL
#include "snapkv/Codegen/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "snapkv/Codegen/Passes.h.inc"

} // namespace mlir::snapkv

#endif // SNAPKV_CODEGEN_PASSES_H
