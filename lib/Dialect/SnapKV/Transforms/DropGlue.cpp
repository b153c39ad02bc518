//===- DropGlue.cpp - erase entry points that only call -------------------===//
//
// A model's entry point that only calls one layer function per layer may be
// run by the Python runner, call by call, rather than compiled: one function
// less that takes every weight (hundreds of memref descriptors, which clang
// compiles slowly). The runner does so for the entry points it calls once
// per prompt, not for a decode step. What it calls becomes public so that the
// runner can call each callee's C interface.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_DROPGLUE
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

/// Whether `func` has one block of func.call, tensor.cast, static
/// tensor.extract_slice (a layer's row counts, snapkv-append-in-place) and
/// func.return: what snapkv-describe-module describes as glue.
static bool isGlue(func::FuncOp func) {
  if (func.isExternal() || !func.getBody().hasOneBlock())
    return false;
  return llvm::all_of(func.getBody().front(), [](Operation &op) {
    if (auto slice = dyn_cast<tensor::ExtractSliceOp>(op))
      return slice.getOffsets().empty() && slice.getSizes().empty() &&
             slice.getStrides().empty();
    return isa<func::CallOp, tensor::CastOp, func::ReturnOp>(op);
  });
}

namespace {
struct DropGlue : public mlir::snapkv::impl::DropGlueBase<DropGlue> {
  using DropGlueBase::DropGlueBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> glue;
    for (const std::string &name : functions) {
      auto func = module.lookupSymbol<func::FuncOp>(name);
      if (!func) {
        emitError(module.getLoc()) << "snapkv-drop-glue: no function @" << name;
        return signalPassFailure();
      }
      if (!isGlue(func)) {
        emitError(func.getLoc())
            << "snapkv-drop-glue: @" << name
            << " holds more than func.call, tensor.cast, static "
               "tensor.extract_slice and func.return";
        return signalPassFailure();
      }
      glue.push_back(func);
    }
    for (func::FuncOp func : glue) {
      func.walk([&](func::CallOp call) {
        // A declaration must stay private; what defines it is linked in.
        auto callee = module.lookupSymbol<func::FuncOp>(call.getCalleeAttr());
        if (callee && !callee.isExternal())
          callee.setPublic();
      });
    }
    for (func::FuncOp func : glue)
      func.erase();
  }
};
} // namespace
