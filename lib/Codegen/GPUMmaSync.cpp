//===- GPUMmaSync.cpp - warp-level vector.contract to nvgpu.mma.sync ------===//
//
// Upstream's vector-to-nvgpu rewrite, applied only where the contractions
// are: see the pass description in Passes.td for why not function-wide.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Conversion/VectorToGPU/VectorToGPU.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_GPUMMASYNC
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

struct GPUMmaSyncPass : snapkv::impl::GPUMmaSyncBase<GPUMmaSyncPass> {
  using Base::Base;

  void runOnOperation() override {
    llvm::SetVector<Operation *> roots;
    getOperation().walk([&](vector::ContractionOp contract) {
      roots.insert(contract->getParentOp());
    });
    for (Operation *root : roots) {
      RewritePatternSet patterns(&getContext());
      populatePrepareVectorToMMAPatterns(patterns, /*useNvGpu=*/true);
      if (failed(applyPatternsGreedily(root, std::move(patterns))))
        return signalPassFailure();
      IRRewriter rewriter(&getContext());
      if (failed(convertVectorToNVVMCompatibleMMASync(rewriter, root)))
        return signalPassFailure();
      // The rewrite leaves the replaced vector ops behind, dead.
      if (failed(applyPatternsGreedily(root, RewritePatternSet(&getContext()))))
        return signalPassFailure();
    }
  }
};

} // namespace
