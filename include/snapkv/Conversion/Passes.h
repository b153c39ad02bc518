#ifndef SNAPKV_CONVERSION_PASSES_H
#define SNAPKV_CONVERSION_PASSES_H

#include "snapkv/Conversion/SnapKVToLinalg/SnapKVToLinalg.h"

namespace mlir::snapkv {

#define GEN_PASS_REGISTRATION
#include "snapkv/Conversion/Passes.h.inc"

} // namespace mlir::snapkv

#endif // SNAPKV_CONVERSION_PASSES_H
