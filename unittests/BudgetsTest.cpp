//===- BudgetsTest.cpp - per-layer capacities of the rewrite -------------===//
//
// Prints layerCapacities for model-like shapes; FileCheck in
// test/Unit/budgets.test checks the endpoints, the step and the total.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/Transforms/Budgets.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir::snapkv;

int runBudgetTests() {
  struct Case {
    const char *name;
    BudgetPolicy policy;
    int64_t window, capacity, layers, beta;
  };
  const Case cases[] = {
      {"uniform", BudgetPolicy::uniform, 32, 256, 4, 20},
      // SmolLM2-135M: 30 layers, C = L/8 of a 2,048-token prompt.
      {"pyramid_smollm2", BudgetPolicy::pyramid, 32, 256, 30, 20},
      {"pyramid_beta2", BudgetPolicy::pyramid, 4, 16, 2, 2},
      {"inverted_smollm2", BudgetPolicy::inverted_pyramid, 32, 256, 30, 20},
      // (C - W) / beta rounds to 0: the top layer still keeps one position.
      {"pyramid_small", BudgetPolicy::pyramid, 4, 8, 3, 20},
      {"pyramid_one_layer", BudgetPolicy::pyramid, 4, 8, 1, 20},
  };
  for (const Case &c : cases) {
    llvm::SmallVector<int64_t> capacities =
        layerCapacities(c.policy, c.window, c.capacity, c.layers, c.beta);
    int64_t prefix = 0;
    llvm::outs() << c.name << ":";
    for (int64_t capacity : capacities) {
      llvm::outs() << " " << capacity;
      prefix += capacity - c.window;
    }
    llvm::outs() << " | prefix total " << prefix << " for "
                 << c.layers * (c.capacity - c.window) << "\n";
  }
  return 0;
}
