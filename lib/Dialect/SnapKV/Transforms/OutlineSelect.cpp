//===- OutlineSelect.cpp - each select in a function of its own -----------===//
//
// So that the layer code and the select's (about as large) lower and compile
// on different cores: see Passes.td.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_OUTLINESELECT
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {

/// Whether `op` shares its function with anything but the return.
bool sharesItsFunction(Operation *op, func::FuncOp func) {
  for (Operation &other : func.getBody().getOps())
    if (&other != op && !isa<func::ReturnOp>(other))
      return true;
  return false;
}

/// Outlines `op` of `parent` into a new function placed after `after`
/// (the parent or its previous outlined op's function); returns it.
func::FuncOp outline(Operation *op, func::FuncOp parent, Operation *after,
                     SymbolTable &symbols) {
  OpBuilder builder(parent);
  builder.setInsertionPointAfter(after);
  std::string name =
      (parent.getSymName() + "_" + op->getName().stripDialect()).str();
  auto type =
      builder.getFunctionType(op->getOperandTypes(), op->getResultTypes());
  auto callee = func::FuncOp::create(builder, op->getLoc(), name, type);
  callee.setPrivate();
  symbols.insert(callee); // renames on a clash
  Block *body = callee.addEntryBlock();
  builder.setInsertionPointToStart(body);
  IRMapping map;
  map.map(op->getOperands(), body->getArguments());
  Operation *clone = builder.clone(*op, map);
  func::ReturnOp::create(builder, op->getLoc(), clone->getResults());

  builder.setInsertionPoint(op);
  auto call =
      func::CallOp::create(builder, op->getLoc(), callee, op->getOperands());
  op->replaceAllUsesWith(call.getResults());
  op->erase();
  return callee;
}

struct OutlineSelectPass : snapkv::impl::OutlineSelectBase<OutlineSelectPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<std::pair<Operation *, func::FuncOp>> found;
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      for (Operation &op : func.getBody().getOps())
        if (isa<SelectOp, ScoreOp>(op) && sharesItsFunction(&op, func))
          found.push_back({&op, func});
    }
    SymbolTable symbols(module);
    DenseMap<Operation *, Operation *> last; // per function, in source order
    for (auto [op, func] : found) {
      Operation *&after = last[func];
      after = outline(op, func, after ? after : func.getOperation(), symbols);
    }
  }
};

} // namespace
