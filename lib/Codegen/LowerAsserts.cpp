//===- LowerAsserts.cpp - cf.assert to abort() or to an error report ------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/FunctionCallUtils.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/UB/IR/UBOps.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_LOWERASSERTS
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

static constexpr StringLiteral kErrorSlot = "snapkv_error_slot";
static constexpr StringLiteral kLastError = "snapkv_last_error";

namespace {

struct LowerAssertsPass : snapkv::impl::LowerAssertsBase<LowerAssertsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (mode == snapkv::AssertMode::report)
      checkAllocations(module);
    SmallVector<cf::AssertOp> asserts;
    module.walk([&](cf::AssertOp op) { asserts.push_back(op); });
    LogicalResult result = mode == snapkv::AssertMode::report
                               ? lowerToReport(module, asserts)
                               : lowerToAbort(module, asserts);
    if (failed(result))
      signalPassFailure();
  }

  void checkAllocations(ModuleOp module);
  LogicalResult lowerToAbort(ModuleOp module, ArrayRef<cf::AssertOp> asserts);
  LogicalResult lowerToReport(ModuleOp module, ArrayRef<cf::AssertOp> asserts);
};

} // namespace

/// A failed check writes its message to stderr and aborts.
LogicalResult LowerAssertsPass::lowerToAbort(ModuleOp module,
                                             ArrayRef<cf::AssertOp> asserts) {
  if (asserts.empty())
    return success();
  MLIRContext *ctx = &getContext();
  IRRewriter rewriter(ctx);
  rewriter.setInsertionPointToStart(module.getBody());
  Type i32 = IntegerType::get(ctx, 32), i64 = IntegerType::get(ctx, 64);
  Type ptr = LLVM::LLVMPointerType::get(ctx);
  FailureOr<LLVM::LLVMFuncOp> writeFn =
      LLVM::lookupOrCreateFn(rewriter, module, "write", {i32, ptr, i64}, i64);
  FailureOr<LLVM::LLVMFuncOp> abortFn = LLVM::lookupOrCreateFn(
      rewriter, module, "abort", {}, LLVM::LLVMVoidType::get(ctx));
  if (failed(writeFn) || failed(abortFn))
    return mlir::emitError(module.getLoc())
           << "snapkv-lower-asserts: 'write' or 'abort' is already declared "
              "with another signature";

  for (auto [i, check] : llvm::enumerate(asserts)) {
    cf::AssertOp op = check; // ArrayRef hands out const ops.
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
  return success();
}

/// In report mode a heap allocation that fails (malloc returns null) is a
/// failed check too, instead of a write through a null pointer later.
void LowerAssertsPass::checkAllocations(ModuleOp module) {
  module.walk([](memref::AllocOp alloc) {
    auto func = dyn_cast<func::FuncOp>(alloc->getParentOp());
    if (!func)
      return;
    OpBuilder b(alloc->getContext());
    b.setInsertionPointAfter(alloc);
    Location loc = alloc.getLoc();
    Value pointer =
        memref::ExtractAlignedPointerAsIndexOp::create(b, loc, alloc);
    Value null = arith::ConstantIndexOp::create(b, loc, 0);
    Value ok =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, pointer, null);
    std::string message;
    llvm::raw_string_ostream os(message);
    os << "out of memory: @" << func.getSymName() << " could not allocate a "
       << alloc.getType();
    cf::AssertOp::create(b, loc, ok, message);
  });
}

/// A value of `type` for an early return that nobody reads: memref
/// descriptors are all zeros (null pointers, so a careless free() is
/// harmless), scalars and vectors zero, anything else poison.
static Value placeholder(OpBuilder &b, Location loc, Type type,
                         const LLVMTypeConverter &converter) {
  if (isa<BaseMemRefType>(type)) {
    Type descriptor = converter.convertType(type);
    if (descriptor) {
      Value zero = LLVM::ZeroOp::create(b, loc, descriptor);
      return UnrealizedConversionCastOp::create(b, loc, type, zero)
          .getResult(0);
    }
  }
  if (isa<LLVM::LLVMPointerType>(type))
    return LLVM::ZeroOp::create(b, loc, type);
  if (isa<IntegerType, IndexType, FloatType, VectorType>(type))
    if (auto zero = dyn_cast_or_null<TypedAttr>(b.getZeroAttr(type)))
      return arith::ConstantOp::create(b, loc, zero);
  return ub::PoisonOp::create(b, loc, type);
}

