//===- GPUUtils.h - helpers shared by the GPU codegen passes ----*- C++ -*-===//

#ifndef SNAPKV_CODEGEN_GPUUTILS_H
#define SNAPKV_CODEGEN_GPUUTILS_H

#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::snapkv {

/// An scf.forall mapped to GPU blocks (one kernel).
bool isBlockLoop(scf::ForallOp forall);
/// An scf.forall mapped to the threads (or warps) of a block.
bool isThreadLoop(scf::ForallOp forall);
/// `op` is nested in a thread loop.
bool isInThreadLoop(Operation *op);
/// The block loops nested in `root`, in program order.
SmallVector<scf::ForallOp> blockLoops(Operation *root);

} // namespace mlir::snapkv

#endif // SNAPKV_CODEGEN_GPUUTILS_H
