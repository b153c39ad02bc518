//===- Blocks.cpp - the formulation laid out for GPU blocks ---------------===//
//
// The RowBlocks layout (Formulation.h): the formulation's linalg ops laid
// out so that each GPU kernel is one scf.forall whose iterations are blocks:
//
// * the keys form one span of whole tiles, each tile a bounded copy of the
//   keys (a structured op that a block computes into fast memory: the
//   staging of its key tile); a partial last tile reads zeros, which the
//   causal mask hides (they lie past every window row's horizon);
// * the per-row steps (pooling, the selection, the gather; the short-prompt
//   bypass; the pooling of snapkv.score) run inside an scf.forall over the
//   (batch, head) rows, one block per row, on the row's [1, 1, ...] slices:
//   the row-local ops are the ops Selection.cpp emits, with B = Hc = 1.
//
// The scoring's block groups (Scoring.cpp, `blockGroup`) are tiled by the
// pass; everything here is already one loop per kernel.
//
//===----------------------------------------------------------------------===//

#include "Formulation.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

using utils::IteratorType;

/// tiles[b, kv, n, jt, d] = keys[b, kv, n*T + jt, d] if n*T + jt < L, else 0.
/// The row is read inside the body (clamped, so that it stays in bounds),
/// which makes the op a gather that tiles and fuses like any other.
KeyTiles Formulation::stagedKeyTiles(Value keys, Value length) {
  int64_t tile = keyTile;
  AffineExpr l0 = b.getAffineSymbolExpr(0);
  OpFoldResult count = affine::makeComposedFoldedAffineApply(
      b, loc, (l0 + tile - 1).floorDiv(tile), {getAsOpFoldResult(length)});
  Value init = empty(
      {ofr(s.batch), ofr(s.kvHeads), count, ofr(tile), ofr(s.dim)}, s.elemTy);
  Value last = arith::SubIOp::create(b, loc, length, cIndex(1));
  Type elemTy = s.elemTy;
  auto op = generic(
      init.getType(), {}, {init}, {map(5, {0, 1, 2, 3, 4})},
      SmallVector<IteratorType>(5, IteratorType::parallel),
      [=](OpBuilder &nb, Location l, ValueRange) {
        Value bi = linalg::IndexOp::create(nb, l, 0);
        Value kv = linalg::IndexOp::create(nb, l, 1);
        Value n = linalg::IndexOp::create(nb, l, 2);
        Value jt = linalg::IndexOp::create(nb, l, 3);
        Value d = linalg::IndexOp::create(nb, l, 4);
        Value pos = arith::AddIOp::create(
            nb, l,
            arith::MulIOp::create(nb, l, n,
                                  arith::ConstantIndexOp::create(nb, l, tile)),
            jt);
        Value inside =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ule, pos, last);
        Value row = arith::MinUIOp::create(nb, l, pos, last);
        Value key =
            tensor::ExtractOp::create(nb, l, keys, ValueRange{bi, kv, row, d});
        Value zero = arith::ConstantOp::create(nb, l, nb.getZeroAttr(elemTy));
        linalg::YieldOp::create(
            nb, l,
            ValueRange{arith::SelectOp::create(nb, l, inside, key, zero)});
      });
  return {op.getResult(0), cIndex(0)};
}

SelectShape Formulation::rowShape() const {
  SelectShape row = s;
  row.batch = 1;
  row.heads = 1;
  row.queryHeads = 1;
  row.kvHeads = 1;
  // The row's keys and values are sliced to its kv head already.
  row.group = 1;
  return row;
}

Value Formulation::rowOf(Value source, Value bi, Value h, bool byKvHead,
                         int64_t heads) {
  auto type = cast<RankedTensorType>(source.getType());
  Value head = h;
  if (byKvHead && s.expand() && s.group != 1)
    head = arith::DivUIOp::create(b, loc, h, cIndex(s.group));
  SmallVector<OpFoldResult> offsets = {bi, head};
  SmallVector<OpFoldResult> sizes = {ofr(1), ofr(heads)};
  for (int64_t d = 2; d < type.getRank(); ++d) {
    offsets.push_back(ofr(0));
    sizes.push_back(tensor::getMixedSize(b, loc, source, d));
  }
  SmallVector<OpFoldResult> strides(type.getRank(), ofr(1));
  return tensor::ExtractSliceOp::create(b, loc, source, offsets, sizes,
                                        strides);
}

SmallVector<Value> Formulation::inRowBlocks(ValueRange inits, RowBody body) {
  MLIRContext *ctx = b.getContext();
  ArrayAttr mapping = b.getArrayAttr(
      {gpu::GPUBlockMappingAttr::get(ctx, gpu::MappingId::DimY),
       gpu::GPUBlockMappingAttr::get(ctx, gpu::MappingId::DimX)});
  auto forall = scf::ForallOp::create(
      b, loc, ArrayRef<OpFoldResult>{ofr(s.batch), ofr(s.heads)}, inits,
      mapping);
  // The block's threads (and tensor cores) for snapkv-gpu-distribute.
  forall->setAttr("snapkv.lowering_config",
                  getLoweringConfig(ctx, LoweringTarget::gpu, opts));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(forall.getTerminator());
  Value bi = forall.getInductionVar(0), h = forall.getInductionVar(1);
  // The row-local formulation: the same ops on [1, 1, ...] slices, not
  // tiled again (this loop is the kernel).
  FormulationOptions rowOptions = opts;
  rowOptions.mapping = TileMapping::forall;
  Formulation row(b, loc, rowShape(), rowOptions);
  SmallVector<Value> results = body(row, Rows{this, bi, h});
  SmallVector<SmallVector<OpFoldResult>> sizes;
  for (Value result : results) {
    sizes.push_back({ofr(1), ofr(1)});
    for (int64_t d = 2; d < cast<RankedTensorType>(result.getType()).getRank();
         ++d)
      sizes.back().push_back(tensor::getMixedSize(b, loc, result, d));
  }
  b.setInsertionPointToStart(forall.getTerminator().getBody());
  for (auto [result, out, size] :
       llvm::zip(results, forall.getRegionIterArgs(), sizes)) {
    SmallVector<OpFoldResult> offsets(size.size(), ofr(0));
    offsets[0] = bi;
    offsets[1] = h;
    SmallVector<OpFoldResult> strides(size.size(), ofr(1));
    tensor::ParallelInsertSliceOp::create(b, loc, result, out, offsets, size,
                                          strides);
  }
  return SmallVector<Value>(forall.getResults());
}

namespace mlir::snapkv::detail {
/// GPU blocks: staged key tiles, per-row steps in one block per row.
class RowBlocks final : public Layout {
public:
  SmallVector<KeyTiles> keyTiles(Formulation &f, Value keys,
                                 Value length) const override {
    return {f.stagedKeyTiles(keys, length)};
  }
  bool restagesPerKernel() const override { return true; }
  // A block's logits would go through global memory between the passes.
  bool keepsLogits() const override { return false; }
  SmallVector<Value> perRow(Formulation &f,
                            function_ref<SmallVector<Value>()> inits,
                            RowBody body) const override {
    return f.inRowBlocks(inits(), body);
  }
};
} // namespace mlir::snapkv::detail

const Layout &mlir::snapkv::detail::rowBlocks() {
  static const RowBlocks layout;
  return layout;
}
