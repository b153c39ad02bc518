//===- Q41Contraction.h - contractions by GGUF Q4_1 weights -----*- C++ -*-===//
//
// The vector x Q4_1 matrix product of snapkv-quantize-weights' `format=q4_1`:
// a linalg.generic over (m, k / 32, h, j, n) whose body takes nibble h of
// byte (k / 32, j, n) (ggml's block: value j in the low nibble of byte j,
// value 16 + j in its high nibble), `q`, and multiply-adds `x * (q * d + m)`
// (the weight as gguf-py dequantizes it); with int8 activations
// (`activations=i8`), `(a * scale_a) * (q * d + m)`. snapkv-quantize-weights
// builds it (QuantizeQ41.cpp); snapkv-parallelize splits its blocks like the
// Q8_0 product's; snapkv-vectorize hands one row of it to
// vectorizeQ41VectorTimesMatrix (Q41Microkernel.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_CODEGEN_Q41CONTRACTION_H
#define SNAPKV_CODEGEN_Q41CONTRACTION_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::snapkv {

/// Values per Q4_1 block along the reduction, and bytes (pairs) per block.
constexpr int64_t kQ41Block = 32, kQ41Pairs = 16;

/// The indexing maps over (m, k / 32, h, j, n): activations `[m, k / 32, 2,
/// 16]`, nibble bytes `[k / 32, 16, n]`, scales `d` and mins `m` `[k / 32,
/// n]`, result `[m, n]`.
inline SmallVector<AffineMap> q41ContractionMaps(MLIRContext *ctx) {
  AffineExpr m, kb, h, j, n;
  bindDims(ctx, m, kb, h, j, n);
  return {
      AffineMap::get(5, 0, {m, kb, h, j}, ctx),
      AffineMap::get(5, 0, {kb, j, n}, ctx), AffineMap::get(5, 0, {kb, n}, ctx),
      AffineMap::get(5, 0, {kb, n}, ctx), AffineMap::get(5, 0, {m, n}, ctx)};
}

inline bool isConstantInt(Value value, uint64_t expected) {
  APInt constant;
  return matchPattern(value, m_ConstantInt(&constant)) && constant == expected;
}

/// Whether `weight` (in a body over (m, k / 32, h, j, n)) is `uitofp((byte >>
/// (4 * h)) & 15) * d + m` of the block arguments `byte`, `d` and `m`.
inline bool isQ41Weight(Value weight, Value byte, Value d, Value m) {
  auto sum = weight.getDefiningOp<arith::AddFOp>();
  if (!sum || sum.getRhs() != m)
    return false;
  auto scaled = sum.getLhs().getDefiningOp<arith::MulFOp>();
  if (!scaled || scaled.getRhs() != d)
    return false;
  auto wide = scaled.getLhs().getDefiningOp<arith::UIToFPOp>();
  auto nibble = wide ? wide.getIn().getDefiningOp<arith::AndIOp>() : nullptr;
  auto shift =
      nibble ? nibble.getLhs().getDefiningOp<arith::ShRUIOp>() : nullptr;
  if (!shift || shift.getLhs() != byte || !isConstantInt(nibble.getRhs(), 15))
    return false;
  auto times = shift.getRhs().getDefiningOp<arith::MulIOp>();
  auto cast =
      times ? times.getLhs().getDefiningOp<arith::IndexCastOp>() : nullptr;
  auto h = cast ? cast.getIn().getDefiningOp<linalg::IndexOp>() : nullptr;
  return h && h.getDim() == 2 && isConstantInt(times.getRhs(), 4);
}

/// Whether the element types of `op`'s operands are `types` (null: f32 or
/// bf16).
inline bool hasElementTypes(linalg::GenericOp op, ArrayRef<Type> types) {
  if (op->getNumOperands() != types.size())
    return false;
  for (auto [operand, type] : llvm::zip(op->getOperands(), types)) {
    Type element = getElementTypeOrSelf(operand.getType());
    if (type ? element != type : !(element.isF32() || element.isBF16()))
      return false;
  }
  return true;
}

