#ifndef SNAPKV_CONVERSION_SNAPKVTOLINALG_SNAPKVTOLINALG_H
#define SNAPKV_CONVERSION_SNAPKVTOLINALG_SNAPKVTOLINALG_H

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Pass/Pass.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::snapkv {

/// The layout convert-snapkv-to-linalg emits, and the tiling it records.
enum class LoweringTarget {
  /// The formulation only, untiled.
  none,
  /// Groups tiled into scf.forall loops (OpenMP in the CPU pipeline).
  cpu,
  /// The GPU block layout, each group one kernel of GPU blocks.
  gpu,
};

#define GEN_PASS_DECL_CONFIGURELOWERING
#define GEN_PASS_DECL_CONVERTSNAPKVTOLINALG
#include "snapkv/Conversion/Passes.h.inc"

/// How the lowering splits the prompt axis (see docs/lowering.md).
struct SnapKVToLinalgOptions {
  /// Key positions per scoring tile (and per snapkv.attention key tile).
  int64_t keyTile = 64;
  /// Query rows per snapkv.attention tile.
  int64_t queryTile = 32;
  /// Prefix positions per compaction chunk (for a dynamic prompt length,
  /// or always when `autoChunk` is false).
  int64_t chunk = 128;
  /// With a static prompt length, pick a chunk of about sqrt(prefix).
  bool autoChunk = true;
  /// What the lowering configuration maps the groups to, which picks the
  /// formulation's layout: `forall` (and untiled) runs every step on whole
  /// tensors; `gpu_blocks` emits the keys as one span of whole tiles, each
  /// tile a bounded copy (positions past the prompt read as zero, hidden by
  /// the causal mask) that a target can stage in fast memory, the per-row
  /// steps (pooling, selection, gather) inside an scf.forall over the
  /// (batch, head) rows, one GPU block per row, and tile groups of GPU
  /// blocks (`TileRecorder`).
  TileMapping mapping = TileMapping::forall;
  /// CPU: score one (batch, query head) at a time, keeping that head's
  /// W x L logits (f32) between the softmax statistics and the votes
  /// instead of computing them twice; the head's key tiles are parallel.
  bool keepLogits = false;
  /// CPU: the instructions of the inner products (the configuration's
  /// `microkernel`; read by the vectorisation, not by the formulation).
  Microkernel microkernel = Microkernel::none;
  /// GPU: threads per block, and 16-bit logits on tensor cores.
  int64_t threads = 128;
  bool tensorCores = true;
  /// The op is a tile in a parallel loop whose run-time checks were made
  /// before the loop (a check in it could not return to the caller): none
  /// is emitted.
  bool checked = false;
};

/// The `#snapkv.lowering_config` of `target` with these sizes (null for
/// `none`): what snapkv-configure-lowering writes on each op, and what
/// convert-snapkv-to-linalg uses for an op without one.
LoweringConfigAttr getLoweringConfig(MLIRContext *ctx, LoweringTarget target,
                                     const SnapKVToLinalgOptions &options);

/// The configuration snapkv-configure-lowering chooses for `op` with
/// `strategy`'s target, sizes (0: chosen per op) and CPU features; null for
/// an op it does not configure; failure, reported on `op`, where the target
/// has no lowering for it. The one place tile sizes are chosen.
FailureOr<LoweringConfigAttr>
chooseLoweringConfig(Operation *op, const ConfigureLoweringOptions &strategy);

/// The options an op's configuration stands for (its mapping included).
SnapKVToLinalgOptions getLoweringOptions(LoweringConfigAttr config);

/// The LLVM feature names a `cpu-features` spec turns on or off (the
/// strategy's and the CPU pipeline's option): `host`, the host's, or names
/// comma-separated (`+name` or `name` adds one, `-name` removes it).
llvm::StringMap<bool> cpuFeatureNames(StringRef spec);

} // namespace mlir::snapkv

#endif // SNAPKV_CONVERSION_SNAPKVTOLINALG_SNAPKVTOLINALG_H
