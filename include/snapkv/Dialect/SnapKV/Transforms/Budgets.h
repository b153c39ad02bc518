//===- Budgets.h - Per-layer capacities of the rewrite ----------*- C++ -*-===//
//
// How `snapkv-compress-kv-cache` spreads its budget over a model's layers
// (its `budget` option; docs/semantics.md, "Budgets").
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_DIALECT_SNAPKV_TRANSFORMS_BUDGETS_H
#define SNAPKV_DIALECT_SNAPKV_TRANSFORMS_BUDGETS_H

#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace mlir::snapkv {

/// The rewrite's `budget` option.
enum class BudgetPolicy {
  /// Every layer keeps `capacity` positions per head.
  uniform,
  /// PyramidKV (Cai et al., 2024): prefix budgets falling linearly from the
  /// lowest layer to the highest, `capacity - window` on average.
  pyramid,
  /// The same budgets the other way up: rising from the lowest layer to the
  /// highest (our comparison: on SmolLM2 the upper-middle layers decide).
  inverted_pyramid,
  /// Ada-KV (Feng et al., 2024): each layer's heads share Hc x (capacity -
  /// window) prefix positions, ranked together (`snapkv.select_adaptive`);
  /// the cache is ragged. Every layer gets `capacity`, as under uniform.
  adaptive,
};

/// The capacity (window included) of each of `layers` layers, lowest first.
/// Pyramid takes PyramidKV's endpoints (its reference code,
/// `pyramidkv_utils.py`) with K = capacity - window: the top layer keeps
/// max(1, K / beta) prefix positions, the bottom one 2K minus that. The layers
/// between lie on the line joining them, floored, so the total never exceeds
/// layers x K (PyramidKV's integer step, (bottom - top) / (layers - 1), can
/// exceed it: by 4.5 % for 30 layers at K = 224). Unlike PyramidKV, a
/// layer's budget is not clamped to the prompt: a layer whose capacity
/// exceeds the prompt keeps the whole prompt. Inverted pyramid is the same
/// list reversed.
llvm::SmallVector<int64_t> layerCapacities(BudgetPolicy policy, int64_t window,
                                           int64_t capacity, int64_t layers,
                                           int64_t beta);

} // namespace mlir::snapkv

#endif // SNAPKV_DIALECT_SNAPKV_TRANSFORMS_BUDGETS_H
