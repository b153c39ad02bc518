//===- VectorLoops.h - loops of in-bounds vector reads and writes -*- C++
//-*-===//
//
// The building blocks of the hand-written one-row kernels of snapkv-vectorize
// (the vector x Q8_0 matrix products): scf.for loops carrying one tensor, and
// 1-D reads and writes known to be in bounds.
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_LIB_CODEGEN_VECTORLOOPS_H
#define SNAPKV_LIB_CODEGEN_VECTORLOOPS_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::snapkv {

/// A read of `type` from `source` at `indices`, in bounds.
inline Value readVector(OpBuilder &b, Location loc, VectorType type,
                        Value source, ValueRange indices) {
  return vector::TransferReadOp::create(b, loc, type, source, indices,
                                        /*padding=*/std::nullopt,
                                        ArrayRef<bool>{true});
}

/// `vector` written into `dest` at `indices`, in bounds.
inline Value writeVector(OpBuilder &b, Location loc, Value vector, Value dest,
                         ValueRange indices) {
  return vector::TransferWriteOp::create(b, loc, vector, dest, indices,
                                         ArrayRef<bool>{true})
      .getResult();
}

using CarriedBody = function_ref<Value(OpBuilder &, Location, Value, Value)>;

/// for i in [from, from + count) step `step`: carried = body(i, carried).
inline scf::ForOp forCarrying(OpBuilder &b, Location loc, Value from,
                              int64_t count, int64_t step, ValueRange carried,
                              CarriedBody body) {
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  Value upper = arith::AddIOp::create(b, loc, from, index(count));
  return scf::ForOp::create(
      b, loc, from, upper, index(step), carried,
      [&](OpBuilder &b, Location loc, Value i, ValueRange carried) {
        scf::YieldOp::create(b, loc, body(b, loc, i, carried.front()));
      });
}

} // namespace mlir::snapkv

#endif // SNAPKV_LIB_CODEGEN_VECTORLOOPS_H
