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

/// The indexing maps of the vector x Q8_0 matrix product over (m, k / 32,
/// k % 32, n): activations `[m, k / 32, k % 32]`, values `[k / 32, k % 32,
/// n]`, scales `[k / 32, n]`, result `[m, n]`.
inline SmallVector<AffineMap> scaledContractionMaps(MLIRContext *ctx) {
  AffineExpr m, kb, kk, n;
  bindDims(ctx, m, kb, kk, n);
  return {AffineMap::get(4, 0, {m, kb, kk}, ctx),
          AffineMap::get(4, 0, {kb, kk, n}, ctx),
          AffineMap::get(4, 0, {kb, n}, ctx),
          AffineMap::get(4, 0, {m, n}, ctx)};
}

/// Whether `op` is a linalg.generic with one init and a reduction whose body
/// is `out + a * (sitofp(q) * scale)`, `a` perhaps widened first (`extf`).
inline bool isScaledContraction(linalg::LinalgOp op) {
  auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
  if (!generic || generic.getNumDpsInits() != 1 ||
      generic.getNumReductionLoops() == 0)
    return false;
  Block &body = generic.getRegion().front();
  if (body.getOperations().size() != 5 && body.getOperations().size() != 6)
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
  if (body.getOperations().size() == 6 &&
      !product.getLhs().getDefiningOp<arith::ExtFOp>())
    return false;
  return scaled && scaled.getLhs().getDefiningOp<arith::SIToFPOp>();
}

} // namespace mlir::snapkv

#endif // SNAPKV_CODEGEN_SCALEDCONTRACTION_H
