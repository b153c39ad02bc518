//===- Registration.cpp - the named snapkv pipelines ----------------------===//

#include "snapkv/Pipelines/Pipelines.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void snapkv::registerPipelines() {
  PassPipelineRegistration<CPUPipelineOptions>(
      "snapkv-cpu-pipeline",
      "Lower snapkv and upstream tensor-level ops to the LLVM dialect for CPU "
      "execution (tiled, vectorised, parallel through OpenMP)",
      [](OpPassManager &pm, const CPUPipelineOptions &options) {
        buildCPUPipeline(pm, options);
      });
  registerGPUPipeline();
}
