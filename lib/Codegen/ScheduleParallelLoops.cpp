//===- ScheduleParallelLoops.cpp - a schedule for OpenMP loops ------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/OpenMP/OpenMPDialect.h"

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
      loop.setScheduleKindAttr(schedule);
    });
  }
};

} // namespace
