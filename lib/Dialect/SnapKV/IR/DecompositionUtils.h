//===- DecompositionUtils.h - shared by the select decompositions -*- C++
//-*-===//
//
// What snapkv.select and snapkv.select_adaptive decompose the same way: the
// run-time checks of a dynamic prompt length and the scoring stage.
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_LIB_DIALECT_SNAPKV_IR_DECOMPOSITIONUTILS_H
#define SNAPKV_LIB_DIALECT_SNAPKV_IR_DECOMPOSITIONUTILS_H

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/IR/Builders.h"

namespace mlir::snapkv::detail {

/// The prompt length (dim 2 of `keys`), with `cf.assert`s that `values` has
/// the same length, that it is at least `window` and that `factor` times it
/// is below 2^31 - 1 (`limitMessage`). `opName` prefixes the messages.
Value checkedPromptLength(OpBuilder &b, Location loc, Value keys, Value values,
                          int64_t window, StringRef opName, int64_t factor,
                          StringRef limitMessage);

/// The prompt length: a constant when keys and values have a static one,
/// else checkedPromptLength's.
OpFoldResult promptLength(OpBuilder &b, Location loc, Value keys, Value values,
                          int64_t window, StringRef opName, int64_t factor,
                          StringRef limitMessage);

/// snapkv.score of `queries` over `keys` with the given clauses, its results
/// in new tensors of `[B, Hc, length - window]`; a null `block` is 1.
ScoreOp createScore(OpBuilder &b, Location loc, Value queries, Value keys,
                    OpFoldResult length, IntegerAttr window, IntegerAttr kernel,
                    PoolingKindAttr pooling, GqaPolicyAttr gqa, FloatAttr scale,
                    Scoring scoring, IntegerAttr block = {});

/// The results of `bypass` when the prompt (`length`) is shorter than
/// `capacity`, else of `selection`, each cast to `resultTypes`; with a
/// dynamic `length` an scf.if picks between them at run time.
SmallVector<Value>
bypassOrSelect(OpBuilder &b, Location loc, TypeRange resultTypes,
               OpFoldResult length, int64_t capacity,
               function_ref<SmallVector<Value>(OpFoldResult)> bypass,
               function_ref<SmallVector<Value>(OpFoldResult)> selection);

} // namespace mlir::snapkv::detail

#endif // SNAPKV_LIB_DIALECT_SNAPKV_IR_DECOMPOSITIONUTILS_H
