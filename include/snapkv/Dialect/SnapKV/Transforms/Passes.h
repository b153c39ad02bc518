#ifndef SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_H
#define SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_H

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/Budgets.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::snapkv {

/// The module attribute in which `snapkv-compress-kv-cache` records why it
/// refused: `{reason = "<code>", function = "<name>", message = "..."}`, plus
/// `layer` for per-layer reasons (docs/model-rewrite.md lists the codes).
constexpr llvm::StringLiteral kRefusalAttrName = "snapkv.refusal";

/// What `snapkv-report-cache` prints (its `format` option).
enum class ReportFormat { table, json };

#define GEN_PASS_DECL
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"

} // namespace mlir::snapkv

#endif // SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_H
