#ifndef SNAPKV_PIPELINES_PIPELINES_H
#define SNAPKV_PIPELINES_PIPELINES_H

#include "snapkv/Codegen/Passes.h"

#include "llvm/ADT/StringRef.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace mlir::snapkv {

/// Lowers a module of snapkv and upstream tensor-level ops to the LLVM
/// dialect, vectorising linalg ops on the way (`--snapkv-cpu-pipeline`);
/// `asserts` is the mode of snapkv-lower-asserts.
void buildCPUPipeline(OpPassManager &pm,
                      AssertMode asserts = AssertMode::abort);

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
