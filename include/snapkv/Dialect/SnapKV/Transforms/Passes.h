#ifndef SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_H
#define SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_H

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/Budgets.h"
#include "snapkv/Dialect/SnapKV/Transforms/QuantizeKV.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::snapkv {

/// The module attribute in which `snapkv-compress-kv-cache` records why it
/// refused: `{reason = "<code>", function = "<name>", message = "..."}`, plus
/// `layer` for per-layer reasons (docs/model-rewrite.md lists the codes).
constexpr llvm::StringLiteral kRefusalAttrName = "snapkv.refusal";
/// `{chunk = N, window = W, function = "<extend-func>"}`:
/// snapkv-compress-kv-cache rewrote the module for chunked prefill of N
/// tokens per chunk.
constexpr llvm::StringLiteral kChunkedPrefillAttrName =
    "snapkv.chunked_prefill";
/// `{interval = K, window = W, capacity = C, function = "<extend-func>"}`:
/// snapkv-compress-kv-cache rewrote the module for decode-time compression.
constexpr llvm::StringLiteral kDecodeCompressionAttrName =
    "snapkv.decode_compression";

/// What `snapkv-report-cache` prints (its `format` option).
enum class ReportFormat { table, json };

/// `snapkv-append-in-place` on @`func` of `module` (its description says
/// what). `ragged`: the caches become packed buffers [B, R, D] whose heads
/// each hold their own rows (`snapkv.select_adaptive`'s layout), the new row
/// is written at each head's `starts + lengths`, and the attentions over
/// them, which must be `snapkv.attention` (snapkv-fuse-attention), become
/// `snapkv.ragged_attention`; `rows` is then `[P, 2, B, Hc] x i64`: each
/// (keys, values) pair's `starts` and `lengths`. On failure the module is
/// unchanged and `why` says why. A function already rewritten succeeds.
LogicalResult appendInPlace(ModuleOp module, StringRef func, bool ragged,
                            std::string &why);

/// `snapkv-fuse-attention` on the functions in `root`: each recognised
/// attention becomes one `snapkv.attention`. Returns how many were.
unsigned fuseAttentions(Operation *root);

#define GEN_PASS_DECL
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"

} // namespace mlir::snapkv

#endif // SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_H
