//===- QuantizeKV.h - An 8-bit K/V cache for the rewrite --------*- C++ -*-===//
//
// `snapkv-compress-kv-cache kv-dtype=i8` keeps every cached K/V row as 8-bit
// integers with its own f32 scale (docs/model-rewrite.md, "An 8-bit cache").
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_DIALECT_SNAPKV_TRANSFORMS_QUANTIZEKV_H
#define SNAPKV_DIALECT_SNAPKV_TRANSFORMS_QUANTIZEKV_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace mlir::snapkv {

/// The rewrite's `kv-dtype` option.
enum class KVCacheType {
  /// The cache keeps the model's element type.
  same,
  /// Symmetric per-row int8: a row of D values becomes D + 4 bytes, the
  /// values q = clamp(roundeven(x / s), -127, 127) with s = absmax / 127
  /// (f32), then the four bytes of s, little-endian. One row is one token of
  /// one head.
  i8,
};

/// The module attribute `snapkv-compress-kv-cache kv-dtype=i8` records:
/// `{dtype = "i8", scale = "f32"}` (what snapkv-report-cache and the runner
/// read).
constexpr llvm::StringLiteral kKVCacheAttrName = "snapkv.kv_cache";

/// Bytes a packed row adds to its D quantized values: the f32 scale.
constexpr int64_t kScaleBytes = 4;

/// `[..., D] x float` -> `[..., D + 4] x i8`.
RankedTensorType quantizedType(RankedTensorType type);

/// Quantizes the rows (last dimension) of the float tensor `rows` into the
/// packed i8 layout of `quantizedType`; values and statistics in f32.
Value quantizeRows(OpBuilder &b, Location loc, Value rows);

/// The packed rows `packed` (`quantizedType`) read back as q * s in f32,
/// rounded to `elementType`.
Value dequantizeRows(OpBuilder &b, Location loc, Value packed,
                     Type elementType);

} // namespace mlir::snapkv

#endif // SNAPKV_DIALECT_SNAPKV_TRANSFORMS_QUANTIZEKV_H