/// A failed check stores its message in @snapkv_error_slot and returns from
/// its function; callers of functions that can fail check the slot after the
/// call and return too. Every public function clears the slot on entry, and
/// the exported @snapkv_last_error returns it (null after a call that
/// succeeded).
LogicalResult LowerAssertsPass::lowerToReport(ModuleOp module,
                                              ArrayRef<cf::AssertOp> asserts) {
  MLIRContext *ctx = &getContext();
  for (StringRef name : {kErrorSlot, kLastError})
    if (Operation *clash = module.lookupSymbol(name))
      return mlir::emitError(clash->getLoc())
             << "snapkv-lower-asserts: mode=report defines @" << name
             << ", which this module already has";

  // Which functions can fail: those with a check, and their callers. Every
  // check and every call to a function that can fail must sit directly in a
  // func.func body so that it can return.
  auto funcOf = [](Operation *op) {
    return dyn_cast<func::FuncOp>(op->getParentOp());
  };
  llvm::SetVector<func::FuncOp> failing;
  for (cf::AssertOp op : asserts) {
    func::FuncOp func = funcOf(op);
    if (!func)
      return mlir::emitError(op.getLoc())
             << "snapkv-lower-asserts: mode=report cannot return from a check "
                "inside '"
             << op->getParentOp()->getName()
             << "' (lower it to a function body first, e.g. with "
                "convert-scf-to-cf)";
    failing.insert(func);
  }
  SmallVector<func::CallOp> calls;
  module.walk([&](func::CallOp call) { calls.push_back(call); });
  SmallVector<func::CallOp> checkedCalls;
  llvm::DenseSet<Operation *> seen;
  for (bool changed = true; changed;) {
    changed = false;
    for (func::CallOp call : calls) {
      auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
      if (!callee || !failing.contains(callee) || seen.contains(call))
        continue;
      func::FuncOp caller = funcOf(call);
      if (!caller)
        return mlir::emitError(call.getLoc())
               << "snapkv-lower-asserts: mode=report cannot return from a "
                  "call of @"
               << call.getCallee() << " (which can fail) inside '"
               << call->getParentOp()->getName() << "'";
      seen.insert(call);
      checkedCalls.push_back(call);
      changed |= failing.insert(caller);
    }
  }

  IRRewriter rewriter(ctx);
  Location moduleLoc = module.getLoc();
  Type ptr = LLVM::LLVMPointerType::get(ctx);
  rewriter.setInsertionPointToStart(module.getBody());
  auto slot = LLVM::GlobalOp::create(
      rewriter, moduleLoc, ptr,
      /*isConstant=*/false, LLVM::Linkage::Internal, kErrorSlot, Attribute());
  {
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.createBlock(&slot.getInitializerRegion());
    Value null = LLVM::ZeroOp::create(rewriter, moduleLoc, ptr);
    LLVM::ReturnOp::create(rewriter, moduleLoc, null);
  }
  auto accessor = LLVM::LLVMFuncOp::create(
      rewriter, moduleLoc, kLastError, LLVM::LLVMFunctionType::get(ptr, {}));
  {
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToStart(accessor.addEntryBlock(rewriter));
    Value address = LLVM::AddressOfOp::create(rewriter, moduleLoc, slot);
    Value message = LLVM::LoadOp::create(rewriter, moduleLoc, ptr, address);
    LLVM::ReturnOp::create(rewriter, moduleLoc, message);
  }

  // Clear the slot on entry of every public function.
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal() || !func.isPublic())
      continue;
    rewriter.setInsertionPointToStart(&func.getBody().front());
    Location loc = func.getLoc();
    Value address = LLVM::AddressOfOp::create(rewriter, loc, slot);
    Value null = LLVM::ZeroOp::create(rewriter, loc, ptr);
    LLVM::StoreOp::create(rewriter, loc, null, address);
  }

  // One early-return block per function that can fail.
  LLVMTypeConverter converter(ctx);
  llvm::DenseMap<func::FuncOp, Block *> exits;
  for (func::FuncOp func : failing) {
    Region &body = func.getBody();
    Block *exit = rewriter.createBlock(&body, body.end());
    Location loc = func.getLoc();
    SmallVector<Value> values;
    for (Type type : func.getResultTypes())
      values.push_back(placeholder(rewriter, loc, type, converter));
    func::ReturnOp::create(rewriter, loc, values);
    exits[func] = exit;
  }

  for (auto [i, check] : llvm::enumerate(asserts)) {
    cf::AssertOp op = check; // ArrayRef hands out const ops.
    Location loc = op.getLoc();
    Block *before = op->getBlock();
    Block *after = rewriter.splitBlock(before, op->getIterator());
    Block *exit = exits.lookup(funcOf(op));
    Block *fail = rewriter.createBlock(exit);
    Value text = LLVM::createGlobalString(
        loc, rewriter, ("snapkv_assert_msg_" + Twine(i)).str(),
        (op.getMsg() + Twine('\0')).str(), LLVM::Linkage::Internal);
    Value address = LLVM::AddressOfOp::create(rewriter, loc, slot);
    LLVM::StoreOp::create(rewriter, loc, text, address);
    cf::BranchOp::create(rewriter, loc, exit);
    rewriter.setInsertionPointToEnd(before);
    cf::CondBranchOp::create(rewriter, loc, op.getArg(), after, ValueRange{},
                             fail, ValueRange{});
    rewriter.eraseOp(op);
  }

  for (func::CallOp call : checkedCalls) {
    Location loc = call.getLoc();
    Block *before = call->getBlock();
    Block *after = rewriter.splitBlock(before, std::next(call->getIterator()));
    rewriter.setInsertionPointToEnd(before);
    Value address = LLVM::AddressOfOp::create(rewriter, loc, slot);
    Value message = LLVM::LoadOp::create(rewriter, loc, ptr, address);
    Value null = LLVM::ZeroOp::create(rewriter, loc, ptr);
    Value ok = LLVM::ICmpOp::create(rewriter, loc, LLVM::ICmpPredicate::eq,
                                    message, null);
    cf::CondBranchOp::create(rewriter, loc, ok, after, ValueRange{},
                             exits.lookup(funcOf(call)), ValueRange{});
  }
  return success();
}
