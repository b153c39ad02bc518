//===- AttentionBuilders.h - the attention decompositions share -*- C++ -*-===//
//
// Private to lib/Dialect/SnapKV/IR: the linalg-on-tensors builder both
// decompositions of snapkv.attention use (AttentionDecomposition.cpp, the
// tile's; AttentionKeyLoop.cpp, the whole op's), and the latter's entry.
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_LIB_DIALECT_SNAPKV_IR_ATTENTIONBUILDERS_H
#define SNAPKV_LIB_DIALECT_SNAPKV_IR_ATTENTIONBUILDERS_H

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

namespace mlir::snapkv::attention {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline Value constF32(OpBuilder &b, Location loc, float v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

/// What both decompositions build with: linalg ops on tensors, in f32.
class OpsBuilder {
protected:
  OpsBuilder(OpBuilder &b, Location loc)
      : b(b), loc(loc), f32(b.getF32Type()) {}
  using Body = function_ref<Value(OpBuilder &, Location, ValueRange)>;

  Value cIndex(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  AffineMap map(unsigned numDims, ArrayRef<unsigned> dims) {
    SmallVector<AffineExpr> exprs;
    for (unsigned d : dims)
      exprs.push_back(b.getAffineDimExpr(d));
    return AffineMap::get(numDims, 0, exprs, b.getContext());
  }
  /// An f32 operand of a body: extended from a narrower element type.
  Value wide(OpBuilder &nb, Location l, Value v) {
    return v.getType() == f32 ? v : arith::ExtFOp::create(nb, l, f32, v);
  }
  Value empty(ArrayRef<OpFoldResult> sizes, Type elem) {
    return tensor::EmptyOp::create(b, loc, sizes, elem);
  }
  Value empty(ArrayRef<int64_t> shape, Type elem) {
    return tensor::EmptyOp::create(b, loc, shape, elem);
  }
  Value filled(ArrayRef<OpFoldResult> sizes, float value) {
    return fill(empty(sizes, f32), value);
  }
  Value filled(ArrayRef<int64_t> shape, float value) {
    return fill(empty(shape, f32), value);
  }
  Value fill(Value tensor, float value) {
    return linalg::FillOp::create(b, loc, constF32(b, loc, value), tensor)
        .getResult(0);
  }
  Value generic(Type resultType, ValueRange ins, Value out,
                ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iters,
                Body body) {
    return linalg::GenericOp::create(
               b, loc, resultType, ins, out, maps, iters,
               [&](OpBuilder &nb, Location l, ValueRange args) {
                 linalg::YieldOp::create(nb, l, body(nb, l, args));
               })
        .getResult(0);
  }
  Value generic(ValueRange ins, Value out, ArrayRef<AffineMap> maps,
                ArrayRef<utils::IteratorType> iters, Body body) {
    return generic(out.getType(), ins, out, maps, iters, body);
  }

  OpBuilder &b;
  Location loc;
  Type f32;
};

/// snapkv.attention `op` as one loop over tiles of `keyTile` keys whose body
/// is linalg ops over all of (batch, kv head, group head, query row) at once
/// (AttentionKeyLoop.cpp): the result, in the op's init.
Value decomposeKeyLoop(OpBuilder &b, Location loc, AttentionOp op,
                       int64_t keyTile, bool lengthsChecked);

} // namespace mlir::snapkv::attention

#endif // SNAPKV_LIB_DIALECT_SNAPKV_IR_ATTENTIONBUILDERS_H
