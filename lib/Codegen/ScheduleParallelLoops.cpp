//===- ScheduleParallelLoops.cpp - a schedule for OpenMP loops ------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_SCHEDULEPARALLELLOOPS
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

struct ScheduleParallelLoopsPass
    : snapkv::impl::ScheduleParallelLoopsBase<ScheduleParallelLoopsPass> {
  using Base::Base;

  void runOnOperation() override {
    auto schedule = omp::ClauseScheduleKindAttr::get(&getContext(), kind);
    getOperation().walk([&](omp::WsloopOp loop) {
      // A schedule of our own only where the program left it open, and not
      // where partial reductions would combine in the threads' order.
      if (loop.getScheduleKindAttr() || !loop.getReductionVars().empty())
        return;
      if (std::optional<int64_t> trips = tripCount(loop);
          trips && *trips <= staticTripCount)
        return;
      loop.setScheduleKindAttr(schedule);
    });
  }

  /// The iterations of `loop`'s nest, when they are constants.
  static std::optional<int64_t> tripCount(omp::WsloopOp loop) {
    auto nest = dyn_cast<omp::LoopNestOp>(loop.getWrappedLoop());
    if (!nest)
      return std::nullopt;
    int64_t trips = 1;
    for (auto [lb, ub, step] :
         llvm::zip(nest.getLoopLowerBounds(), nest.getLoopUpperBounds(),
                   nest.getLoopSteps())) {
      std::optional<int64_t> l = getConstantIntValue(lb),
                             u = getConstantIntValue(ub),
                             s = getConstantIntValue(step);
      if (!l || !u || !s || *s <= 0)
        return std::nullopt;
      // The upper bound is exclusive unless the nest says otherwise.
      int64_t span = *u - *l + (nest.getLoopInclusive() ? 1 : 0);
      trips *= std::max<int64_t>(0, (span + *s - 1) / *s);
    }
    return trips;
  }
};

} // namespace
