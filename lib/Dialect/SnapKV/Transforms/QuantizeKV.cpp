//===- QuantizeKV.cpp - Packed int8 K/V rows ------------------------------===//
//
// The i8 cache of `snapkv-compress-kv-cache kv-dtype=i8`: each row (one
// token of one head) is D int8 values and its f32 scale's four bytes, so a
// cache stays one rank-4 tensor that every pass and runner handles as before
// (appends along the rows, in-place buffers) and its bytes are what it
// holds. Plain linalg on tensors: the CPU and GPU pipelines lower it as they
// lower the rest of the model.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/Transforms/QuantizeKV.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::snapkv;

RankedTensorType mlir::snapkv::quantizedType(RankedTensorType type) {
  SmallVector<int64_t> shape(type.getShape());
  shape.back() += kScaleBytes;
  return RankedTensorType::get(shape, IntegerType::get(type.getContext(), 8));
}

/// The sizes of `value` with the last one replaced by `last`.
static SmallVector<OpFoldResult> sizesWithLast(OpBuilder &b, Location loc,
                                               Value value, int64_t last) {
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, value);
  sizes.back() = b.getIndexAttr(last);
  return sizes;
}

/// The sizes of `value` without the last one.
static SmallVector<OpFoldResult> rowSizes(OpBuilder &b, Location loc,
                                          Value value) {
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, value);
  sizes.pop_back();
  return sizes;
}

/// Identity and the map dropping the last (row) dimension, of rank `rank`.
static std::pair<AffineMap, AffineMap> rowMaps(MLIRContext *ctx,
                                               unsigned rank) {
  return {
      AffineMap::getMultiDimIdentityMap(rank, ctx),
      AffineMap::getMultiDimIdentityMap(rank, ctx).getMajorSubMap(rank - 1)};
}

static SmallVector<utils::IteratorType> rowIterators(unsigned rank,
                                                     bool reduce) {
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  if (reduce)
    iterators.back() = utils::IteratorType::reduction;
  return iterators;
}

/// 8 * (the iteration's index along the last dimension), as i32.
static Value byteShift(OpBuilder &b, Location loc, unsigned rank) {
  Value index = linalg::IndexOp::create(b, loc, rank - 1);
  Value i = arith::IndexCastOp::create(b, loc, b.getI32Type(), index);
  return arith::MulIOp::create(b, loc, i,
                               arith::ConstantIntOp::create(b, loc, 8, 32));
}

static void yield(OpBuilder &b, Location loc, Value value) {
  linalg::YieldOp::create(b, loc, value);
}

static Value toF32(OpBuilder &b, Location loc, Value v) {
  return v.getType().isF32() ? v
                             : arith::ExtFOp::create(b, loc, b.getF32Type(), v);
}

/// `input` reduced along its last dimension: per row, `combine(element,
/// accumulator)` from `initial`.
static Value
reduceRows(OpBuilder &b, Location loc, Value input, TypedAttr initial,
           function_ref<Value(OpBuilder &, Location, Value, Value)> combine) {
  unsigned rank = cast<RankedTensorType>(input.getType()).getRank();
  auto [identity, perRow] = rowMaps(b.getContext(), rank);
  Value zero = arith::ConstantOp::create(b, loc, initial);
  Value empty = tensor::EmptyOp::create(b, loc, rowSizes(b, loc, input),
                                        initial.getType());
  Value init = linalg::FillOp::create(b, loc, zero, empty).getResult(0);
  return linalg::GenericOp::create(
             b, loc, init.getType(), input, init, {identity, perRow},
             rowIterators(rank, /*reduce=*/true),
             [&](OpBuilder &nb, Location nl, ValueRange args) {
               yield(nb, nl, combine(nb, nl, args[0], args[1]));
             })
      .getResult(0);
}

