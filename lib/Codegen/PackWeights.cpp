//===- PackWeights.cpp - wide matmul weights into column panels -----------===//
//
// A prefill's projection `[M, K] x [K, N]` reads its weight down columns: a
// register tile of 64 columns steps through K rows N x 4 bytes apart, and for
// Llama-3-8B's shapes (N = 4096 to 14336) every step lands on another page.
// Packed into `[N / 64, K, 64]` panels, each tile's weights are contiguous
// (60 -> 140-161 GFLOP/s at Llama-3-8B's widths, docs/lowering.md). Upstream
// does the rewriting: linalg::pack, packTranspose (panels outermost, for the
// weight and the result), interchangeGenericOp (panels as the batch loop that
// snapkv-parallelize gives to threads) and lowerPack (the weight's copy as
// expand_shape + transpose). This file chooses the matmuls and writes the
// result's unpack as one transpose. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Codegen/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_PACKWEIGHTS
#include "snapkv/Codegen/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;

namespace {

struct PackWeightsPass : snapkv::impl::PackWeightsBase<PackWeightsPass> {
  using Base::Base;

  /// A matmul worth packing: f32, a static `[K, N]` right-hand side at least
  /// `minColumns` wide in whole panels, and more than one row (a decode
  /// step's vector x matrix product reads each weight once: packing would
  /// only add a copy).
  bool wanted(linalg::MatmulOp op) const {
    if (!op.hasPureTensorSemantics() || op.hasUserDefinedMaps())
      return false;
    auto lhs = dyn_cast<RankedTensorType>(op.getInputs()[0].getType());
    auto rhs = dyn_cast<RankedTensorType>(op.getInputs()[1].getType());
    if (!lhs || !rhs || !rhs.hasStaticShape() || !rhs.getElementType().isF32())
      return false;
    int64_t columns = rhs.getDimSize(1);
    return columns >= minColumns && columns % panel == 0 &&
           lhs.getDimSize(0) != 1;
  }

  void runOnOperation() override {
    if (panel < 1 || minColumns < 1) {
      emitError(getOperation().getLoc())
          << "snapkv-pack-weights: panel and min-columns must be positive";
      return signalPassFailure();
    }
    SmallVector<linalg::MatmulOp> matmuls;
    getOperation().walk([&](linalg::MatmulOp op) {
      if (wanted(op))
        matmuls.push_back(op);
    });
    if (matmuls.empty())
      return;
    IRRewriter rewriter(&getContext());
    for (linalg::MatmulOp matmul : matmuls) {
      rewriter.setInsertionPoint(matmul);
      // Loops (m, n, k): n in panels; the packed op's loops are
      // (m, n / panel, k, panel).
      SmallVector<OpFoldResult> sizes = {rewriter.getIndexAttr(0),
                                         rewriter.getIndexAttr(panel),
                                         rewriter.getIndexAttr(0)};
      FailureOr<linalg::PackResult> packed =
          linalg::pack(rewriter, matmul, sizes);
      if (failed(packed)) {
        matmul->emitWarning("snapkv-pack-weights: linalg::pack failed; the "
                            "matmul is left as it is");
        continue;
      }
      linalg::LinalgOp op = packed->packedLinalgOp;
      // Both packs, [K, N] -> [K, N / panel, panel] for the weight and
      // [M, N] -> [M, N / panel, panel] for the result, are made panel-major
      // ([N / panel, K, panel], [N / panel, M, panel]): each panel of the
      // weight, and each panel's rows of the result, contiguous.
      SmallVector<linalg::PackOp> packs;
      for (OpOperand *operand :
           {op.getDpsInputOperand(1), op.getDpsInitOperand(0)})
        if (auto pack = operand->get().getDefiningOp<linalg::PackOp>())
          packs.push_back(pack);
      linalg::UnPackOp unpack =
          packed->unPackOps.empty() ? nullptr : packed->unPackOps.front();
      for (linalg::PackOp pack : packs) {
        bool isInit = pack.getResult() == op.getDpsInitOperand(0)->get();
        FailureOr<linalg::PackTransposeResult> transposed =
            linalg::packTranspose(rewriter, pack, op,
                                  isInit ? unpack : linalg::UnPackOp(),
                                  /*outerPerm=*/{1, 0}, /*innerPerm=*/{});
        // Should it fail, the pack is still lowered (row-major panels: slower,
        // still right); no linalg.pack is left for the pipeline.
        if (succeeded(transposed)) {
          op = transposed->transposedLinalgOp;
          if (isInit)
            unpack = transposed->transposedUnPackOp;
          pack = transposed->transposedPackOp;
        }
        rewriter.setInsertionPoint(pack);
        (void)linalg::lowerPack(rewriter, pack);
      }
      if (unpack)
        unpackInPlace(rewriter, unpack);
      // Panels outermost, then rows, the panel's columns, the reduction:
      // (n / panel, m, panel, k).
      if (auto generic = dyn_cast<linalg::GenericOp>(op.getOperation()))
        (void)linalg::interchangeGenericOp(rewriter, generic, {1, 0, 3, 2});
    }
  }

  /// The result's unpack, [N / panel, M, panel] -> [M, N], as one transpose
  /// into an [M, N] tensor seen as [M, N / panel, panel] (upstream's
  /// lowerUnPack transposes into a new tensor and copies that into the
  /// destination: one more pass over the result).
  static void unpackInPlace(RewriterBase &rewriter, linalg::UnPackOp unpack) {
    rewriter.setInsertionPoint(unpack);
    if (!unpack.getOuterDimsPerm().equals({1, 0}) ||
        !unpack.getInnerDimsPos().equals({1})) {
      (void)linalg::lowerUnPack(rewriter, unpack);
      return;
    }
    Location loc = unpack.getLoc();
    SmallVector<ReassociationIndices> panels = {{0}, {1, 2}};
    auto packedType = cast<RankedTensorType>(unpack.getSourceType());
    SmallVector<OpFoldResult> sizes =
        tensor::getMixedSizes(rewriter, loc, unpack.getSource());
    SmallVector<OpFoldResult> shape = {sizes[1], sizes[0], sizes[2]};
    auto expandedType = RankedTensorType::get({packedType.getDimSize(1),
                                               packedType.getDimSize(0),
                                               packedType.getDimSize(2)},
                                              packedType.getElementType());
    // Every element is written: the destination's contents (the matmul's
    // zero fill) are not needed, only its shape.
    Value empty = tensor::EmptyOp::create(
        rewriter, loc, tensor::getMixedSizes(rewriter, loc, unpack.getDest()),
        packedType.getElementType());
    Value dest = tensor::ExpandShapeOp::create(rewriter, loc, expandedType,
                                               empty, panels, shape);
    Value transposed =
        linalg::TransposeOp::create(rewriter, loc, unpack.getSource(), dest,
                                    ArrayRef<int64_t>{1, 0, 2})
            ->getResult(0);
    rewriter.replaceOpWithNewOp<tensor::CollapseShapeOp>(
        unpack, unpack.getDestType(), transposed, panels);
  }
};

} // namespace
