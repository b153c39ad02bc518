#ifndef SNAPKV_CONVERSION_SNAPKVTOGPU_SNAPKVTOGPU_H
#define SNAPKV_CONVERSION_SNAPKVTOGPU_SNAPKVTOGPU_H

#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace mlir::snapkv {

#define GEN_PASS_DECL_CONVERTSNAPKVTOGPU
#include "snapkv/Conversion/Passes.h.inc"

/// Adds the pattern that lowers `snapkv.select` to three GPU-mapped parallel
/// loop nests; `deviceBuffers=false` keeps every buffer on the host so the
/// same loops run on the CPU.
void populateSnapKVToGPUPatterns(RewritePatternSet &patterns,
                                 bool deviceBuffers);

} // namespace mlir::snapkv

#endif // SNAPKV_CONVERSION_SNAPKVTOGPU_SNAPKVTOGPU_H
