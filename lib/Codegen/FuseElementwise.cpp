//===- FuseElementwise.cpp - fuse the elementwise chains of attention -----===//
//
// Upstream's elementwise fusion patterns, applied only where they pay: to
// ops with at least two dynamic loops (quadratic in the prompt length, the
// decomposed softmax of attention), at the top of a function body. See
// Passes.td for why not upstream's pass as it is.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

/// A linalg op directly in a function body with two or more dynamic loops.
bool isQuadratic(Operation *op) {
  auto linalgOp = dyn_cast_or_null<linalg::LinalgOp>(op);
  return linalgOp && isa<func::FuncOp>(op->getParentOp()) &&
         llvm::count_if(linalgOp.getStaticLoopRanges(),
                        ShapedType::isDynamic) >= 2;
}

struct FuseElementwisePass
    : snapkv::impl::FuseElementwiseBase<FuseElementwisePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    linalg::populateElementwiseOpsFusionPatterns(
        patterns, [](OpOperand *operand) {
          Operation *producer = operand->get().getDefiningOp();
          return producer && producer->hasOneUse() && isQuadratic(producer) &&
                 isQuadratic(operand->getOwner());
        });
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
