#ifndef SNAPKV_CONVERSION_SNAPKVTOLINALG_SNAPKVTOLINALG_H
#define SNAPKV_CONVERSION_SNAPKVTOLINALG_SNAPKVTOLINALG_H

#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace mlir::snapkv {

#define GEN_PASS_DECL_CONVERTSNAPKVTOLINALG
#include "snapkv/Conversion/Passes.h.inc"

/// Adds the pattern that lowers `snapkv.select` to tensor-level linalg code.
void populateSnapKVToLinalgPatterns(RewritePatternSet &patterns);

} // namespace mlir::snapkv

#endif // SNAPKV_CONVERSION_SNAPKVTOLINALG_SNAPKVTOLINALG_H
