//===- Sdpa.cpp - snapkv.sdpa to linalg -----------------------------------===//
//
// What snapkv-fuse-attention did not turn into snapkv.attention (a mask that
// is not causal, or a pipeline without the fusion), lowered as the op is
// defined: f32 scores Q.K^T, scaled and masked, a softmax over the keys
// (zero for a row that sees no key, as torch's SDPA), P.V.
//
//===----------------------------------------------------------------------===//

#include "Formulation.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"

#include <limits>

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

namespace {

using utils::IteratorType;

/// An f32 tensor of `sizes` filled with `value`.
Value filled(OpBuilder &b, Location loc, ArrayRef<OpFoldResult> sizes,
             float value) {
  Value empty = tensor::EmptyOp::create(b, loc, sizes, b.getF32Type());
  return linalg::FillOp::create(b, loc, constF32(b, loc, value), empty)
      .getResult(0);
}

/// A map of `dims` loops onto the listed dims.
AffineMap dimsMap(MLIRContext *ctx, unsigned dims, ArrayRef<unsigned> of) {
  SmallVector<AffineExpr> exprs;
  for (unsigned d : of)
    exprs.push_back(getAffineDimExpr(d, ctx));
  return AffineMap::get(dims, 0, exprs, ctx);
}

/// `out[n, i, j] = sum_r f32(lhs[n, i, r]) * f32(rhs[...])` over the loops
/// (n, i, j, r), `rhs` indexed by the loops `rhsDims`, `out` of `sizes`.
Value contract(OpBuilder &b, Location loc, Value lhs, Value rhs,
               ArrayRef<OpFoldResult> sizes, ArrayRef<unsigned> rhsDims) {
  MLIRContext *ctx = b.getContext();
  Value init = filled(b, loc, sizes, 0.0f);
  auto par = IteratorType::parallel;
  return linalg::GenericOp::create(
             b, loc, init.getType(), ValueRange{lhs, rhs}, init,
             ArrayRef<AffineMap>{dimsMap(ctx, 4, {0, 1, 3}),
                                 dimsMap(ctx, 4, rhsDims),
                                 dimsMap(ctx, 4, {0, 1, 2})},
             ArrayRef<IteratorType>{par, par, par, IteratorType::reduction},
             [&](OpBuilder &nb, Location l, ValueRange args) {
               Value prod = arith::MulFOp::create(nb, l, toF32(nb, l, args[0]),
                                                  toF32(nb, l, args[1]));
               linalg::YieldOp::create(
                   nb, l,
                   arith::AddFOp::create(nb, l, prod, args[2]).getResult());
             })
      .getResult(0);
}

struct SdpaLowering : OpConversionPattern<SdpaOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(SdpaOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = b.getContext();
    Value q = adaptor.getQueries(), k = adaptor.getKeys(),
          v = adaptor.getValues(), mask = adaptor.getMask();
    SmallVector<OpFoldResult> qs = tensor::getMixedSizes(b, loc, q);
    SmallVector<OpFoldResult> vs = tensor::getMixedSizes(b, loc, v);
    OpFoldResult n = qs[0], lq = qs[1], lk = vs[1], dv = vs[2];
    auto par = IteratorType::parallel, red = IteratorType::reduction;
    float scale = static_cast<float>(op.getEffectiveScale());
    float negInf = -std::numeric_limits<float>::infinity();

    // (n, i, j, d): scores[n, i, j] = scale * sum_d q[n, i, d] k[n, j, d],
    // -inf where the mask hides key j.
    Value product = contract(b, loc, q, k, {n, lq, lk}, {0, 2, 3});
    AffineMap id3 = b.getMultiDimIdentityMap(3);
    SmallVector<Value> ins{product};
    SmallVector<AffineMap> maps{id3};
    if (mask) {
      ins.push_back(mask);
      maps.push_back(id3);
    }
    maps.push_back(id3);
    Value logits =
        linalg::GenericOp::create(
            b, loc, product.getType(), ins,
            tensor::EmptyOp::create(
                b, loc, SmallVector<OpFoldResult>{n, lq, lk}, b.getF32Type())
                .getResult(),
            maps, ArrayRef<IteratorType>{par, par, par},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              Value x =
                  arith::MulFOp::create(nb, l, args[0], constF32(nb, l, scale));
              if (mask)
                x = arith::SelectOp::create(nb, l, args[1], x,
                                            constF32(nb, l, negInf));
              linalg::YieldOp::create(nb, l, x);
            })
            .getResult(0);

    // Row maximum, then the exponentials' sum and P.V in one pass each.
    AffineMap rows = dimsMap(ctx, 3, {0, 1});
    Value max =
        linalg::GenericOp::create(
            b, loc, filled(b, loc, {n, lq}, negInf).getType(), logits,
            filled(b, loc, {n, lq}, negInf), ArrayRef<AffineMap>{id3, rows},
            ArrayRef<IteratorType>{par, par, red},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              linalg::YieldOp::create(
                  nb, l,
                  arith::MaximumFOp::create(nb, l, args[0], args[1])
                      .getResult());
            })
            .getResult(0);
    Value exps =
        linalg::GenericOp::create(
            b, loc, logits.getType(), ValueRange{logits, max},
            tensor::EmptyOp::create(
                b, loc, SmallVector<OpFoldResult>{n, lq, lk}, b.getF32Type())
                .getResult(),
            ArrayRef<AffineMap>{id3, rows, id3},
            ArrayRef<IteratorType>{par, par, par},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              // A row that sees no key has max -inf: its exponentials are 0.
              Value e =
                  math::ExpOp::create(nb, l, shifted(nb, l, args[0], args[1]));
              Value none =
                  arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ,
                                        args[1], constF32(nb, l, negInf));
              linalg::YieldOp::create(
                  nb, l,
                  arith::SelectOp::create(nb, l, none, constF32(nb, l, 0.0f), e)
                      .getResult());
            })
            .getResult(0);
    Value sum =
        linalg::GenericOp::create(
            b, loc, max.getType(), exps, filled(b, loc, {n, lq}, 0.0f),
            ArrayRef<AffineMap>{id3, rows},
            ArrayRef<IteratorType>{par, par, red},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              linalg::YieldOp::create(
                  nb, l,
                  arith::AddFOp::create(nb, l, args[0], args[1]).getResult());
            })
            .getResult(0);
    // (n, i, e, j): acc[n, i, e] = sum_j exps[n, i, j] v[n, j, e].
    Value acc = contract(b, loc, exps, v, {n, lq, dv}, {0, 3, 2});
    Type element = op.getType().getElementType();
    Value result =
        linalg::GenericOp::create(
            b, loc, op.getType(), ValueRange{acc, sum}, adaptor.getInit(),
            ArrayRef<AffineMap>{id3, rows, id3},
            ArrayRef<IteratorType>{par, par, par},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              Value seen =
                  arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OGT,
                                        args[1], constF32(nb, l, 0.0f));
              Value x = arith::SelectOp::create(
                  nb, l, seen, arith::DivFOp::create(nb, l, args[0], args[1]),
                  constF32(nb, l, 0.0f));
              if (element != x.getType())
                x = arith::TruncFOp::create(nb, l, element, x);
              linalg::YieldOp::create(nb, l, x);
            })
            .getResult(0);
    b.replaceOp(op, result);
    return success();
  }
};

} // namespace

void mlir::snapkv::detail::populateSdpaLowering(RewritePatternSet &patterns) {
  patterns.add<SdpaLowering>(patterns.getContext());
}
