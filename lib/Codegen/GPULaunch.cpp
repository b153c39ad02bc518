//===- GPULaunch.cpp - GPU block loops to gpu.launch ----------------------===//
//
// After bufferisation, each scf.forall mapped to GPU blocks becomes one
// gpu.launch (grid = the loop's trip counts, dynamic ones included); the
// block's scratch buffers go to shared memory (one dynamic shared memory
// region, static offsets) while they fit, else to a global buffer with one
// slice per block that the host allocates around the launch; the thread
// loops are mapped to thread ids by the upstream
// `mapNestedForallToThreadsImpl`, which puts a barrier after each.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/GPUUtils.h"
#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/TransformOps/GPUTransformOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_GPULAUNCH
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {

/// Every scratch buffer starts at a multiple of this many bytes (vector and
/// ldmatrix accesses need 16).
constexpr int64_t kAlign = 64;

int64_t alignUp(int64_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

/// `v` computed before `loop`: `v` itself if defined outside, else a clone
/// of the pure ops computing it from values defined outside; null if it
/// depends on the loop (its induction variables or memory).
Value hoistOutOf(RewriterBase &rewriter, Operation *loop, Value v,
                 IRMapping &hoisted) {
  if (Value done = hoisted.lookupOrNull(v))
    return done;
  if (!loop->isAncestor(v.getParentRegion()->getParentOp()))
    return v;
  Operation *def = v.getDefiningOp();
  if (!def || def->getNumRegions() != 0 || !isMemoryEffectFree(def))
    return {};
  for (Value operand : def->getOperands())
    if (!hoistOutOf(rewriter, loop, operand, hoisted))
      return {};
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(loop);
  Operation *clone = rewriter.clone(*def, hoisted);
  for (auto [from, to] : llvm::zip(def->getResults(), clone->getResults()))
    hoisted.map(from, to);
  return hoisted.lookup(v);
}

/// One scratch buffer of a block.
struct Scratch {
  memref::AllocOp alloc;
  bool shared;
  /// Bytes (static) or their value before the loop (dynamic); offset in
  /// the shared region (static) or in the block's global slice.
  int64_t bytes = 0;
  Value dynamicBytes;
  int64_t sharedOffset = 0;
  Value globalOffset;
};

class BlockLowering {
public:
  BlockLowering(RewriterBase &rewriter, scf::ForallOp block,
                int64_t sharedBudget)
      : rewriter(rewriter), block(block), loc(block.getLoc()),
        sharedBudget(sharedBudget) {}

  LogicalResult run();

private:
  LogicalResult checkBlockLevelEffects();
  LogicalResult planScratch();
  Value indexConst(int64_t v) {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  }

  RewriterBase &rewriter;
  scf::ForallOp block;
  Location loc;
  int64_t sharedBudget;
  SmallVector<Scratch> scratch;
  int64_t sharedBytes = 0;
  /// Bytes of one block's global slice (before the loop), if any.
  Value globalBytes;
};

/// Outside the thread loops every thread of the block runs the code: only
/// index arithmetic, views and reads may be there, never a write.
LogicalResult BlockLowering::checkBlockLevelEffects() {
  WalkResult result =
      block.getBody()->walk<WalkOrder::PreOrder>([&](Operation *op) {
        if (auto forall = dyn_cast<scf::ForallOp>(op);
            forall && isThreadLoop(forall))
          return WalkResult::skip();
        if (isa<memref::AllocOp, memref::DeallocOp>(op))
          return WalkResult::advance();
        auto effects = dyn_cast<MemoryEffectOpInterface>(op);
        if (effects && effects.hasEffect<MemoryEffects::Write>()) {
          op->emitError(
              "snapkv-gpu-launch: a write outside the thread loops of "
              "a GPU block would run in every thread (distribute the "
              "block with snapkv-gpu-distribute first)");
          return WalkResult::interrupt();
        }
        return WalkResult::advance();
      });
  return failure(result.wasInterrupted());
}

LogicalResult BlockLowering::planScratch() {
  SmallVector<memref::AllocOp> allocs;
  block.getBody()->walk([&](memref::AllocOp alloc) {
    if (isInThreadLoop(alloc)) {
      // Per-thread scratch: private memory of the thread.
      rewriter.setInsertionPoint(alloc);
      rewriter.replaceOpWithNewOp<memref::AllocaOp>(
          alloc, alloc.getType(), alloc.getDynamicSizes(),
          alloc.getSymbolOperands(), alloc.getAlignmentAttr());
      return;
    }
    allocs.push_back(alloc);
  });
  IRMapping hoisted;
  for (memref::AllocOp alloc : allocs) {
    MemRefType type = alloc.getType();
    if (!type.getLayout().isIdentity() || type.getMemorySpace() ||
        !type.getElementType().isIntOrFloat())
      return alloc.emitError("snapkv-gpu-launch: unsupported scratch buffer");
    int64_t elemBytes = type.getElementTypeBitWidth() / 8;
    Scratch s;
    s.alloc = alloc;
    s.shared = false;
    if (type.hasStaticShape()) {
      s.bytes = alignUp(type.getNumElements() * elemBytes);
      if (sharedBytes + s.bytes <= sharedBudget) {
        s.shared = true;
        s.sharedOffset = sharedBytes;
        sharedBytes += s.bytes;
        scratch.push_back(s);
        continue;
      }
    }
    // Global: the byte count, computed before the loop.
    rewriter.setInsertionPoint(block);
    Value count = indexConst(elemBytes);
    unsigned dynamic = 0;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      Value size;
      if (type.isDynamicDim(d)) {
        size = hoistOutOf(rewriter, block, alloc.getDynamicSizes()[dynamic++],
                          hoisted);
        if (!size)
          return alloc.emitError(
              "snapkv-gpu-launch: the size of a scratch buffer depends on "
              "the block");
      } else {
        size = indexConst(type.getDimSize(d));
      }
      count = arith::MulIOp::create(rewriter, loc, count, size);
    }
    AffineExpr x = rewriter.getAffineDimExpr(0);
    s.dynamicBytes = affine::AffineApplyOp::create(
        rewriter, loc, (x + kAlign - 1).floorDiv(kAlign) * kAlign,
        ValueRange{count});
    s.globalOffset = globalBytes ? globalBytes : indexConst(0);
    globalBytes = globalBytes ? Value(arith::AddIOp::create(
                                    rewriter, loc, globalBytes, s.dynamicBytes))
                              : s.dynamicBytes;
    scratch.push_back(s);
  }
  return success();
}

LogicalResult BlockLowering::run() {
  if (!block.isNormalized())
    return block.emitError("snapkv-gpu-launch: block loop not normalized");
  if (failed(checkBlockLevelEffects()) || failed(planScratch()))
    return failure();
  MLIRContext *ctx = rewriter.getContext();

  // Grid: the loop's trip counts on the dimensions of its mapping.
  rewriter.setInsertionPoint(block);
  Value one = indexConst(1);
  SmallVector<Value> grid(3, one);
  SmallVector<Value> counts = getValueOrCreateConstantIndexOp(
      rewriter, loc, block.getMixedUpperBound());
  auto mapping = block.getMapping()->getAsRange<gpu::GPUBlockMappingAttr>();
  SmallVector<unsigned> dims;
  for (auto [attr, count] : llvm::zip(mapping, counts)) {
    auto dim = static_cast<unsigned>(attr.getBlock());
    if (dim > 2)
      return block.emitError("snapkv-gpu-launch: block mapping must be x, y "
                             "or z");
    grid[dim] = count;
    dims.push_back(dim);
  }
  Value numBlocks = grid[0];
  for (unsigned d = 1; d < 3; ++d)
    numBlocks = arith::MulIOp::create(rewriter, loc, numBlocks, grid[d]);

  // Block size: the largest thread loop.
  int64_t threads = 1;
  WalkResult sized = block.getBody()->walk([&](scf::ForallOp forall) {
    if (!isThreadLoop(forall))
      return WalkResult::advance();
    std::optional<SmallVector<int64_t>> trips =
        getConstantIntValues(forall.getMixedUpperBound());
    if (!trips) {
      forall.emitError("snapkv-gpu-launch: thread loop with a dynamic trip "
                       "count");
      return WalkResult::interrupt();
    }
    int64_t n = 1;
    for (int64_t t : *trips)
      n *= t;
    if (llvm::any_of(*forall.getMapping(), [](Attribute a) {
          return isa<gpu::GPUWarpMappingAttr>(a);
        }))
      n *= 32;
    threads = std::max(threads, n);
    return WalkResult::advance();
  });
  if (sized.wasInterrupted())
    return failure();
  if (threads > 1024)
    return block.emitError("snapkv-gpu-launch: more than 1024 threads");

  Value global;
  if (globalBytes) {
    Value total = arith::MulIOp::create(rewriter, loc, globalBytes, numBlocks);
    global = memref::AllocOp::create(
        rewriter, loc,
        MemRefType::get({ShapedType::kDynamic}, rewriter.getI8Type()),
        ValueRange{total});
  }
  Value smemBytes;
  if (sharedBytes)
    smemBytes = arith::ConstantOp::create(
        rewriter, loc, rewriter.getI32IntegerAttr(sharedBytes));
  auto launch = gpu::LaunchOp::create(rewriter, loc, grid[0], grid[1], grid[2],
                                      indexConst(threads), one, one, smemBytes);
  Block &body = launch.getBody().front();
  rewriter.setInsertionPointToEnd(&body);
  gpu::TerminatorOp::create(rewriter, loc);
  if (global) {
    rewriter.setInsertionPointAfter(launch);
    memref::DeallocOp::create(rewriter, loc, global);
  }

  // The loop body, on the launch's block ids.
  gpu::KernelDim3 ids = launch.getBlockIds();
  Value idByDim[3] = {ids.x, ids.y, ids.z};
  rewriter.eraseOp(block.getTerminator());
  SmallVector<Value> replacements;
  for (unsigned dim : dims)
    replacements.push_back(idByDim[dim]);
  rewriter.inlineBlockBefore(block.getBody(), body.getTerminator(),
                             replacements);
  rewriter.eraseOp(block);

  // Scratch: views of the shared region and of the block's global slice.
  rewriter.setInsertionPointToStart(&body);
  auto workgroup =
      gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
  Value smem;
  if (sharedBytes)
    smem = gpu::DynamicSharedMemoryOp::create(
        rewriter, loc,
        MemRefType::get({ShapedType::kDynamic}, rewriter.getI8Type(),
                        MemRefLayoutAttrInterface(), workgroup));
  Value sliceStart;
  if (global) {
    Value linear = ids.z;
    linear = arith::AddIOp::create(
        rewriter, loc,
        arith::MulIOp::create(rewriter, loc, linear, launch.getGridSizeY()),
        ids.y);
    linear = arith::AddIOp::create(
        rewriter, loc,
        arith::MulIOp::create(rewriter, loc, linear, launch.getGridSizeX()),
        ids.x);
    sliceStart = arith::MulIOp::create(rewriter, loc, linear, globalBytes);
  }
  for (Scratch &s : scratch) {
    rewriter.setInsertionPoint(s.alloc);
    MemRefType type = s.alloc.getType();
    Value view;
    if (s.shared) {
      MemRefType sharedType =
          MemRefType::get(type.getShape(), type.getElementType(),
                          MemRefLayoutAttrInterface(), workgroup);
      view = memref::ViewOp::create(rewriter, loc, sharedType, smem,
                                    indexConst(s.sharedOffset), ValueRange{});
      // Generic pointers, so that the buffer's users keep their types; the
      // NVPTX backend infers the shared address space again.
      view = memref::MemorySpaceCastOp::create(rewriter, loc, type, view);
    } else {
      Value offset =
          arith::AddIOp::create(rewriter, loc, sliceStart, s.globalOffset);
      view = memref::ViewOp::create(rewriter, loc, type, global, offset,
                                    s.alloc.getDynamicSizes());
    }
    for (Operation *user : llvm::make_early_inc_range(s.alloc->getUsers()))
      if (isa<memref::DeallocOp>(user))
        rewriter.eraseOp(user);
    rewriter.replaceOp(s.alloc, view);
  }

  // Thread loops to thread ids, a barrier after each.
  rewriter.setInsertionPointToStart(&body);
  DiagnosedSilenceableFailure mapped =
      transform::gpu::mapNestedForallToThreadsImpl(
          rewriter, std::nullopt, launch, {threads, 1, 1}, /*warpSize=*/32,
          /*syncAfterDistribute=*/true);
  if (!mapped.succeeded())
    return launch.emitError("snapkv-gpu-launch: cannot map the thread loops");
  return success();
}

struct GPULaunchPass : snapkv::impl::GPULaunchBase<GPULaunchPass> {
  using Base::Base;

  void runOnOperation() override {
    if (sharedMemoryBytes < 0) {
      emitError(getOperation().getLoc())
          << "snapkv-gpu-launch: shared-memory-bytes must not be negative";
      return signalPassFailure();
    }
    IRRewriter rewriter(&getContext());
    for (scf::ForallOp block : blockLoops(getOperation())) {
      if (block.getNumResults() != 0) {
        block.emitError("snapkv-gpu-launch: the block loop is not "
                        "bufferized");
        return signalPassFailure();
      }
      if (failed(BlockLowering(rewriter, block, sharedMemoryBytes).run()))
        return signalPassFailure();
    }
  }
};

} // namespace
