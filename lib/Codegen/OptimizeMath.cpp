//===- OptimizeMath.cpp - polynomial exp and FMA contraction --------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_OPTIMIZEMATH
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {
/// addf(acc, mulf(a, b) {contract}) -> fma(a, b, acc), also through the
/// unit-dim vector.shape_cast the vectoriser leaves between them. The
/// multiply's flag is the permission (see the pass description).
struct ContractMulAdd : OpRewritePattern<arith::AddFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::AddFOp add,
                                PatternRewriter &rewriter) const override {
    for (unsigned i = 0; i < 2; ++i) {
      Value operand = add->getOperand(i);
      auto cast = operand.getDefiningOp<vector::ShapeCastOp>();
      if (cast && cast->hasOneUse())
        operand = cast.getSource();
      auto mul = operand.getDefiningOp<arith::MulFOp>();
      if (!mul || !mul->hasOneUse() ||
          !arith::bitEnumContainsAll(mul.getFastmath(),
                                     arith::FastMathFlags::contract))
        continue;
      Value lhs = mul.getLhs(), rhs = mul.getRhs();
      if (lhs.getType() != add.getType()) {
        auto vecTy = cast.getResultVectorType();
        lhs = vector::ShapeCastOp::create(rewriter, add.getLoc(), vecTy, lhs);
        rhs = vector::ShapeCastOp::create(rewriter, add.getLoc(), vecTy, rhs);
      }
      rewriter.replaceOpWithNewOp<math::FmaOp>(add, lhs, rhs,
                                               add->getOperand(1 - i));
      return success();
    }
    return failure();
  }
};

struct OptimizeMathPass : snapkv::impl::OptimizeMathBase<OptimizeMathPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateMathPolynomialApproximationPatterns(patterns, [](StringRef name) {
      return name == math::ExpOp::getOperationName();
    });
    patterns.add<ContractMulAdd>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
