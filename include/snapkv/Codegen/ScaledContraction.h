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

/// The indexing maps of the vector x Q8_0 matrix product with int8
/// activations over (m, k / 32, k % 32 / 4, k % 4, n): activations `[m, k /
/// 32, k % 32 / 4, k % 4]` (int8), values `[k / 32, k % 32 / 4, n, k % 4]`
/// (int8: the weight `[K, N]` packed by 4 rows, `linalg.pack` with
/// inner_dims_pos = [0] and inner_tiles = [4], each column's 4 consecutive
/// values adjacent as `vpdpbusd` takes them), activation scales `[m, k /
/// 32]`, weight scales `[k / 32, n]`, result `[m, n]`.
inline SmallVector<AffineMap> int8ContractionMaps(MLIRContext *ctx) {
  AffineExpr m, kb, g, r, n;
  bindDims(ctx, m, kb, g, r, n);
  return {AffineMap::get(5, 0, {m, kb, g, r}, ctx),
          AffineMap::get(5, 0, {kb, g, n, r}, ctx),
          AffineMap::get(5, 0, {m, kb}, ctx),
          AffineMap::get(5, 0, {kb, n}, ctx),
          AffineMap::get(5, 0, {m, n}, ctx)};
}

/// Whether `op` is the int8 x int8 block product of
/// snapkv-quantize-weights' `activations=i8`: a linalg.generic of
/// int8ContractionMaps whose body is `out + sitofp(extsi(a) * extsi(q)) *
/// (scale_a * scale_q)` (the integer product exact; the kernels sum each
/// block's 32 of them in i32 before the one multiply by the scales).
inline bool isInt8ScaledContraction(linalg::LinalgOp op) {
  auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
  if (!generic || generic.getNumDpsInputs() != 4 ||
      generic.getNumDpsInits() != 1 ||
      generic.getIndexingMapsArray() != int8ContractionMaps(op.getContext()))
    return false;
  Block &body = generic.getRegion().front();
  auto add = body.getTerminator()->getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add || add.getLhs() != body.getArgument(4))
    return false;
  auto product = add.getRhs().getDefiningOp<arith::MulFOp>();
  if (!product)
    return false;
  auto widen = product.getLhs().getDefiningOp<arith::SIToFPOp>();
  auto scales = product.getRhs().getDefiningOp<arith::MulFOp>();
  if (!widen || !scales || scales.getLhs() != body.getArgument(2) ||
      scales.getRhs() != body.getArgument(3))
    return false;
  auto ints = widen.getIn().getDefiningOp<arith::MulIOp>();
  if (!ints)
    return false;
  auto a = ints.getLhs().getDefiningOp<arith::ExtSIOp>();
  auto q = ints.getRhs().getDefiningOp<arith::ExtSIOp>();
  return a && q && a.getIn() == body.getArgument(0) &&
         q.getIn() == body.getArgument(1) && a.getType().isInteger(32) &&
         q.getType().isInteger(32);
}

} // namespace mlir::snapkv

#endif // SNAPKV_CODEGEN_SCALEDCONTRACTION_H
