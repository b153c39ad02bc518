//===- GPUMmaSync.cpp - warp-level vector.contract to mma.sync ------------===//
//
// Upstream's vector-to-nvgpu rewrite, applied only to the vector ops of the
// contractions, on operands read from shared memory (so that it uses
// ldmatrix); bf16 contractions go through it as f16 ones of the same bits and
// become bf16 mma.sync here. See the pass description in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Conversion/VectorToGPU/VectorToGPU.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_GPUMMASYNC
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

bool isVectorOp(Operation *op) {
  auto isVector = [](Type t) { return isa<VectorType>(t); };
  return llvm::any_of(op->getResultTypes(), isVector) ||
         llvm::any_of(op->getOperandTypes(), isVector);
}

/// Moves the vector ops of `block` (the contractions, the reads that feed
/// them, the writes of their results) into a new scf.execute_region after
/// the last of them, so that the upstream rewrite sees nothing else. They
/// only use each other's results, and what runs between them has no side
/// effects, so nothing is reordered that could observe it.
FailureOr<scf::ExecuteRegionOp> isolate(RewriterBase &rewriter, Block &block) {
  SmallVector<Operation *> chain;
  for (Operation &op : block)
    if (isVectorOp(&op))
      chain.push_back(&op);
  for (Operation *op = chain.front(); op != chain.back();
       op = op->getNextNode())
    if (!isVectorOp(op) && !isMemoryEffectFree(op))
      return chain.back()->emitError(
          "snapkv-gpu-mma-sync: an op with side effects among the warp's "
          "contractions");
  for (Operation *op : chain)
    for (Operation *user : op->getUsers())
      if (!isVectorOp(user) || user->getBlock() != &block)
        return op->emitError("snapkv-gpu-mma-sync: a vector result used "
                             "outside the warp's contractions");
  rewriter.setInsertionPointAfter(chain.back());
  auto region = scf::ExecuteRegionOp::create(rewriter, chain.back()->getLoc(),
                                             TypeRange{});
  Block *body = rewriter.createBlock(&region.getRegion());
  for (Operation *op : chain)
    rewriter.moveOpBefore(op, body, body->end());
  rewriter.setInsertionPointToEnd(body);
  scf::YieldOp::create(rewriter, region.getLoc());
  return region;
}

/// `memref` as a view of workgroup memory with elements of `elementType` (of
/// the same width): a chain of subviews of a `memory_space_cast` of a
/// `memref.view` of workgroup memory, which is how `snapkv-gpu-launch` hands
/// out shared scratch, rebuilt without the cast (upstream then reads MMA
/// operands with ldmatrix, which needs shared-memory addresses) and, for a
/// different element type, on a view of that type of the same bytes.
/// Null for any other memref. New ops go at the rewriter's insertion point.
Value sharedView(RewriterBase &rewriter, Value memref, Type elementType) {
  if (auto cast = memref.getDefiningOp<memref::MemorySpaceCastOp>()) {
    auto sourceType = llvm::cast<MemRefType>(cast.getSource().getType());
    if (!nvgpu::NVGPUDialect::hasSharedMemoryAddressSpace(sourceType))
      return {};
    return sharedView(rewriter, cast.getSource(), elementType);
  }
  auto type = llvm::cast<MemRefType>(memref.getType());
  if (auto view = memref.getDefiningOp<memref::ViewOp>()) {
    if (!nvgpu::NVGPUDialect::hasSharedMemoryAddressSpace(type))
      return {};
    if (type.getElementType() == elementType)
      return memref;
    MemRefType retyped = MemRefType::Builder(type).setElementType(elementType);
    return memref::ViewOp::create(rewriter, view.getLoc(), retyped,
                                  view.getSource(), view.getByteShift(),
                                  view.getSizes())
        .getResult();
  }
  auto subview = memref.getDefiningOp<memref::SubViewOp>();
  if (!subview)
    return {};
  Value source = sharedView(rewriter, subview.getSource(), elementType);
  if (!source)
    return {};
  MemRefType result =
      MemRefType::Builder(type)
          .setElementType(elementType)
          .setMemorySpace(
              llvm::cast<MemRefType>(source.getType()).getMemorySpace());
  return memref::SubViewOp::create(
      rewriter, subview.getLoc(), result, source, subview.getMixedOffsets(),
      subview.getMixedSizes(), subview.getMixedStrides());
}

