//===- ExpandStridedCopies.cpp - strided memref.copy as linalg.copy -------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Utils/MemRefUtils.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_EXPANDSTRIDEDCOPIES
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

/// What the runtime copies with one memcpy: an identity layout (any shape)
/// or a static shape whose strides are row-major and dense.
bool contiguous(Type type) {
  auto memref = dyn_cast<MemRefType>(type);
  return !memref || memref.getLayout().isIdentity() ||
         memref::isStaticShapeAndContiguousRowMajor(memref);
}

struct ExpandStridedCopiesPass
    : snapkv::impl::ExpandStridedCopiesBase<ExpandStridedCopiesPass> {
  void runOnOperation() override {
    SmallVector<memref::CopyOp> copies;
    getOperation().walk([&](memref::CopyOp copy) {
      if (!contiguous(copy.getSource().getType()) ||
          !contiguous(copy.getTarget().getType()))
        copies.push_back(copy);
    });
    IRRewriter rewriter(&getContext());
    for (memref::CopyOp copy : copies) {
      rewriter.setInsertionPoint(copy);
      rewriter.replaceOpWithNewOp<linalg::CopyOp>(copy, copy.getSource(),
                                                  copy.getTarget());
    }
  }
};

} // namespace
