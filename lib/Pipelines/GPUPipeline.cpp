//===- GPUPipeline.cpp - --snapkv-gpu-pipeline ----------------------------===//

#include "snapkv/Pipelines/Pipelines.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

namespace {
struct GPUPipelineOptions : PassPipelineOptions<GPUPipelineOptions> {
  Option<std::string> chip{*this, "chip",
                           llvm::cl::desc("NVIDIA target, e.g. sm_80, sm_90"),
                           llvm::cl::init("sm_90")};
  Option<std::string> features{
      *this, "features",
      llvm::cl::desc("PTX features; sm_90 needs +ptx80 or later"),
      llvm::cl::init("+ptx80")};
  Option<std::string> format{
      *this, "format",
      llvm::cl::desc("Device code embedded in the module: isa (PTX text), "
                     "bin (cubin) or fatbin"),
      llvm::cl::init("bin")};
};
} // namespace

void snapkv::buildGPUPipeline(OpPassManager &pm, StringRef chip,
                              StringRef features, StringRef format) {
  // Tensor level: selects become mapped parallel loops on device buffers,
  // turned into gpu.launch at once (before canonicalize can reshape them);
  // everything else is bufferized and turned into loops on the host.
  // Launches become kernels, host-side GPU calls become asynchronous
  // (what gpu-to-llvm lowers), and upstream's NVVM pipeline compiles the
  // kernels (ptxas for bin/fatbin) and the host launch code.
  std::string text = llvm::formatv(
      "convert-snapkv-to-gpu,func.func(convert-parallel-loops-to-gpu),"
      "canonicalize,cse,"
      "func.func(math-expand-ops{{ops=fpowi},convert-elementwise-to-linalg),"
      "one-shot-bufferize{{bufferize-function-boundaries "
      "function-boundary-type-conversion=identity-layout-map},"
      "convert-bufferization-to-memref,"
      "func.func(convert-linalg-to-loops),"
      "gpu-kernel-outlining,func.func(gpu-async-region),canonicalize,cse,"
      "gpu-lower-to-nvvm-pipeline{{cubin-chip={0} cubin-features={1} "
      "cubin-format={2}}",
      chip, features, format);
  if (failed(parsePassPipeline(text, pm)))
    llvm::report_fatal_error("snapkv: the built-in GPU pipeline does not parse");
}

void snapkv::registerGPUPipeline() {
  PassPipelineRegistration<GPUPipelineOptions>(
      "snapkv-gpu-pipeline",
      "Lower snapkv.select to fused NVVM kernels (PTX/cubin via "
      "gpu-module-to-binary) plus host launch code calling the mgpu* runtime",
      [](OpPassManager &pm, const GPUPipelineOptions &options) {
        buildGPUPipeline(pm, options.chip, options.features, options.format);
      });
}
