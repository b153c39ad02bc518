#ifndef SNAPKV_CODEGEN_PASSES_H
#define SNAPKV_CODEGEN_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/Pass/Pass.h"

namespace mlir::snapkv {

/// What a failed run-time check (cf.assert) does in code lowered by
/// snapkv-lower-asserts.
enum class AssertMode {
  /// Write the message to stderr and abort() (programs run by mlir-runner).
  abort,
  /// Record the message for the caller and return (libraries; see the pass
  /// description).
  report,
};

#define GEN_PASS_DECL
#include "snapkv/Codegen/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "snapkv/Codegen/Passes.h.inc"

} // namespace mlir::snapkv

#endif // SNAPKV_CODEGEN_PASSES_H
