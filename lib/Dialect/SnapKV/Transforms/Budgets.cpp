//===- Budgets.cpp - Per-layer capacities of the rewrite ------------------===//

#include "snapkv/Dialect/SnapKV/Transforms/Budgets.h"

#include <algorithm>

using namespace mlir::snapkv;

llvm::SmallVector<int64_t>
mlir::snapkv::layerCapacities(BudgetPolicy policy, int64_t window,
                              int64_t capacity, int64_t layers, int64_t beta) {
  llvm::SmallVector<int64_t> capacities(layers, capacity);
  if (policy == BudgetPolicy::uniform || policy == BudgetPolicy::adaptive ||
      layers < 2)
    return capacities;
  int64_t prefix = capacity - window;
  // At least one prefix position: a select keeps more than its window.
  int64_t top = std::max<int64_t>(1, prefix / beta);
  int64_t bottom = 2 * prefix - top;
  // The exact line from bottom to top, floored: never above layers x prefix.
  int64_t span = bottom - top, steps = layers - 1;
  for (int64_t l = 0; l < layers; ++l)
    capacities[l] = window + top + span * (steps - l) / steps;
  if (policy == BudgetPolicy::inverted_pyramid)
    std::reverse(capacities.begin(), capacities.end());
  return capacities;
}
