#ifndef SNAPKV_CONVERSION_SNAPKVTOLINALG_SNAPKVTOLINALG_H
#define SNAPKV_CONVERSION_SNAPKVTOLINALG_SNAPKVTOLINALG_H

#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace mlir::snapkv {

#define GEN_PASS_DECL_CONVERTSNAPKVTOLINALG
#include "snapkv/Conversion/Passes.h.inc"

/// How the lowering splits the prompt axis (see docs/lowering.md).
struct SnapKVToLinalgOptions {
  /// Key positions per scoring tile.
  int64_t keyTile = 64;
  /// Prefix positions per compaction chunk (for a dynamic prompt length,
  /// or always when `autoChunk` is false).
  int64_t chunk = 128;
  /// With a static prompt length, pick a chunk of about sqrt(prefix).
  bool autoChunk = true;
};

/// Adds the patterns that lower `snapkv.select` and `snapkv.score` to
/// tensor-level linalg code (untiled).
void populateSnapKVToLinalgPatterns(RewritePatternSet &patterns,
                                    const SnapKVToLinalgOptions &options = {});

} // namespace mlir::snapkv

#endif // SNAPKV_CONVERSION_SNAPKVTOLINALG_SNAPKVTOLINALG_H
