//===- FuseParallelLoops.cpp - independent sibling foralls as one ---------===//
//
// CPU step after snapkv-parallelize: each scf.forall becomes one OpenMP
// parallel region (a fork, a join, and the other threads idle while the
// code between regions runs). Independent foralls over the same iterations
// (a decode step's Q, K and V products, its gate and up products) are moved
// together and fused with upstream's fuseIndependentSiblingForallLoops, so
// that they run in one region. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_FUSEPARALLELLOOPS
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

/// Whether `loop` at most reads memory: its iterations may then run beside
/// another such loop's, and before ops that do not write.
bool onlyReads(scf::ForallOp loop) {
  return !loop->walk([&](Operation *op) {
                // The loop's results are SSA values, not memory writes.
                if (op == loop.getOperation() ||
                    isa<scf::InParallelOp, tensor::ParallelInsertSliceOp>(op))
                  return WalkResult::advance();
                if (auto effects = dyn_cast<MemoryEffectOpInterface>(op))
                  return effects.onlyHasEffect<MemoryEffects::Read>() ||
                                 effects.hasNoEffect()
                             ? WalkResult::advance()
                             : WalkResult::interrupt();
                return op->hasTrait<OpTrait::HasRecursiveMemoryEffects>()
                           ? WalkResult::advance()
                           : WalkResult::interrupt();
              })
              .wasInterrupted();
}

bool sameIterations(scf::ForallOp a, scf::ForallOp b) {
  return a.getMapping() == b.getMapping() &&
         isEqualConstantIntOrValueArray(a.getMixedLowerBound(),
                                        b.getMixedLowerBound()) &&
         isEqualConstantIntOrValueArray(a.getMixedUpperBound(),
                                        b.getMixedUpperBound()) &&
         isEqualConstantIntOrValueArray(a.getMixedStep(), b.getMixedStep());
}

struct FuseParallelLoopsPass
    : snapkv::impl::FuseParallelLoopsBase<FuseParallelLoopsPass> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<Block *> blocks;
    getOperation().walk([&](Block *block) { blocks.push_back(block); });
    IRRewriter rewriter(&getContext());
    for (Block *block : blocks) {
      scf::ForallOp previous;
      for (Operation &op : llvm::make_early_inc_range(*block)) {
        auto loop = dyn_cast<scf::ForallOp>(op);
        if (!loop)
          continue;
        if (previous && moveAfter(loop, previous)) {
          // The fused loop takes `previous`'s iterations first, then
          // `loop`'s: each computes what it did alone.
          previous =
              fuseIndependentSiblingForallLoops(previous, loop, rewriter);
          continue;
        }
        previous = loop;
      }
    }
  }

  /// Moves `loop` right after `previous` (a loop earlier in the same block),
  /// if it can run there: the two have the same iterations and only read,
  /// `loop` uses nothing that `previous` or the ops between compute (but
  /// for effect-free ops that need nothing else from there, such as its
  /// tensor.empty outputs and their fills, which move up with it), and no op
  /// between writes memory. False (nothing changed) otherwise.
  bool moveAfter(scf::ForallOp loop, scf::ForallOp previous) {
    if (!sameIterations(previous, loop) || !onlyReads(previous) ||
        !onlyReads(loop))
      return false;
    SetVector<Value> used;
    getUsedValuesDefinedAbove(loop.getRegion(), used);
    used.insert(loop->operand_begin(), loop->operand_end());
    SetVector<Operation *> movable;
    for (Value value : used)
      if (!hoistable(value, previous, movable))
        return false;
    for (Operation *op = previous->getNextNode(); op != loop.getOperation();
         op = op->getNextNode())
      if (!movable.contains(op) && !isMemoryEffectFree(op))
        return false;
    // `movable` lists each op after the ops it uses.
    for (Operation *def : movable)
      def->moveBefore(previous);
    loop->moveAfter(previous);
    return true;
  }

  /// Whether `value` is available before `previous`, or computed after it by
  /// effect-free ops from values that are (added to
  /// `movable`, each after its operands' ops).
  static bool hoistable(Value value, scf::ForallOp previous,
                        SetVector<Operation *> &movable) {
    Operation *def = value.getDefiningOp();
    if (!def || def->getBlock() != previous->getBlock() ||
        def->isBeforeInBlock(previous) || movable.contains(def))
      return true;
    if (def == previous.getOperation() || !isMemoryEffectFree(def))
      return false;
    SetVector<Value> used;
    used.insert(def->operand_begin(), def->operand_end());
    for (Region &region : def->getRegions())
      getUsedValuesDefinedAbove(region, used);
    for (Value operand : used)
      if (!hoistable(operand, previous, movable))
        return false;
    movable.insert(def);
    return true;
  }
};

} // namespace
