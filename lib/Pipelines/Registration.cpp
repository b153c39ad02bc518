//===- Registration.cpp - the named snapkv pipelines ----------------------===//

#include "snapkv/Pipelines/Pipelines.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace {
struct CPUPipelineOptions : PassPipelineOptions<CPUPipelineOptions> {
  Option<snapkv::AssertMode> asserts{
      *this, "asserts",
      llvm::cl::desc("What a failed run-time check does (the mode of "
                     "snapkv-lower-asserts)"),
      llvm::cl::init(snapkv::AssertMode::abort),
      llvm::cl::values(
          clEnumValN(snapkv::AssertMode::abort, "abort",
                     "message on stderr, then abort() (mlir-runner)"),
          clEnumValN(snapkv::AssertMode::report, "report",
                     "message for the caller, then return (libraries)"))};
};
} // namespace

void snapkv::registerPipelines() {
  PassPipelineRegistration<CPUPipelineOptions>(
      "snapkv-cpu-pipeline",
      "Lower snapkv and upstream tensor-level ops to the LLVM dialect for CPU "
      "execution (vectorised)",
      [](OpPassManager &pm, const CPUPipelineOptions &options) {
        buildCPUPipeline(pm, options.asserts);
      });
  registerGPUPipeline();
}
