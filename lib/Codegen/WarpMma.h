//===- WarpMma.h - a block's f16/bf16 contraction as warp MMA --*- C++ -*-===//

#ifndef SNAPKV_LIB_CODEGEN_WARPMMA_H
#define SNAPKV_LIB_CODEGEN_WARPMMA_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::snapkv {

/// Native shape of one tensor-core instruction (mma.sync m16n8k16).
inline constexpr int64_t kMmaM = 16, kMmaN = 8, kMmaK = 16;

/// Whether `op` (inside a GPU block loop) can be computed by warps with
/// m16n8k16 MMA: a contraction of two f16 or two bf16 operands into f32 with
/// static sizes, one reduction (a multiple of 16), an rhs-only loop that is
/// a multiple of 16 (split over the warps, at most 32 of them) and an
/// lhs-only loop that is a multiple of 8.
bool isWarpMmaContraction(linalg::LinalgOp op);

/// Splits such an op over warps (`scf.forall` mapped to `#gpu.warp`, 16
/// rows of the rhs-only loop each), runs the remaining loops one position
/// at a time and vectorises each step into `vector.contract`s of the native
/// shape with f16/bf16 operands and f32 accumulators, the form that
/// `snapkv-gpu-mma-sync` turns into `mma.sync`. The fills of its outputs
/// move into the warp loop.
LogicalResult distributeToWarps(RewriterBase &rewriter, linalg::LinalgOp op);

} // namespace mlir::snapkv

#endif // SNAPKV_LIB_CODEGEN_WARPMMA_H