/// Points the reads and writes of `region` at shared memory where their
/// buffers are shared scratch (see sharedView). With `bf16`, the region's
/// contractions have bf16 operands: their reads become f16 reads of the same
/// bits and the contractions f16 ones, whose fragments (which lane holds
/// which elements) are those of bf16 (the PTX ISA gives both 16-bit types
/// one layout), so upstream's f16 rewrite distributes them.
LogicalResult readFromShared(RewriterBase &rewriter,
                             scf::ExecuteRegionOp region, bool bf16) {
  MLIRContext *ctx = rewriter.getContext();
  Type f16 = Float16Type::get(ctx);
  WalkResult walked = region.walk([&](Operation *op) {
    auto read = dyn_cast<vector::TransferReadOp>(op);
    auto write = dyn_cast<vector::TransferWriteOp>(op);
    if (!read && !write)
      return WalkResult::advance();
    OpOperand &base = read ? read.getBaseMutable() : write.getBaseMutable();
    Type elementType = getElementTypeOrSelf(base.get().getType());
    // Only the contractions' operands (a bf16 accumulator or a bf16 read
    // used elsewhere keeps its type).
    bool retype = bf16 && read && elementType.isBF16() &&
                  llvm::all_of(read->getUsers(), [](Operation *user) {
                    return isa<vector::ContractionOp>(user);
                  });
    rewriter.setInsertionPoint(op);
    Value shared = sharedView(rewriter, base.get(), retype ? f16 : elementType);
    if (!shared) {
      if (!retype)
        return WalkResult::advance();
      op->emitError("snapkv-gpu-mma-sync: a bf16 MMA operand that is not "
                    "read from shared memory");
      return WalkResult::interrupt();
    }
    if (!retype) {
      rewriter.modifyOpInPlace(op, [&] { base.set(shared); });
      return WalkResult::advance();
    }
    Value padding = arith::ConstantOp::create(rewriter, read.getLoc(),
                                              rewriter.getZeroAttr(f16));
    auto f16Read = vector::TransferReadOp::create(
        rewriter, read.getLoc(), read.getVectorType().clone(f16), shared,
        read.getIndices(), read.getPermutationMapAttr(), padding,
        read.getMask(), read.getInBoundsAttr());
    rewriter.replaceAllUsesWith(read.getResult(), f16Read.getResult());
    rewriter.eraseOp(read);
    return WalkResult::skip();
  });
  if (walked.wasInterrupted())
    return failure();
  if (!bf16)
    return success();
  SmallVector<vector::ContractionOp> contracts;
  region.walk([&](vector::ContractionOp c) { contracts.push_back(c); });
  for (vector::ContractionOp contract : contracts) {
    rewriter.setInsertionPoint(contract);
    rewriter.replaceOpWithNewOp<vector::ContractionOp>(
        contract, contract.getLhs(), contract.getRhs(), contract.getAcc(),
        contract.getIndexingMaps(), contract.getIteratorTypes(),
        contract.getKind());
  }
  return success();
}

/// Whether the contractions of `region` have bf16 operands (all or none: a
/// block's tile has one element type), and whether their bf16 operands are
/// read directly, so that their reads can be retyped.
FailureOr<bool> hasBf16Operands(scf::ExecuteRegionOp region) {
  bool anyBf16 = false, anyOther = false;
  WalkResult walked = region.walk([&](vector::ContractionOp contract) {
    Type lhs = getElementTypeOrSelf(contract.getLhs().getType());
    Type rhs = getElementTypeOrSelf(contract.getRhs().getType());
    if (!lhs.isBF16() && !rhs.isBF16()) {
      anyOther = true;
      return WalkResult::advance();
    }
    for (Value operand : {contract.getLhs(), contract.getRhs()}) {
      auto read = operand.getDefiningOp<vector::TransferReadOp>();
      if (!read || !getElementTypeOrSelf(operand.getType()).isBF16() ||
          llvm::any_of(read->getUsers(), [](Operation *user) {
            return !isa<vector::ContractionOp>(user);
          })) {
        contract.emitError("snapkv-gpu-mma-sync: a bf16 contraction whose "
                           "operands are not bf16 reads");
        return WalkResult::interrupt();
      }
    }
    anyBf16 = true;
    return WalkResult::advance();
  });
  if (walked.wasInterrupted())
    return failure();
  // Every MMA of a bf16 region is lowered as bf16.
  if (anyBf16 && anyOther)
    return region.emitError("snapkv-gpu-mma-sync: bf16 and other "
                            "contractions in one block");
  return anyBf16;
}

