//===- ScaledContraction.h - contractions by block-scaled weights -*- C++
//-*-===//
//
// The vector x Q8_0 matrix product of snapkv-quantize-weights: a
// linalg.generic whose body is `out + a * (sitofp(q) * scale)`. Upstream's
// contraction interface wants two inputs; the CPU codegen passes tile this
// one like a contraction (columns to threads, one reduction step per
// register tile).
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_CODEGEN_SCALEDCONTRACTION_H
#define SNAPKV_CODEGEN_SCALEDCONTRACTION_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"

namespace mlir::snapkv {

/// Whether `op` is a linalg.generic with one init and a reduction whose body
/// is `out + a * (sitofp(q) * scale)`.
inline bool isScaledContraction(linalg::LinalgOp op) {
  auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
  if (!generic || generic.getNumDpsInits() != 1 ||
      generic.getNumReductionLoops() == 0)
    return false;
  Block &body = generic.getRegion().front();
  if (body.getOperations().size() != 5)
    return false;
  auto add = body.getTerminator()->getOperand(0).getDefiningOp<arith::AddFOp>();
  Value out = body.getArguments().back();
  if (!add || (add.getLhs() != out && add.getRhs() != out))
    return false;
  auto product = (add.getLhs() == out ? add.getRhs() : add.getLhs())
                     .getDefiningOp<arith::MulFOp>();
  if (!product)
    return false;
  auto scaled = product.getRhs().getDefiningOp<arith::MulFOp>();
  return scaled && scaled.getLhs().getDefiningOp<arith::SIToFPOp>();
}

} // namespace mlir::snapkv

#endif // SNAPKV_CODEGEN_SCALEDCONTRACTION_H
