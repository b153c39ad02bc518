//===- LowerAsserts.cpp - cf.assert to stderr + abort ---------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/LLVMIR/FunctionCallUtils.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_LOWERASSERTS
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {
struct LowerAssertsPass : snapkv::impl::LowerAssertsBase<LowerAssertsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<cf::AssertOp> asserts;
    module.walk([&](cf::AssertOp op) { asserts.push_back(op); });
    if (asserts.empty())
      return;

    MLIRContext *ctx = &getContext();
    IRRewriter rewriter(ctx);
    rewriter.setInsertionPointToStart(module.getBody());
    Type i32 = IntegerType::get(ctx, 32), i64 = IntegerType::get(ctx, 64);
    Type ptr = LLVM::LLVMPointerType::get(ctx);
    FailureOr<LLVM::LLVMFuncOp> writeFn =
        LLVM::lookupOrCreateFn(rewriter, module, "write", {i32, ptr, i64}, i64);
    FailureOr<LLVM::LLVMFuncOp> abortFn = LLVM::lookupOrCreateFn(
        rewriter, module, "abort", {}, LLVM::LLVMVoidType::get(ctx));
    if (failed(writeFn) || failed(abortFn)) {
      module.emitError("snapkv-lower-asserts: 'write' or 'abort' is already "
                       "declared with another signature");
      return signalPassFailure();
    }

    for (auto [i, op] : llvm::enumerate(asserts)) {
      Location loc = op.getLoc();
      Block *before = op->getBlock();
      Block *after = rewriter.splitBlock(before, op->getIterator());
      Block *fail = rewriter.createBlock(after);
      std::string message = (op.getMsg() + "\n").str();
      Value text = LLVM::createGlobalString(
          loc, rewriter, ("snapkv_assert_msg_" + Twine(i)).str(), message,
          LLVM::Linkage::Internal);
      Value fd = LLVM::ConstantOp::create(rewriter, loc, i32,
                                          rewriter.getI32IntegerAttr(2));
      Value len = LLVM::ConstantOp::create(
          rewriter, loc, i64, rewriter.getI64IntegerAttr(message.size()));
      LLVM::CallOp::create(rewriter, loc, *writeFn, ValueRange{fd, text, len});
      LLVM::CallOp::create(rewriter, loc, *abortFn, ValueRange{});
      LLVM::UnreachableOp::create(rewriter, loc);
      rewriter.setInsertionPointToEnd(before);
      cf::CondBranchOp::create(rewriter, loc, op.getArg(), after, ValueRange{},
                               fail, ValueRange{});
      rewriter.eraseOp(op);
    }
  }
};
} // namespace
