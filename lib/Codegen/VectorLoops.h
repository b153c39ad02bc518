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
#include "mlir/Dialect/Tensor/IR/Tensor.h"
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

/// (out, sums) = body(first, block, out, sums): one block of a chunk.
using BlockBody = function_ref<std::pair<Value, Value>(
    OpBuilder &, Location, Value, Value, Value, Value)>;

/// The loops of a one-row block kernel: over chunks of `chunk` of the
/// `columns` columns (`first`: the chunk's first column) and, in each, over
/// the `blocks` blocks of the reduction, `body` takes the result `out` and a
/// `[chunk]` row of block sums (one buffer once bufferized) zeroed by
/// vectors of `zeros` first, and returns both. Returns the final result.
inline Value forChunksOfBlocks(OpBuilder &b, Location loc, int64_t columns,
                               int64_t chunk, int64_t blocks, Value init,
                               Value zeros, BlockBody body) {
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  Value c0 = index(0), c1 = index(1);
  auto zerosType = cast<VectorType>(zeros.getType());
  Value sums0 =
      tensor::EmptyOp::create(b, loc, {chunk}, zerosType.getElementType());
  auto chunks = scf::ForOp::create(
      b, loc, c0, index(columns), index(chunk), ValueRange{init, sums0},
      [&](OpBuilder &b, Location loc, Value first, ValueRange carried) {
        auto loop = scf::ForOp::create(
            b, loc, c0, index(blocks), c1, carried,
            [&](OpBuilder &b, Location loc, Value block, ValueRange carried) {
              Value sums =
                  forCarrying(
                      b, loc, c0, chunk, zerosType.getDimSize(0), carried[1],
                      [&](OpBuilder &b, Location loc, Value col, Value sums) {
                        return writeVector(b, loc, zeros, sums, {col});
                      })
                      .getResult(0);
              auto [out, next] = body(b, loc, first, block, carried[0], sums);
              scf::YieldOp::create(b, loc, ValueRange{out, next});
            });
        scf::YieldOp::create(b, loc, loop.getResults());
      });
  return chunks.getResult(0);
}

} // namespace mlir::snapkv

#endif // SNAPKV_LIB_CODEGEN_VECTORLOOPS_H