/// Splits a vector<R x 2 x f16> fragment (bf16 bits) into R 32-bit registers.
SmallVector<Value> registers(RewriterBase &rewriter, Location loc, Value frag) {
  auto type = llvm::cast<VectorType>(frag.getType());
  auto word = VectorType::get({1}, rewriter.getI32Type());
  SmallVector<Value> regs;
  for (int64_t i = 0; i < type.getDimSize(0); ++i) {
    Value pair = vector::ExtractOp::create(rewriter, loc, frag, i);
    Value cast = vector::BitCastOp::create(rewriter, loc, word, pair);
    regs.push_back(vector::ExtractOp::create(rewriter, loc, cast, 0));
  }
  return regs;
}

/// nvgpu.mma.sync m16n8k16 of f16 fragments that hold bf16 bits, as the bf16
/// nvvm.mma.sync (`mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`),
/// which upstream's nvgpu-to-nvvm does not produce.
LogicalResult lowerAsBf16(RewriterBase &rewriter, nvgpu::MmaSyncOp mma) {
  auto acc = llvm::cast<VectorType>(mma.getMatrixC().getType());
  if (mma.getMmaShapeAsArray() != std::array<int64_t, 3>{16, 8, 16} ||
      !acc.getElementType().isF32() ||
      acc.getShape() != ArrayRef<int64_t>{2, 2})
    return mma.emitError("snapkv-gpu-mma-sync: expected an m16n8k16 MMA "
                         "with f32 accumulators");
  Location loc = mma.getLoc();
  rewriter.setInsertionPoint(mma);
  SmallVector<Value> a = registers(rewriter, loc, mma.getMatrixA());
  SmallVector<Value> b = registers(rewriter, loc, mma.getMatrixB());
  SmallVector<Value> c;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j)
      c.push_back(vector::ExtractOp::create(rewriter, loc, mma.getMatrixC(),
                                            ArrayRef<int64_t>{i, j}));
  Type f32 = rewriter.getF32Type();
  auto result = LLVM::LLVMStructType::getLiteral(rewriter.getContext(),
                                                 {f32, f32, f32, f32});
  auto op = NVVM::MmaOp::create(
      rewriter, loc, result, a, b, c, ArrayRef<int64_t>{16, 8, 16},
      std::nullopt, std::nullopt,
      std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16, NVVM::MMATypes::bf16},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                     NVVM::MMALayout::col});
  SmallVector<Value> d;
  for (int64_t i = 0; i < 4; ++i)
    d.push_back(LLVM::ExtractValueOp::create(rewriter, loc, op, i));
  rewriter.replaceOpWithNewOp<vector::FromElementsOp>(mma, acc, d);
  return success();
}

struct GPUMmaSyncPass : snapkv::impl::GPUMmaSyncBase<GPUMmaSyncPass> {
  using Base::Base;

  void runOnOperation() override {
    llvm::SetVector<Block *> blocks;
    getOperation().walk([&](vector::ContractionOp contract) {
      blocks.insert(contract->getBlock());
    });
    IRRewriter rewriter(&getContext());
    for (Block *block : blocks) {
      FailureOr<scf::ExecuteRegionOp> region = isolate(rewriter, *block);
      if (failed(region))
        return signalPassFailure();
      FailureOr<bool> bf16 = hasBf16Operands(*region);
      if (failed(bf16) || failed(readFromShared(rewriter, *region, *bf16)))
        return signalPassFailure();
      RewritePatternSet patterns(&getContext());
      populatePrepareVectorToMMAPatterns(patterns, /*useNvGpu=*/true);
      if (failed(applyPatternsGreedily(*region, std::move(patterns))))
        return signalPassFailure();
      if (failed(convertVectorToNVVMCompatibleMMASync(rewriter, *region)))
        return signalPassFailure();
      // The rewrite leaves the replaced vector ops behind, dead.
      if (failed(
              applyPatternsGreedily(*region, RewritePatternSet(&getContext()))))
        return signalPassFailure();
      if (*bf16) {
        SmallVector<nvgpu::MmaSyncOp> mmas;
        region->walk([&](nvgpu::MmaSyncOp mma) { mmas.push_back(mma); });
        for (nvgpu::MmaSyncOp mma : mmas)
          if (failed(lowerAsBf16(rewriter, mma)))
            return signalPassFailure();
      }
      Block &body = region->getRegion().front();
      rewriter.eraseOp(body.getTerminator());
      rewriter.inlineBlockBefore(&body, *region);
      rewriter.eraseOp(*region);
    }
  }
};

} // namespace
