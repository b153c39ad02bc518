//===- Q41Contraction.h - contractions by GGUF Q4_1 weights -----*- C++ -*-===//
//
// The vector x Q4_1 matrix product of snapkv-quantize-weights' `format=q4_1`:
// a linalg.generic over (m, k / 32, h, j, n) whose body takes nibble h of
// byte (k / 32, j, n) (ggml's block: value j in the low nibble of byte j,
// value 16 + j in its high nibble), `q`, and multiply-adds `x * (q * d + m)`
// (the weight as gguf-py dequantizes it). snapkv-quantize-weights builds it
// (QuantizeQ41.cpp); snapkv-parallelize splits its blocks like the Q8_0
// product's; snapkv-vectorize hands one row of it to
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

/// Whether `op` is the Q4_1 product (a tile of it): a linalg.generic of
/// q41ContractionMaps, i8 bytes, f32 scales, mins and result, whose body is
/// `out + x * (uitofp((byte >> (4 * h)) & 15) * d + m)`, `x` perhaps
/// widened first.
inline bool isQ41Contraction(linalg::LinalgOp op) {
  auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
  if (!generic || generic.getNumDpsInputs() != 4 ||
      generic.getNumDpsInits() != 1 ||
      generic.getIndexingMapsArray() != q41ContractionMaps(op.getContext()))
    return false;
  auto element = [](Value v) { return getElementTypeOrSelf(v.getType()); };
  Type x = element(generic.getDpsInputs()[0]);
  if (!(x.isF32() || x.isBF16()) ||
      !element(generic.getDpsInputs()[1]).isInteger(8) ||
      !element(generic.getDpsInputs()[2]).isF32() ||
      !element(generic.getDpsInputs()[3]).isF32() ||
      !element(generic.getDpsInits()[0]).isF32())
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
  auto weight = product.getRhs().getDefiningOp<arith::AddFOp>();
  if (a != body.getArgument(0) || !weight ||
      weight.getRhs() != body.getArgument(3))
    return false;
  auto scaled = weight.getLhs().getDefiningOp<arith::MulFOp>();
  if (!scaled || scaled.getRhs() != body.getArgument(2))
    return false;
  auto wide = scaled.getLhs().getDefiningOp<arith::UIToFPOp>();
  auto nibble = wide ? wide.getIn().getDefiningOp<arith::AndIOp>() : nullptr;
  auto shift =
      nibble ? nibble.getLhs().getDefiningOp<arith::ShRUIOp>() : nullptr;
  if (!shift || shift.getLhs() != body.getArgument(1) ||
      !isConstantInt(nibble.getRhs(), 15))
    return false;
  auto times = shift.getRhs().getDefiningOp<arith::MulIOp>();
  auto cast =
      times ? times.getLhs().getDefiningOp<arith::IndexCastOp>() : nullptr;
  auto h = cast ? cast.getIn().getDefiningOp<linalg::IndexOp>() : nullptr;
  return h && h.getDim() == 2 && isConstantInt(times.getRhs(), 4);
}

/// Vectorises one row of a Q4_1 product (static sizes, as snapkv-parallelize
/// leaves it): per block, 16 rows of bytes read in address order, both
/// nibbles widened and multiply-added by their activations into a row of
/// block sums `sum q * x` (in the L1 cache), then `out += sums * d + m *
/// sum x` once per block (llama.cpp's factoring of `sum (q * d + m) * x`).
/// Failure, nothing changed, for any other op.
LogicalResult vectorizeQ41VectorTimesMatrix(RewriterBase &rewriter,
                                            linalg::LinalgOp op, int64_t lanes);

} // namespace mlir::snapkv

#endif // SNAPKV_CODEGEN_Q41CONTRACTION_H
