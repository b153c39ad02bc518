//===- GPUDeviceBuffers.cpp - buffers of gpu.launch ops on the device -----===//
//
// After snapkv-gpu-launch, the kernels read and write host buffers. This
// pass gives them device buffers:
//
// * a buffer allocated on the host (memref.alloc) that a kernel uses is
//   allocated on the device instead (gpu.alloc), and freed (gpu.dealloc) at
//   the end of its block; host code that reads it (returns, yields, copies,
//   calls) reads a host copy made after the last kernel that uses it, so
//   callers only ever see host memory;
// * a buffer from elsewhere (a function argument, a constant) that a kernel
//   reads is copied to the device once, right after it is defined.
//
// Host code that writes a device buffer, or a kernel that writes a host
// buffer, is an error, never a run-time crash.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_GPUDEVICEBUFFERS
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {

/// The buffer `v` is a view of, and the view ops from it to `v`
/// (outermost first).
Value rootOf(Value v, SmallVectorImpl<Operation *> *chain = nullptr) {
  while (Operation *def = v.getDefiningOp()) {
    auto view = dyn_cast<ViewLikeOpInterface>(def);
    if (!view)
      break;
    if (chain)
      chain->push_back(def);
    v = view.getViewSource();
  }
  if (chain)
    std::reverse(chain->begin(), chain->end());
  return v;
}

Value allocOnDevice(OpBuilder &b, Location loc, MemRefType type,
                    ValueRange dynamicSizes) {
  return gpu::AllocOp::create(b, loc, type, /*asyncToken=*/Type(),
                              /*asyncDependencies=*/ValueRange(), dynamicSizes,
                              /*symbolOperands=*/ValueRange(),
                              /*hostShared=*/false)
      .getMemref();
}

void memcpy(OpBuilder &b, Location loc, Value to, Value from) {
  gpu::MemcpyOp::create(b, loc, TypeRange(), ValueRange(), to, from);
}

SmallVector<Value> dynamicSizesOf(OpBuilder &b, Location loc, Value buffer) {
  SmallVector<Value> sizes;
  auto type = cast<MemRefType>(buffer.getType());
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.isDynamicDim(d))
      sizes.push_back(memref::DimOp::create(b, loc, buffer, d));
  return sizes;
}

class Placement {
public:
  Placement(RewriterBase &rewriter, func::FuncOp func)
      : rewriter(rewriter), func(func) {}
  LogicalResult run();

private:
  LogicalResult moveAllocToDevice(memref::AllocOp alloc);
  LogicalResult copyToDevice(Value root);

  RewriterBase &rewriter;
  func::FuncOp func;
};

/// Visits the uses of `root` and of its views on the host; a use inside a
/// kernel is visited as it is (its value is what the kernel captures).
void forEachView(Value root, function_ref<void(OpOperand &)> visit) {
  SmallVector<Value> work = {root};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (OpOperand &use : llvm::make_early_inc_range(v.getUses())) {
      auto view = dyn_cast<ViewLikeOpInterface>(use.getOwner());
      if (view && view.getViewSource() == v &&
          !use.getOwner()->getParentOfType<gpu::LaunchOp>()) {
        for (Value r : use.getOwner()->getResults())
          work.push_back(r);
        continue;
      }
      visit(use);
    }
  }
}

