//===- Registration.cpp - the named snapkv pipelines ----------------------===//

#include "snapkv/Pipelines/Pipelines.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void snapkv::registerPipelines() {
  PassPipelineRegistration<>(
      "snapkv-cpu-pipeline",
      "Lower snapkv and upstream tensor-level ops to the LLVM dialect for CPU "
      "execution (vectorised)",
      [](OpPassManager &pm) { buildCPUPipeline(pm); });
  registerGPUPipeline();
}
