//===- GPUPipeline.cpp - --snapkv-gpu-pipeline ----------------------------===//
//
// Tensor level: the formulation laid out as GPU blocks
// (convert-snapkv-to-linalg{tiling=gpu}) and each block's ops distributed
// over its threads (snapkv-gpu-distribute). Then one-shot bufferisation,
// each block loop becomes a gpu.launch (snapkv-gpu-launch: scratch in shared
// memory or per-block global slices, thread loops to thread ids with
// barriers), the kernels get device buffers (snapkv-gpu-device-buffers),
// and upstream's NVVM pipeline outlines and compiles them (ptxas for
// bin/fatbin) and lowers the host launch code.
//
//===----------------------------------------------------------------------===//

#include "Stages.h"
#include "snapkv/Pipelines/Pipelines.h"

#include "snapkv/Codegen/Passes.h"
#include "snapkv/Conversion/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/Pipelines/Passes.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

llvm::StringRef snapkv::stringifyDeviceCodeFormat(DeviceCodeFormat format) {
  switch (format) {
  case DeviceCodeFormat::isa:
    return "isa";
  case DeviceCodeFormat::bin:
    return "bin";
  case DeviceCodeFormat::fatbin:
    return "fatbin";
  }
  llvm_unreachable("unknown DeviceCodeFormat");
}

void snapkv::buildGPUTensorPipeline(OpPassManager &pm,
                                    const GPUPipelineOptions &options) {
  // With decompose-select, the same stage ops as on the CPU, each its own
  // kernels; by default the select whole (pooling, selection and gather in
  // one kernel).
  ConfigureLoweringOptions config;
  config.target = LoweringTarget::gpu;
  config.keyTile = options.keyTile;
  config.chunk = options.chunk;
  config.keepLogits = false;
  config.threads = options.threads;
  config.tensorCores = options.tensorCores;
  stages::lowerSelections(pm, config, options.decomposeSelect);
  GPUDistributeOptions distribute;
  distribute.threads = options.threads;
  distribute.tensorCores = options.tensorCores;
  pm.addNestedPass<func::FuncOp>(createGPUDistribute(distribute));
  // No CSE from here to bufferisation: it would merge the fills and empty
  // tensors that distribution gave each op (and bufferisation would copy).
  pm.addPass(createCanonicalizerPass());
}

void snapkv::buildGPUPipeline(OpPassManager &pm,
                              const GPUPipelineOptions &options) {
  buildGPUTensorPipeline(pm, options);

  // Host tensor code around the selects (prints, casts) runs as loops.
  stages::prepareTensorCode(pm.nest<func::FuncOp>());

  pm.addPass(bufferization::createEmptyTensorEliminationPass());
  stages::bufferize(pm);
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createConvertBufferizationToMemRefPass());

  OpPassManager &buffers = pm.nest<func::FuncOp>();
  GPULaunchOptions launch;
  launch.sharedMemoryBytes = options.sharedMemoryBytes;
  buffers.addPass(createGPULaunch(launch));
  buffers.addPass(createConvertLinalgToLoopsPass());
  buffers.addPass(createGPUMmaSync());
  buffers.addPass(createGPUDeviceBuffers());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addPass(createGpuKernelOutliningPass());
  pm.nest<func::FuncOp>().addPass(createGpuAsyncRegionPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // The host code's run-time checks (the kernels have none): in report mode
  // each must sit in a function body, hence the CFG first.
  pm.nest<func::FuncOp>().addPass(createSCFToControlFlowPass());
  stages::lowerChecks(pm, options.asserts);

  gpu::GPUToNVVMPipelineOptions nvvm;
  nvvm.cubinChip = options.chip;
  nvvm.cubinFeatures = options.features;
  nvvm.cubinFormat = stringifyDeviceCodeFormat(options.format).str();
  gpu::buildLowerToNVVMPassPipeline(pm, nvvm);
}
