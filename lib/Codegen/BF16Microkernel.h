//===- BF16Microkernel.h - bf16 tiles as AVX512_BF16 dots ------*- C++ -*-===//

#ifndef SNAPKV_LIB_CODEGEN_BF16MICROKERNEL_H
#define SNAPKV_LIB_CODEGEN_BF16MICROKERNEL_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::snapkv {

/// The register tile of a bf16 contraction (static loops: rows R, columns
/// N, a reduction of 2, the rest 1) as AVX512_BF16 dot products: per row,
/// its pair of A broadcast as one 32-bit element; per `lanes` columns, the
/// two rows of B interleaved into pairs; `x86vector.avx512.dot` adds each
/// pair's two products to the f32 accumulator. Upstream's
/// populateVectorContractToPackedTypeDotProductPatterns (LLVM 22) wants
/// contractions already unrolled to one accumulator row and operands in the
/// VNNI layout (or flat pairs traced to loads and stores); this tile keeps
/// R x N accumulators in registers across the reduction loop instead.
LogicalResult vectorizeBF16Dot(RewriterBase &rewriter, linalg::LinalgOp op,
                               int64_t lanes);

} // namespace mlir::snapkv

#endif // SNAPKV_LIB_CODEGEN_BF16MICROKERNEL_H
