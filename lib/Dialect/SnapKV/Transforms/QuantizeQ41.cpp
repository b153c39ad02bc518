//===- QuantizeQ41.cpp - products by GGUF Q4_1 weights --------------------===//
//
// The linalg of snapkv-quantize-weights' `q4_1` weights: a one-row product
// reading the nibbles in its body (with float or int8 activations), and the
// dequantization a prompt's product takes first.
//
//===----------------------------------------------------------------------===//

#include "QuantizeQ41.h"

#include "snapkv/Codegen/Q41Contraction.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;

namespace {

/// `value` with dimension `dim` split into `parts` (the outer extents
/// `shape[dim] / product(parts)`, then `parts`).
Value split(OpBuilder &b, Location loc, Value value, unsigned dim,
            ArrayRef<int64_t> parts) {
  auto type = cast<RankedTensorType>(value.getType());
  int64_t inner = 1;
  for (int64_t part : parts)
    inner *= part;
  SmallVector<int64_t> shape;
  SmallVector<ReassociationIndices> groups;
  for (unsigned d = 0; d < type.getRank(); ++d) {
    ReassociationIndices group = {static_cast<int64_t>(shape.size())};
    if (d != dim) {
      shape.push_back(type.getDimSize(d));
    } else {
      shape.push_back(type.getDimSize(d) / inner);
      for (int64_t part : parts) {
        group.push_back(shape.size());
        shape.push_back(part);
      }
    }
    groups.push_back(group);
  }
  return tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), value,
      groups);
}

/// `q * d + m` in f32 for the nibble of `byte` that `h` (the index of the
/// block's half) selects.
Value weightOf(OpBuilder &b, Location loc, Value byte, Value d, Value m,
               unsigned h) {
  Type i8 = b.getI8Type();
  Value half = arith::IndexCastOp::create(b, loc, i8,
                                          linalg::IndexOp::create(b, loc, h));
  Value shift = arith::MulIOp::create(
      b, loc, half, arith::ConstantOp::create(b, loc, b.getI8IntegerAttr(4)));
  Value nibble = arith::AndIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, byte, shift),
      arith::ConstantOp::create(b, loc, b.getI8IntegerAttr(15)));
  Value q = arith::UIToFPOp::create(b, loc, b.getF32Type(), nibble);
  return arith::AddFOp::create(b, loc, arith::MulFOp::create(b, loc, q, d), m);
}

} // namespace

Value snapkv::buildQ41Contraction(OpBuilder &b, Location loc, Value x,
                                  Value bytes, Value scales, Value mins,
                                  Value init, bool int8Activations) {
  MLIRContext *ctx = b.getContext();
  Value blocks = split(b, loc, bytes, 0, {kQ41Pairs});
  SmallVector<Value> inputs;
  if (int8Activations) {
    auto [quantized, activationScales] = quantizeActivationBlocks(b, loc, x);
    auto type = cast<RankedTensorType>(quantized.getType());
    Value halves = tensor::ExpandShapeOp::create(
        b, loc,
        RankedTensorType::get({1, type.getDimSize(1), 2, kQ41Pairs},
                              type.getElementType()),
        quantized, SmallVector<ReassociationIndices>{{0}, {1}, {2, 3}});
    inputs = {halves, blocks, activationScales, scales, mins};
  } else {
    inputs = {split(b, loc, x, 1, {2, kQ41Pairs}), blocks, scales, mins};
  }
  using utils::IteratorType;
  SmallVector<IteratorType> iterators = {
      IteratorType::parallel, IteratorType::reduction, IteratorType::reduction,
      IteratorType::reduction, IteratorType::parallel};
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{init.getType()}, inputs, ValueRange{init},
      int8Activations ? q41Int8ContractionMaps(ctx) : q41ContractionMaps(ctx),
      iterators, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Type f32 = nb.getF32Type();
        Value a = args[0];
        if (int8Activations)
          a = arith::MulFOp::create(
              nb, nloc, arith::SIToFPOp::create(nb, nloc, f32, a), args[2]);
        else if (!a.getType().isF32())
          a = arith::ExtFOp::create(nb, nloc, f32, a);
        // The bytes, then (after the activations' scales) d and m, and out.
        Value weight = weightOf(nb, nloc, args[1], args[args.size() - 3],
                                args[args.size() - 2], 2);
        Value product = arith::MulFOp::create(nb, nloc, a, weight);
        Value sum = arith::AddFOp::create(nb, nloc, args.back(), product);
        linalg::YieldOp::create(nb, nloc, ValueRange{sum});
      });
  return generic.getResult(0);
}

Value snapkv::buildQ41Dequantize(OpBuilder &b, Location loc, Value bytes,
                                 Value scales, Value mins, Type type) {
  MLIRContext *ctx = b.getContext();
  auto bytesType = cast<RankedTensorType>(bytes.getType());
  int64_t blocks = bytesType.getDimSize(0) / kQ41Pairs,
          columns = bytesType.getDimSize(1);
  Value empty = tensor::EmptyOp::create(
      b, loc, ArrayRef<int64_t>{blocks, 2, kQ41Pairs, columns}, type);
  AffineExpr kb, h, j, n;
  bindDims(ctx, kb, h, j, n);
  SmallVector<AffineMap> maps = {AffineMap::get(4, 0, {kb, j, n}, ctx),
                                 AffineMap::get(4, 0, {kb, n}, ctx),
                                 AffineMap::get(4, 0, {kb, n}, ctx),
                                 AffineMap::getMultiDimIdentityMap(4, ctx)};
  SmallVector<utils::IteratorType> iterators(4, utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange{empty.getType()},
      ValueRange{split(b, loc, bytes, 0, {kQ41Pairs}), scales, mins},
      ValueRange{empty}, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value weight = weightOf(nb, nloc, args[0], args[1], args[2], 1);
        if (type != weight.getType())
          weight = arith::TruncFOp::create(nb, nloc, type, weight);
        linalg::YieldOp::create(nb, nloc, ValueRange{weight});
      });
  return tensor::CollapseShapeOp::create(
      b, loc, RankedTensorType::get({blocks * kQ41Block, columns}, type),
      generic.getResult(0), SmallVector<ReassociationIndices>{{0, 1, 2}, {3}});
}
