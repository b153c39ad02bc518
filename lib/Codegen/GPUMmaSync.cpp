//===- GPUMmaSync.cpp - warp-level vector.contract to nvgpu.mma.sync ------===//
//
// Upstream's vector-to-nvgpu rewrite, applied only to the vector ops of the
// contractions: see the pass description in Passes.td for why not to the
// whole function.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Conversion/VectorToGPU/VectorToGPU.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_GPUMMASYNC
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

bool isVectorOp(Operation *op) {
  auto isVector = [](Type t) { return isa<VectorType>(t); };
  return llvm::any_of(op->getResultTypes(), isVector) ||
         llvm::any_of(op->getOperandTypes(), isVector);
}

/// Moves the vector ops of `block` (the contractions, the reads that feed
/// them, the writes of their results) into a new scf.execute_region after
/// the last of them, so that the upstream rewrite sees nothing else. They
/// only use each other's results, and what runs between them has no side
/// effects, so nothing is reordered that could observe it.
FailureOr<scf::ExecuteRegionOp> isolate(RewriterBase &rewriter, Block &block) {
  SmallVector<Operation *> chain;
  for (Operation &op : block)
    if (isVectorOp(&op))
      chain.push_back(&op);
  for (Operation *op = chain.front(); op != chain.back();
       op = op->getNextNode())
    if (!isVectorOp(op) && !isMemoryEffectFree(op))
      return chain.back()->emitError(
          "snapkv-gpu-mma-sync: an op with side effects among the warp's "
          "contractions");
  for (Operation *op : chain)
    for (Operation *user : op->getUsers())
      if (!isVectorOp(user) || user->getBlock() != &block)
        return op->emitError("snapkv-gpu-mma-sync: a vector result used "
                             "outside the warp's contractions");
  rewriter.setInsertionPointAfter(chain.back());
  auto region = scf::ExecuteRegionOp::create(rewriter, chain.back()->getLoc(),
                                             TypeRange{});
  Block *body = rewriter.createBlock(&region.getRegion());
  for (Operation *op : chain)
    rewriter.moveOpBefore(op, body, body->end());
  rewriter.setInsertionPointToEnd(body);
  scf::YieldOp::create(rewriter, region.getLoc());
  return region;
}

struct GPUMmaSyncPass : snapkv::impl::GPUMmaSyncBase<GPUMmaSyncPass> {
  using Base::Base;

  void runOnOperation() override {
    llvm::SetVector<Block *> blocks;
    getOperation().walk([&](vector::ContractionOp contract) {
      blocks.insert(contract->getBlock());
    });
    IRRewriter rewriter(&getContext());
    for (Block *block : blocks) {
      FailureOr<scf::ExecuteRegionOp> region = isolate(rewriter, *block);
      if (failed(region))
        return signalPassFailure();
      RewritePatternSet patterns(&getContext());
      populatePrepareVectorToMMAPatterns(patterns, /*useNvGpu=*/true);
      if (failed(applyPatternsGreedily(*region, std::move(patterns))))
        return signalPassFailure();
      if (failed(convertVectorToNVVMCompatibleMMASync(rewriter, *region)))
        return signalPassFailure();
      // The rewrite leaves the replaced vector ops behind, dead.
      if (failed(
              applyPatternsGreedily(*region, RewritePatternSet(&getContext()))))
        return signalPassFailure();
      Block &body = region->getRegion().front();
      rewriter.eraseOp(body.getTerminator());
      rewriter.inlineBlockBefore(&body, *region);
      rewriter.eraseOp(*region);
    }
  }
};

} // namespace
