//===- FuseElementwise.cpp - fuse the elementwise chains of attention -----===//
//
// Upstream's elementwise fusion patterns, applied only where they pay: to
// ops with a dynamic loop (whose work grows with the prompt length: norms,
// rotary embeddings, activations, a decomposed softmax) at the top of a
// function body, where the consumer reads the producer without
// broadcasting it. See Passes.td for why not upstream's pass as it is.
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

/// A linalg op directly in a function body with a dynamic loop (its work
/// grows with the prompt length).
bool growsWithPrompt(Operation *op) {
  auto linalgOp = dyn_cast_or_null<linalg::LinalgOp>(op);
  return linalgOp && isa<func::FuncOp>(op->getParentOp()) &&
         llvm::any_of(linalgOp.getStaticLoopRanges(), ShapedType::isDynamic);
}

/// Whether the consumer reads each element of the operand once (its map is
/// a permutation): fusing a broadcast producer would recompute it for every
/// element it is broadcast to.
bool readsOnce(OpOperand *operand) {
  auto consumer = dyn_cast<linalg::LinalgOp>(operand->getOwner());
  return consumer && consumer.getMatchingIndexingMap(operand).isPermutation();
}

struct FuseElementwisePass
    : snapkv::impl::FuseElementwiseBase<FuseElementwisePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    linalg::populateElementwiseOpsFusionPatterns(
        patterns, [](OpOperand *operand) {
          Operation *producer = operand->get().getDefiningOp();
          return producer && producer->hasOneUse() &&
                 growsWithPrompt(producer) &&
                 growsWithPrompt(operand->getOwner()) && readsOnce(operand);
        });
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
