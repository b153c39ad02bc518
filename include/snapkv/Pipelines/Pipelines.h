#ifndef SNAPKV_PIPELINES_PIPELINES_H
#define SNAPKV_PIPELINES_PIPELINES_H

#include "snapkv/Codegen/Passes.h"

#include "mlir/Pass/PassOptions.h"
#include "llvm/ADT/StringRef.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace mlir::snapkv {

struct CPUPipelineOptions : PassPipelineOptions<CPUPipelineOptions> {
  Option<int64_t> keyTile{*this, "key-tile",
                          llvm::cl::desc("Key positions per scoring tile"),
                          llvm::cl::init(64)};
  Option<int64_t> chunk{
      *this, "chunk",
      llvm::cl::desc("Prefix positions per compaction chunk (0: automatic)"),
      llvm::cl::init(0)};
  Option<int64_t> vectorBits{
      *this, "vector-bits",
      llvm::cl::desc("Vector register width in bits (0: the host's)"),
      llvm::cl::init(0)};
  Option<AssertMode> asserts{
      *this, "asserts",
      llvm::cl::desc("What a failed run-time check does (the mode of "
                     "snapkv-lower-asserts)"),
      llvm::cl::init(AssertMode::abort),
      llvm::cl::values(
          clEnumValN(AssertMode::abort, "abort",
                     "message on stderr, then abort() (mlir-runner)"),
          clEnumValN(AssertMode::report, "report",
                     "message for the caller, then return (libraries)"))};
};

/// Lowers a module of snapkv and upstream tensor-level ops to the LLVM
/// dialect: tiled, fused and vectorised, parallel through OpenMP
/// (`--snapkv-cpu-pipeline`).
void buildCPUPipeline(OpPassManager &pm, const CPUPipelineOptions &options);

/// Lowers snapkv.select to fused NVVM kernels plus host code calling the
/// mgpu* runtime (`--snapkv-gpu-pipeline`); `format` is isa, bin or fatbin.
void buildGPUPipeline(OpPassManager &pm, llvm::StringRef chip,
                      llvm::StringRef features, llvm::StringRef format);

/// Registers --snapkv-gpu-pipeline (called by registerPipelines).
void registerGPUPipeline();

/// Registers the named pipelines with the global pass registry.
void registerPipelines();

} // namespace mlir::snapkv

#endif // SNAPKV_PIPELINES_PIPELINES_H