Value mlir::snapkv::quantizeRows(OpBuilder &b, Location loc, Value rows) {
  auto type = cast<RankedTensorType>(rows.getType());
  unsigned rank = type.getRank();
  MLIRContext *ctx = b.getContext();
  auto [identity, perRow] = rowMaps(ctx, rank);
  Type f32 = b.getF32Type(), i8 = b.getI8Type();
  AffineMap rowIdentity = AffineMap::getMultiDimIdentityMap(rank - 1, ctx);
  // s = absmax / 127 per row.
  Value absmax = reduceRows(
      b, loc, rows, b.getF32FloatAttr(0.0f),
      [&](OpBuilder &nb, Location nl, Value element, Value acc) -> Value {
        Value a = math::AbsFOp::create(nb, nl, toF32(nb, nl, element));
        return arith::MaxNumFOp::create(nb, nl, acc, a);
      });
  Value empty = tensor::EmptyOp::create(b, loc, rowSizes(b, loc, rows), f32);
  Value scales =
      linalg::GenericOp::create(
          b, loc, empty.getType(), absmax, empty, {rowIdentity, rowIdentity},
          rowIterators(rank - 1, false),
          [&](OpBuilder &nb, Location nl, ValueRange args) {
            Value c127 =
                arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(127.0f));
            yield(nb, nl, arith::DivFOp::create(nb, nl, args[0], c127));
          })
          .getResult(0);
  // The values: q = clamp(roundeven(x / s), -127, 127), 0 when s = 0.
  Value valuesInit =
      tensor::EmptyOp::create(b, loc, tensor::getMixedSizes(b, loc, rows), i8);
  Value values =
      linalg::GenericOp::create(
          b, loc, valuesInit.getType(), ValueRange{rows, scales}, valuesInit,
          {identity, perRow, identity}, rowIterators(rank, false),
          [&](OpBuilder &nb, Location nl, ValueRange args) {
            Value x = toF32(nb, nl, args[0]), s = args[1];
            Value lo =
                arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(-127.0f));
            Value hi =
                arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(127.0f));
            Value z = arith::ConstantOp::create(nb, nl, nb.getF32FloatAttr(0));
            Value q = math::RoundEvenOp::create(
                nb, nl, arith::DivFOp::create(nb, nl, x, s));
            q = arith::MinimumFOp::create(
                nb, nl, arith::MaximumFOp::create(nb, nl, q, lo), hi);
            Value positive =
                arith::CmpFOp::create(nb, nl, arith::CmpFPredicate::OGT, s, z);
            q = arith::SelectOp::create(nb, nl, positive, q, z);
            yield(nb, nl, arith::FPToSIOp::create(nb, nl, i8, q));
          })
          .getResult(0);
  // The scale's bytes, little-endian.
  Value bytesInit = tensor::EmptyOp::create(
      b, loc, sizesWithLast(b, loc, rows, kScaleBytes), i8);
  Value bytes =
      linalg::GenericOp::create(
          b, loc, bytesInit.getType(), scales, bytesInit, {perRow, identity},
          rowIterators(rank, false),
          [&](OpBuilder &nb, Location nl, ValueRange args) {
            Value bits =
                arith::BitcastOp::create(nb, nl, nb.getI32Type(), args[0]);
            Value shifted =
                arith::ShRUIOp::create(nb, nl, bits, byteShift(nb, nl, rank));
            yield(nb, nl, arith::TruncIOp::create(nb, nl, i8, shifted));
          })
          .getResult(0);
  return tensor::ConcatOp::create(b, loc, rank - 1, ValueRange{values, bytes});
}

Value mlir::snapkv::dequantizeRows(OpBuilder &b, Location loc, Value packed,
                                   Type elementType) {
  auto type = cast<RankedTensorType>(packed.getType());
  unsigned rank = type.getRank();
  int64_t dim = type.getShape().back() - kScaleBytes;
  MLIRContext *ctx = b.getContext();
  auto [identity, perRow] = rowMaps(ctx, rank);
  SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
  SmallVector<OpFoldResult> strides(rank, b.getIndexAttr(1));
  Value values = tensor::ExtractSliceOp::create(
      b, loc, packed, offsets, sizesWithLast(b, loc, packed, dim), strides);
  offsets.back() = b.getIndexAttr(dim);
  Value bytes = tensor::ExtractSliceOp::create(
      b, loc, packed, offsets, sizesWithLast(b, loc, packed, kScaleBytes),
      strides);
  // Each row's scale bits: the bytes or-ed into place.
  Type i32 = b.getI32Type();
  Value bits = reduceRows(
      b, loc, bytes, b.getI32IntegerAttr(0),
      [&](OpBuilder &nb, Location nl, Value element, Value acc) -> Value {
        Value byte = arith::ExtUIOp::create(nb, nl, i32, element);
        Value placed =
            arith::ShLIOp::create(nb, nl, byte, byteShift(nb, nl, rank));
        return arith::OrIOp::create(nb, nl, acc, placed);
      });
  Value outInit = tensor::EmptyOp::create(
      b, loc, tensor::getMixedSizes(b, loc, values), elementType);
  return linalg::GenericOp::create(
             b, loc, outInit.getType(), ValueRange{values, bits}, outInit,
             {identity, perRow, identity}, rowIterators(rank, false),
             [&](OpBuilder &nb, Location nl, ValueRange args) {
               Value s =
                   arith::BitcastOp::create(nb, nl, nb.getF32Type(), args[1]);
               Value x = arith::MulFOp::create(
                   nb, nl,
                   arith::SIToFPOp::create(nb, nl, nb.getF32Type(), args[0]),
                   s);
               if (!elementType.isF32())
                 x = arith::TruncFOp::create(nb, nl, elementType, x);
               yield(nb, nl, x);
             })
      .getResult(0);
}