LogicalResult Placement::moveAllocToDevice(memref::AllocOp alloc) {
  Location loc = alloc.getLoc();
  rewriter.setInsertionPoint(alloc);
  Value device =
      allocOnDevice(rewriter, loc, alloc.getType(), alloc.getDynamicSizes());
  rewriter.replaceOp(alloc, device);
  Block *block = device.getParentBlock();

  // Host uses read a host copy, made after the last kernel of the block
  // that uses the buffer before them (bufferisation may reuse a buffer for
  // several kernels, with host reads in between).
  SmallVector<OpOperand *> hostUses;
  SmallVector<Operation *> kernels;
  LogicalResult result = success();
  forEachView(device, [&](OpOperand &use) {
    Operation *user = use.getOwner();
    if (isa<memref::DeallocOp>(user)) {
      rewriter.eraseOp(user);
      return;
    }
    auto launch = dyn_cast<gpu::LaunchOp>(user);
    if (!launch)
      launch = user->getParentOfType<gpu::LaunchOp>();
    if (!launch) {
      hostUses.push_back(&use);
      return;
    }
    if (Operation *inBlock = block->findAncestorOpInBlock(*launch))
      kernels.push_back(inBlock);
    else
      result = launch.emitError("snapkv-gpu-device-buffers: a kernel uses a "
                                "device buffer outside the buffer's block");
  });
  if (failed(result))
    return failure();
  llvm::sort(kernels,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  DenseMap<Operation *, Value> hostCopies;
  for (OpOperand *use : hostUses) {
    Operation *user = use->getOwner();
    Operation *at = block->findAncestorOpInBlock(*user);
    Operation *kernel = nullptr;
    for (Operation *k : kernels)
      if (at && k->isBeforeInBlock(at))
        kernel = k;
    auto effects = dyn_cast<MemoryEffectOpInterface>(user);
    if (!kernel ||
        (effects && effects.getEffectOnValue<MemoryEffects::Write>(use->get())))
      return user->emitError("snapkv-gpu-device-buffers: host code writes a "
                             "buffer that kernels use, or reads it before "
                             "any kernel wrote it");
    Value &host = hostCopies[kernel];
    if (!host) {
      rewriter.setInsertionPointAfter(kernel);
      auto type = cast<MemRefType>(device.getType());
      host = memref::AllocOp::create(rewriter, loc, type,
                                     dynamicSizesOf(rewriter, loc, device));
      memcpy(rewriter, loc, host, device);
    }
    SmallVector<Operation *> chain;
    rootOf(use->get(), &chain);
    rewriter.setInsertionPoint(user);
    IRMapping mapping;
    mapping.map(device, host);
    for (Operation *view : chain)
      rewriter.clone(*view, mapping);
    Value replacement = mapping.lookupOrDefault(use->get());
    rewriter.modifyOpInPlace(user, [&] { use->set(replacement); });
  }
  // Freed at the end of its block: every kernel that uses it is in the
  // block, and the host reads the copy.
  rewriter.setInsertionPoint(block->getTerminator());
  gpu::DeallocOp::create(rewriter, loc, TypeRange(), ValueRange(), device);
  return success();
}

LogicalResult Placement::copyToDevice(Value root) {
  auto type = dyn_cast<MemRefType>(root.getType());
  if (!type || !type.getLayout().isIdentity())
    return emitError(root.getLoc(), "snapkv-gpu-device-buffers: a kernel "
                                    "reads a buffer with a non-identity "
                                    "layout");
  Location loc = root.getLoc();
  if (auto arg = dyn_cast<BlockArgument>(root))
    rewriter.setInsertionPointToStart(arg.getOwner());
  else
    rewriter.setInsertionPointAfterValue(root);
  Value device =
      allocOnDevice(rewriter, loc, type, dynamicSizesOf(rewriter, loc, root));
  memcpy(rewriter, loc, device, root);
  Block *block = device.getParentBlock();
  rewriter.setInsertionPoint(block->getTerminator());
  gpu::DeallocOp::create(rewriter, loc, TypeRange(), ValueRange(), device);

  // Kernels read the device copy: rebuild each view chain that leads into a
  // launch on the copy, right before the launch.
  LogicalResult result = success();
  forEachView(root, [&](OpOperand &use) {
    auto launch = dyn_cast<gpu::LaunchOp>(use.getOwner());
    if (!launch)
      launch = use.getOwner()->getParentOfType<gpu::LaunchOp>();
    if (!launch || failed(result))
      return;
    // The launch reads the value from above; find the value it captures.
    Value captured = use.get();
    SmallVector<Operation *> chain;
    if (rootOf(captured, &chain) != root) {
      result = launch.emitError("snapkv-gpu-device-buffers: cannot trace "
                                "a kernel operand to its buffer");
      return;
    }
    rewriter.setInsertionPoint(launch);
    IRMapping mapping;
    mapping.map(root, device);
    for (Operation *view : chain)
      rewriter.clone(*view, mapping);
    Value onDeviceView = mapping.lookupOrDefault(captured);
    rewriter.modifyOpInPlace(use.getOwner(), [&] { use.set(onDeviceView); });
    // Writes would have to go back to the host buffer: kernels write only
    // buffers they allocate.
    for (Operation *user : onDeviceView.getUsers()) {
      auto effects = dyn_cast<MemoryEffectOpInterface>(user);
      if (user->getParentOfType<gpu::LaunchOp>() == launch && effects &&
          effects.getEffectOnValue<MemoryEffects::Write>(onDeviceView)) {
        result = user->emitError("snapkv-gpu-device-buffers: a kernel writes "
                                 "a buffer that the host owns");
        return;
      }
    }
  });
  return result;
}

LogicalResult Placement::run() {
  // The buffers each kernel uses, by their roots.
  llvm::SetVector<Value> roots;
  func.walk([&](gpu::LaunchOp launch) {
    llvm::SetVector<Value> captured;
    getUsedValuesDefinedAbove(launch.getBody(), captured);
    for (Value v : captured)
      if (isa<MemRefType>(v.getType()))
        roots.insert(rootOf(v));
  });
  for (Value root : roots) {
    if (auto alloc = root.getDefiningOp<memref::AllocOp>()) {
      if (failed(moveAllocToDevice(alloc)))
        return failure();
    } else if (failed(copyToDevice(root))) {
      return failure();
    }
  }
  return success();
}

struct GPUDeviceBuffersPass
    : snapkv::impl::GPUDeviceBuffersBase<GPUDeviceBuffersPass> {
  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    if (failed(Placement(rewriter, getOperation()).run()))
      signalPassFailure();
  }
};

} // namespace
