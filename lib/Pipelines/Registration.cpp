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
  PassPipelineRegistration<GPUPipelineOptions>(
      "snapkv-gpu-pipeline",
      "Lower snapkv ops to NVVM kernels (PTX/cubin via gpu-module-to-binary) "
      "plus host launch code calling the mgpu* runtime",
      [](OpPassManager &pm, const GPUPipelineOptions &options) {
        buildGPUPipeline(pm, options);
      });
  PassPipelineRegistration<GPUPipelineOptions>(
      "snapkv-gpu-emulation",
      "The tensor-level half of --snapkv-gpu-pipeline (GPU blocks, their "
      "ops over threads); follow it with --snapkv-cpu-pipeline to run the "
      "kernels on the CPU",
      [](OpPassManager &pm, const GPUPipelineOptions &options) {
        buildGPUTensorPipeline(pm, options);
      });
}
