//===- KVCacheAnalysis.h - what snapkv-compress-kv-cache matches -*- C++
//-*-===//
//
// The model rewrite's analysis: the attention layers of prefill, decode and
// extend functions, their K/V results and cache arguments, and why a function
// is refused. Internal to SnapKVTransforms.
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_KVCACHEANALYSIS_H
#define SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_KVCACHEANALYSIS_H

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/AttentionMatcher.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <optional>
#include <string>

namespace mlir::snapkv::detail {

/// Why a function cannot be rewritten: a kind (SnapKVEnums.td: its code and
/// message), the values its message names and, for per-layer reasons, the
/// layer.
struct Refusal {
  RefusalKind kind = RefusalKind::NoAttention;
  SmallVector<std::string, 4> args;
  std::optional<unsigned> layer;

  std::string message() const;
};

/// Sets `refusal` and fails.
LogicalResult refuseWith(Refusal &refusal, RefusalKind kind,
                         SmallVector<std::string, 4> args = {},
                         std::optional<unsigned> layer = std::nullopt);

/// A refusal for a mask the matcher did not accept.
LogicalResult refuseMask(Refusal &refusal, MaskMismatch kind, unsigned layer);

/// One prefill layer: its attention and the result positions of its K/V.
struct PrefillLayer {
  AttentionMatch attention;
  unsigned keyResult = 0, valueResult = 0;
  /// An extend layer's cache arguments (null for prefill): carried scores
  /// (staging-carry) go in after the values.
  BlockArgument keyCache = {}, valueCache = {};
};

/// One decode layer: its attention, the cache arguments and the appends.
struct DecodeLayer {
  AttentionMatch attention;
  BlockArgument keyCache, valueCache;
  tensor::ConcatOp keyAppend, valueAppend;
  unsigned keyResult = 0, valueResult = 0;
};

/// `op`'s name and location, `value` as an argument number or its defining
/// op: how refusal messages name IR.
std::string describe(Operation *op);
std::string describe(Value value);

/// The single func.return of `func`, or null.
func::ReturnOp soleReturn(func::FuncOp func);

/// The attention layers of a prefill function, each returning its K/V.
FailureOr<SmallVector<PrefillLayer>>
analysePrefill(func::FuncOp func, int64_t window, Refusal &refusal);

/// The attention layers of a decode function: one new row appended to each
/// cache argument and returned.
FailureOr<SmallVector<DecodeLayer>> analyseDecode(func::FuncOp func,
                                                  Refusal &refusal);

/// The attention layers of an extend function (a chunk appended to the
/// caches), as prefill layers over the concatenation.
FailureOr<SmallVector<PrefillLayer>> analyseExtend(func::FuncOp func,
                                                   Refusal &refusal);

/// Checks that prefill's K/V results and decode's caches line up layer by
/// layer (positions, shapes, heads).
LogicalResult checkCorrespondence(func::FuncOp prefill, func::FuncOp decode,
                                  ArrayRef<PrefillLayer> pre,
                                  ArrayRef<DecodeLayer> dec, Refusal &refusal);

} // namespace mlir::snapkv::detail

#endif // SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_KVCACHEANALYSIS_H