/// Whether `op` is the Q4_1 product (a tile of it): a linalg.generic of
/// q41ContractionMaps whose body is `out + x * weight` (isQ41Weight), `x`
/// (f32 or bf16) perhaps widened first.
inline bool isQ41Contraction(linalg::LinalgOp op) {
  auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
  if (!generic ||
      generic.getIndexingMapsArray() != q41ContractionMaps(op.getContext()))
    return false;
  Builder b(op.getContext());
  Type f32 = b.getF32Type();
  if (!hasElementTypes(generic, {nullptr, b.getI8Type(), f32, f32, f32}))
    return false;
  Block &body = generic.getRegion().front();
  auto sum = body.getTerminator()->getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!sum || sum.getLhs() != body.getArgument(4))
    return false;
  auto product = sum.getRhs().getDefiningOp<arith::MulFOp>();
  if (!product)
    return false;
  Value a = product.getLhs();
  if (auto ext = a.getDefiningOp<arith::ExtFOp>())
    a = ext.getIn();
  return a == body.getArgument(0) &&
         isQ41Weight(product.getRhs(), body.getArgument(1), body.getArgument(2),
                     body.getArgument(3));
}

/// The indexing maps of the Q4_1 product with int8 activations over (m, k /
/// 32, h, j, n): activations `[m, k / 32, 2, 16]` (i8), nibble bytes, their
/// scales `[m, k / 32]`, then as q41ContractionMaps.
inline SmallVector<AffineMap> q41Int8ContractionMaps(MLIRContext *ctx) {
  SmallVector<AffineMap> maps = q41ContractionMaps(ctx);
  maps.insert(
      maps.begin() + 2,
      AffineMap::get(5, 0, {getAffineDimExpr(0, ctx), getAffineDimExpr(1, ctx)},
                     ctx));
  return maps;
}

/// Whether `op` is the Q4_1 product with int8 activations
/// (snapkv-quantize-weights' `activations=i8`): a linalg.generic of
/// q41Int8ContractionMaps whose body is `out + (sitofp(a) * scale_a) *
/// weight` (isQ41Weight): the dequantized activation times the weight.
inline bool isQ41Int8Contraction(linalg::LinalgOp op) {
  auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
  if (!generic ||
      generic.getIndexingMapsArray() != q41Int8ContractionMaps(op.getContext()))
    return false;
  Builder b(op.getContext());
  Type f32 = b.getF32Type(), i8 = b.getI8Type();
  if (!hasElementTypes(generic, {i8, i8, f32, f32, f32, f32}))
    return false;
  Block &body = generic.getRegion().front();
  auto sum = body.getTerminator()->getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!sum || sum.getLhs() != body.getArgument(5))
    return false;
  auto product = sum.getRhs().getDefiningOp<arith::MulFOp>();
  auto activation =
      product ? product.getLhs().getDefiningOp<arith::MulFOp>() : nullptr;
  auto wide = activation ? activation.getLhs().getDefiningOp<arith::SIToFPOp>()
                         : nullptr;
  return wide && wide.getIn() == body.getArgument(0) &&
         activation.getRhs() == body.getArgument(2) &&
         isQ41Weight(product.getRhs(), body.getArgument(1), body.getArgument(3),
                     body.getArgument(4));
}

/// Either form of the Q4_1 product.
inline bool isQ41Product(linalg::LinalgOp op) {
  return isQ41Contraction(op) || isQ41Int8Contraction(op);
}

/// Vectorises one row of a Q4_1 product (static sizes, as
/// snapkv-parallelize leaves it). Float activations: per block, 16 rows of
/// bytes read in address order, both nibbles widened and multiply-added by
/// their activations into a row of block sums `sum q * x` (in the L1 cache),
/// then `out += sums * d + m * sum x` once per block (llama.cpp's factoring
/// of `sum (q * d + m) * x`). Int8 activations: the block sums `sum q * a`
/// in i32 (`vnni`, 512-bit vectors: `vpdpbusd` on the nibbles, 4 rows per
/// lane, the unsigned operand as they are; else widened i32 multiplies),
/// then `out += sums * (scale_a * d) + (scale_a * sum a) * m`; `vnni` is the
/// default where the op has no `snapkv.microkernel` of
/// snapkv-configure-lowering. Failure, nothing changed, for any other op.
LogicalResult vectorizeQ41VectorTimesMatrix(RewriterBase &rewriter,
                                            linalg::LinalgOp op, int64_t lanes,
                                            bool vnni);

} // namespace mlir::snapkv

#endif // SNAPKV_CODEGEN_Q41CONTRACTION_H
