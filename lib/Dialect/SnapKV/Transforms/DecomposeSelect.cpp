//===- DecomposeSelect.cpp - snapkv.select into its stage ops -------------===//
//
// Drives SelectOp::decomposeOperation (SelectDecomposition.cpp) over the IR;
// see Passes.td.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/IR/SelectDecomposition.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_DECOMPOSESELECT
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {

struct DecomposeSelectPass
    : snapkv::impl::DecomposeSelectBase<DecomposeSelectPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<linalg::AggregatedOpInterface> selects;
    getOperation()->walk([&](Operation *op) {
      if (isa<SelectOp>(op) || (adaptive && isa<SelectAdaptiveOp>(op)))
        selects.push_back(cast<linalg::AggregatedOpInterface>(op));
    });
    IRRewriter rewriter(&getContext());
    // The stages are lowered as the select's configuration says; a select
    // with no stage form stays.
    for (linalg::AggregatedOpInterface op : selects)
      (void)decomposeSelect(rewriter, op);
  }
};

} // namespace
