#ifndef SNAPKV_PIPELINES_PIPELINES_H
#define SNAPKV_PIPELINES_PIPELINES_H

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace mlir::snapkv {

/// Lowers a module of snapkv and upstream tensor-level ops to the LLVM
/// dialect, vectorising linalg ops on the way (`--snapkv-cpu-pipeline`).
void buildCPUPipeline(OpPassManager &pm);

/// Registers the named pipelines with the global pass registry.
void registerPipelines();

} // namespace mlir::snapkv

#endif // SNAPKV_PIPELINES_PIPELINES_H
