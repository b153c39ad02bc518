//===- ConfigureLowering.cpp - each snapkv op's lowering for a target -----===//
//
// Writes #snapkv.lowering_config on the ops convert-snapkv-to-linalg lowers;
// see Passes.td.
//
//===----------------------------------------------------------------------===//

#include "Formulation.h"
#include "snapkv/Conversion/SnapKVToLinalg/SnapKVToLinalg.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_CONFIGURELOWERING
#include "snapkv/Conversion/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

namespace {

struct ConfigureLoweringPass
    : snapkv::impl::ConfigureLoweringBase<ConfigureLoweringPass> {
  using Base::Base;

  void runOnOperation() override {
    std::optional<SnapKVToLinalgOptions> sized = sizeOptions(
        getOperation(), getArgument(), keyTile, queryTile, chunk, keepLogits);
    if (!sized)
      return signalPassFailure();
    SnapKVToLinalgOptions options = *sized;
    if (threads < 1 || threads > 1024) {
      emitError(getOperation()->getLoc())
          << "snapkv-configure-lowering: threads must be in [1, 1024], got "
          << static_cast<int64_t>(threads);
      return signalPassFailure();
    }
    options.threads = threads;
    options.tensorCores = tensorCores;
    LoweringConfigAttr config =
        getLoweringConfig(&getContext(), target, options);
    bool gpu = target == LoweringTarget::gpu;
    WalkResult result = getOperation()->walk([&](Operation *op) {
      if (!isa<SelectOp, ScoreOp, TopPositionsOp, GatherOp, SelectAdaptiveOp,
               AttentionOp, RaggedAttentionOp>(op) ||
          op->hasAttr("snapkv.lowering_config"))
        return WalkResult::advance();
      if (gpu &&
          (isa<AttentionOp, RaggedAttentionOp>(op) || scoresAccumulated(op))) {
        op->emitOpError() << "has no GPU lowering (target=gpu); it is lowered "
                             "for the CPU only";
        return WalkResult::interrupt();
      }
      op->setAttr("snapkv.lowering_config", config);
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
