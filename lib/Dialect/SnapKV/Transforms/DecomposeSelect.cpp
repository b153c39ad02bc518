//===- DecomposeSelect.cpp - snapkv.select into its stage ops -------------===//
//
// Drives SelectOp::decomposeOperation (SelectDecomposition.cpp) over the IR;
// see Passes.td.
//
//===----------------------------------------------------------------------===//

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
    for (linalg::AggregatedOpInterface op : selects) {
      rewriter.setInsertionPoint(op);
      Operation *before = op->getPrevNode();
      FailureOr<SmallVector<Value>> stages = op.decomposeOperation(rewriter);
      if (failed(stages))
        continue;
      // The stages are lowered as the select's configuration says.
      Operation *first =
          before ? before->getNextNode() : &op->getBlock()->front();
      inheritLoweringConfig(
          op, llvm::make_range(first->getIterator(), op->getIterator()));
      rewriter.replaceOp(op, *stages);
    }
  }
};

} // namespace
