#ifndef SNAPKV_PIPELINES_PIPELINES_H
#define SNAPKV_PIPELINES_PIPELINES_H

#include "snapkv/Codegen/Passes.h"

#include "mlir/Pass/PassOptions.h"
#include "llvm/ADT/StringRef.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace mlir::snapkv {

/// The `asserts` option of both pipelines.
inline llvm::cl::desc assertsDescription() {
  return llvm::cl::desc("What a failed run-time check does (the mode of "
                        "snapkv-lower-asserts)");
}
inline auto assertModeValues() {
  return llvm::cl::values(
      clEnumValN(AssertMode::abort, "abort",
                 "message on stderr, then abort() (mlir-runner)"),
      clEnumValN(AssertMode::report, "report",
                 "message for the caller, then return (libraries)"));
}

struct CPUPipelineOptions : PassPipelineOptions<CPUPipelineOptions> {
  Option<int64_t> keyTile{
      *this, "key-tile",
      llvm::cl::desc("Key positions per scoring tile (0: chosen per op by "
                     "snapkv-configure-lowering)"),
      llvm::cl::init(0)};
  Option<int64_t> chunk{
      *this, "chunk",
      llvm::cl::desc("Prefix positions per compaction chunk (0: automatic)"),
      llvm::cl::init(0)};
  Option<bool> keepLogits{
      *this, "keep-logits",
      llvm::cl::desc("Score one (batch, query head) at a time, keeping its "
                     "logits for the votes (false: recompute them per tile)"),
      llvm::cl::init(true)};
  Option<int64_t> vectorBits{
      *this, "vector-bits",
      llvm::cl::desc("Vector register width in bits (0: the module's "
                     "dlti.target_system_spec CPU max_vector_op_width, else "
                     "the host's)"),
      llvm::cl::init(0)};
  Option<std::string> cpuFeatures{
      *this, "cpu-features",
      llvm::cl::desc("The CPU's LLVM feature names, comma-separated, that "
                     "snapkv-configure-lowering chooses microkernels for "
                     "(host: the host's)"),
      llvm::cl::init("host")};
  Option<bool> fuseAttention{
      *this, "fuse-attention",
      llvm::cl::desc("Replace each prompt's decomposed causal self-attention "
                     "with snapkv.attention first (snapkv-fuse-attention)"),
      llvm::cl::init(true)};
  Option<int64_t> queryTile{
      *this, "query-tile",
      llvm::cl::desc("Query rows per snapkv.attention tile (0: chosen per "
                     "op by snapkv-configure-lowering)"),
      llvm::cl::init(0)};
  Option<omp::ClauseScheduleKind> schedule{
      *this, "schedule",
      llvm::cl::desc("OpenMP schedule of the parallel loops without a "
                     "reduction (snapkv-schedule-parallel-loops)"),
      llvm::cl::init(omp::ClauseScheduleKind::Guided),
      llvm::cl::values(clEnumValN(omp::ClauseScheduleKind::Static, "static",
                                  "equal shares, fixed in advance"),
                       clEnumValN(omp::ClauseScheduleKind::Dynamic, "dynamic",
                                  "one iteration at a time, on demand"),
                       clEnumValN(omp::ClauseScheduleKind::Guided, "guided",
                                  "shrinking chunks, on demand"))};
  Option<int64_t> staticTripCount{
      *this, "static-trip-count",
      llvm::cl::desc("Parallel loops with at most this many iterations "
                     "(constant bounds) keep the static schedule (0: none)"),
      llvm::cl::init(64)};
  Option<int64_t> reductionParts{
      *this, "reduction-parts",
      llvm::cl::desc("Parallel parts of a one-row contraction's reduction (a "
                     "decode step's vector x matrix products), at most; 0 "
                     "splits its columns instead (snapkv-parallelize)"),
      llvm::cl::init(8)};
  Option<bool> fuseParallelLoops{
      *this, "fuse-parallel-loops",
      llvm::cl::desc("Fuse independent parallel loops over the same "
                     "iterations (a decode step's Q, K and V products) into "
                     "one OpenMP region (snapkv-fuse-parallel-loops)"),
      llvm::cl::init(true)};
  Option<bool> packWeights{
      *this, "pack-weights",
      llvm::cl::desc("Pack the weights of wide prefill matmuls into column "
                     "panels (snapkv-pack-weights)"),
      llvm::cl::init(true)};
  Option<int64_t> columns{
      *this, "columns",
      llvm::cl::desc("Columns of a contraction per parallel tile, at most "
                     "(snapkv-parallelize)"),
      llvm::cl::init(1024)};
  Option<int64_t> rowBlock{
      *this, "row-block",
      llvm::cl::desc("Rows per parallel tile of a prefill's contractions; "
                     "0 keeps whole columns of rows (snapkv-parallelize)"),
      llvm::cl::init(256)};
  Option<AssertMode> asserts{*this, "asserts", assertsDescription(),
                             llvm::cl::init(AssertMode::abort),
                             assertModeValues()};
  Option<bool> genericAlloc{
      *this, "generic-alloc",
      llvm::cl::desc("Allocate and free through _mlir_memref_to_llvm_alloc, "
                     "_aligned_alloc and _free (upstream's "
                     "use-generic-functions), which the program defines: the "
                     "Python runner's count the heap"),
      llvm::cl::init(false)};
};

