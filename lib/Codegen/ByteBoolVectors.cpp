//===- ByteBoolVectors.cpp - i1 vectors read and written as bytes ---------===//
//
// Buffers of i1 hold one byte per element (an i1 GEP steps one byte, as
// memref's lowering and scalar loads assume), but LLVM stores a <N x i1>
// vector bit-packed in ceil(N/8) bytes (llvm/llvm-project#49286). A vector
// load of an i1 buffer therefore reads the wrong bits. This pass makes every
// contiguous vector access of i1 elements go through <N x i8>: load, then
// truncate; extend, then store.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_BYTEBOOLVECTORS
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

/// `vector<N x i8>` for `vector<N x i1>`, else null.
static VectorType byteVectorFor(Type type) {
  auto vector = dyn_cast<VectorType>(type);
  if (!vector || !vector.getElementType().isInteger(1))
    return nullptr;
  return vector.clone(IntegerType::get(type.getContext(), 8));
}

/// Loads `byte` instead of the i1 vector `result` and truncates after it.
static void widenResult(IRRewriter &rewriter, Value result, VectorType bytes) {
  Type bits = result.getType();
  rewriter.setInsertionPointAfterValue(result);
  rewriter.modifyOpInPlace(result.getDefiningOp(),
                           [&] { result.setType(bytes); });
  auto trunc = LLVM::TruncOp::create(rewriter, result.getLoc(), bits, result);
  rewriter.replaceAllUsesExcept(result, trunc, trunc);
}

/// Replaces the stored i1 vector `operand` by its zero extension to bytes.
static void widenOperand(IRRewriter &rewriter, OpOperand &operand,
                         VectorType bytes) {
  Operation *owner = operand.getOwner();
  rewriter.setInsertionPoint(owner);
  Value ext =
      LLVM::ZExtOp::create(rewriter, owner->getLoc(), bytes, operand.get());
  rewriter.modifyOpInPlace(owner, [&] { operand.set(ext); });
}

namespace {

struct ByteBoolVectorsPass
    : snapkv::impl::ByteBoolVectorsBase<ByteBoolVectorsPass> {
  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    getOperation()->walk([&](Operation *op) {
      if (auto load = dyn_cast<LLVM::LoadOp>(op)) {
        if (VectorType bytes = byteVectorFor(load.getType()))
          widenResult(rewriter, load.getResult(), bytes);
      } else if (auto store = dyn_cast<LLVM::StoreOp>(op)) {
        if (VectorType bytes = byteVectorFor(store.getValue().getType()))
          widenOperand(rewriter, store.getValueMutable(), bytes);
      } else if (auto load = dyn_cast<LLVM::MaskedLoadOp>(op)) {
        if (VectorType bytes = byteVectorFor(load.getType())) {
          if (load.getPassThru())
            widenOperand(rewriter, load.getPassThruMutable()[0], bytes);
          widenResult(rewriter, load.getResult(), bytes);
        }
      } else if (auto store = dyn_cast<LLVM::MaskedStoreOp>(op)) {
        if (VectorType bytes = byteVectorFor(store.getValue().getType()))
          widenOperand(rewriter, store.getValueMutable(), bytes);
      }
    });
  }
};

} // namespace