/// Lowers a module of snapkv and upstream tensor-level ops to the LLVM
/// dialect: tiled, fused and vectorised, parallel through OpenMP
/// (`--snapkv-cpu-pipeline`). Its final conversion is upstream's
/// `convert-to-llvm`, which finds each dialect's patterns through the
/// ConvertToLLVMPatternInterface: the context must have those registered
/// (`registerAllExtensions`, as snapkv-opt and mlir-opt do).
void buildCPUPipeline(OpPassManager &pm, const CPUPipelineOptions &options);

/// The device code the GPU pipeline embeds in the module (upstream
/// gpu-module-to-binary's `format`).
enum class DeviceCodeFormat { isa, bin, fatbin };

/// The name upstream's GPU-to-NVVM pipeline takes for `format`.
llvm::StringRef stringifyDeviceCodeFormat(DeviceCodeFormat format);

struct GPUPipelineOptions : PassPipelineOptions<GPUPipelineOptions> {
  Option<std::string> chip{*this, "chip",
                           llvm::cl::desc("NVIDIA target, e.g. sm_80, sm_90"),
                           llvm::cl::init("sm_90")};
  Option<std::string> features{
      *this, "features",
      llvm::cl::desc("PTX features; sm_90 needs +ptx80 or later"),
      llvm::cl::init("+ptx80")};
  Option<DeviceCodeFormat> format{
      *this, "format", llvm::cl::desc("Device code embedded in the module"),
      llvm::cl::init(DeviceCodeFormat::bin),
      llvm::cl::values(clEnumValN(DeviceCodeFormat::isa, "isa", "PTX text"),
                       clEnumValN(DeviceCodeFormat::bin, "bin",
                                  "cubin (assembled by ptxas)"),
                       clEnumValN(DeviceCodeFormat::fatbin, "fatbin",
                                  "fat binary: cubin and PTX"))};
  Option<int64_t> keyTile{
      *this, "key-tile",
      llvm::cl::desc("Key positions per scoring block (0: chosen per op by "
                     "snapkv-configure-lowering)"),
      llvm::cl::init(0)};
  Option<int64_t> chunk{
      *this, "chunk",
      llvm::cl::desc("Prefix positions per compaction chunk (0: automatic)"),
      llvm::cl::init(0)};
  Option<int64_t> threads{*this, "threads", llvm::cl::desc("Threads per block"),
                          llvm::cl::init(128)};
  Option<int64_t> sharedMemoryBytes{
      *this, "shared-memory-bytes",
      llvm::cl::desc("Shared memory per block for scratch buffers"),
      llvm::cl::init(98304)};
  Option<bool> tensorCores{
      *this, "tensor-cores",
      llvm::cl::desc("f16 and bf16 logits on tensor cores (warp-level "
                     "mma.sync m16n8k16, sm_80 and later)"),
      llvm::cl::init(true)};
  Option<bool> decomposeSelect{
      *this, "decompose-select",
      llvm::cl::desc("Split each snapkv.select into its stage ops (score, "
                     "top_positions, gather) before lowering "
                     "(snapkv-decompose-select), seven kernels per select; "
                     "false (the default until a GPU has measured both) "
                     "lowers it whole: four kernels, pooling, selection and "
                     "gather in one"),
      llvm::cl::init(false)};
  Option<AssertMode> asserts{*this, "asserts", assertsDescription(),
                             llvm::cl::init(AssertMode::abort),
                             assertModeValues()};
};

/// The tensor-level half of the GPU pipeline: the formulation as GPU
/// blocks, each block's ops distributed over its threads. Its output runs
/// on the CPU too (`--snapkv-cpu-pipeline` after it): the kernels'
/// emulation.
void buildGPUTensorPipeline(OpPassManager &pm,
                            const GPUPipelineOptions &options);

/// Lowers snapkv ops to NVVM kernels (PTX/cubin) plus host code calling the
/// mgpu* runtime (`--snapkv-gpu-pipeline`).
void buildGPUPipeline(OpPassManager &pm, const GPUPipelineOptions &options);

/// Registers the named pipelines with the global pass registry.
void registerPipelines();

} // namespace mlir::snapkv

#endif // SNAPKV_PIPELINES_PIPELINES_H
