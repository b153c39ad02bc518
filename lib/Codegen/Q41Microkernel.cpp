//===- Q41Microkernel.cpp - vector x Q4_1 matrix products on the CPU ------===//
//
// One row of snapkv-quantize-weights' Q4_1 product (Q41Contraction.h), as
// the Q8_0 one of Vectorize.cpp with two values per byte: per block of 32
// rows, its 16 rows of bytes are read in address order, each vector of bytes
// split into its low and high nibbles (`and 15`, `shr 4`), both widened to
// f32 (`uitofp`, exact) and multiply-added by the block's activations j and
// 16 + j into a row of block sums (in the L1 cache); then, once per block,
// `out = sums * d + (m * sum x + out)`: llama.cpp's factoring of `sum (q *
// d + m) * x`, two FMAs per column instead of two per weight.
//
//===----------------------------------------------------------------------===//

#include "VectorLoops.h"

#include "snapkv/Codegen/Q41Contraction.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace {

/// Columns per chunk of the block sums, as the Q8_0 kernel's (8 KB of f32).
constexpr int64_t kChunk = 2048;

} // namespace

LogicalResult snapkv::vectorizeQ41VectorTimesMatrix(RewriterBase &rewriter,
                                                    linalg::LinalgOp op,
                                                    int64_t lanes) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (!isQ41Contraction(op) || ranges.size() != 5 || ranges[0] != 1 ||
      ranges[2] != 2 || ranges[3] != kQ41Pairs ||
      llvm::any_of(ranges, ShapedType::isDynamic))
    return failure();
  int64_t columns = ranges[4];
  int64_t width = 0;
  for (int64_t w : {4 * lanes, 2 * lanes, lanes})
    if (!width && columns % w == 0)
      width = w;
  if (!width)
    return failure();
  int64_t chunk = columns;
  if (chunk > kChunk)
    for (chunk = kChunk - kChunk % width; columns % chunk != 0;)
      chunk -= width;

  rewriter.setInsertionPoint(op);
  Location loc = op.getLoc();
  Value x = op.getDpsInputs()[0], bytes = op.getDpsInputs()[1],
        scales = op.getDpsInputs()[2], mins = op.getDpsInputs()[3],
        init = op.getDpsInits()[0];
  Type f32 = rewriter.getF32Type();
  auto index = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  };
  Value c0 = index(0), c1 = index(1);
  auto floatType = VectorType::get({width}, f32);
  auto byteType = VectorType::get({width}, rewriter.getI8Type());
  Value zeros = arith::ConstantOp::create(
      rewriter, loc, floatType, DenseElementsAttr::get(floatType, 0.0f));
  Value fifteen = arith::ConstantOp::create(
      rewriter, loc, byteType, DenseElementsAttr::get(byteType, int8_t(15)));
  Value four = arith::ConstantOp::create(
      rewriter, loc, byteType, DenseElementsAttr::get(byteType, int8_t(4)));
  auto loop = [&](OpBuilder &b, Location loc, int64_t count, int64_t step,
                  Value carried, CarriedBody body) {
    return forCarrying(b, loc, c0, count, step, carried, body).getResult(0);
  };
  auto read = readVector;
  auto write = writeVector;
  // Activation (half, j) of block `block`, in f32.
  auto activation = [&](OpBuilder &b, Location loc, Value block, int64_t half,
                        Value j) -> Value {
    Value a = tensor::ExtractOp::create(b, loc, x, {c0, block, index(half), j});
    return a.getType().isF32() ? a : arith::ExtFOp::create(b, loc, f32, a);
  };

  Value sums0 = tensor::EmptyOp::create(rewriter, loc, {chunk}, f32);
  auto chunks = scf::ForOp::create(
      rewriter, loc, c0, index(columns), index(chunk), ValueRange{init, sums0},
      [&](OpBuilder &b, Location loc, Value first, ValueRange carried) {
        auto blocks = scf::ForOp::create(
            b, loc, c0, index(ranges[1]), c1, carried,
            [&](OpBuilder &b, Location loc, Value block, ValueRange carried) {
              Value sums =
                  loop(b, loc, chunk, width, carried[1],
                       [&](OpBuilder &b, Location loc, Value col, Value sums) {
                         return write(b, loc, zeros, sums, {col});
                       });
              // Byte row j: values j (low nibbles) and 16 + j (high), and
              // the block's sum of activations, in order.
              Value zero =
                  arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0));
              auto rows = scf::ForOp::create(
                  b, loc, c0, index(kQ41Pairs), c1, ValueRange{sums, zero},
                  [&](OpBuilder &b, Location loc, Value j, ValueRange carried) {
                    Value low = activation(b, loc, block, 0, j);
                    Value high = activation(b, loc, block, 1, j);
                    Value total = arith::AddFOp::create(
                        b, loc, arith::AddFOp::create(b, loc, carried[1], low),
                        high);
                    Value lowSplat =
                        vector::BroadcastOp::create(b, loc, floatType, low);
                    Value highSplat =
                        vector::BroadcastOp::create(b, loc, floatType, high);
                    Value next = loop(
                        b, loc, chunk, width, carried[0],
                        [&](OpBuilder &b, Location loc, Value col, Value sums) {
                          Value at = arith::AddIOp::create(b, loc, first, col);
                          Value packed =
                              read(b, loc, byteType, bytes, {block, j, at});
                          Value q0 = arith::UIToFPOp::create(
                              b, loc, floatType,
                              arith::AndIOp::create(b, loc, packed, fifteen));
                          Value q1 = arith::UIToFPOp::create(
                              b, loc, floatType,
                              arith::ShRUIOp::create(b, loc, packed, four));
                          Value sum = vector::FMAOp::create(
                              b, loc, lowSplat, q0,
                              read(b, loc, floatType, sums, {col}));
                          sum =
                              vector::FMAOp::create(b, loc, highSplat, q1, sum);
                          return write(b, loc, sum, sums, {col});
                        });
                    scf::YieldOp::create(b, loc, ValueRange{next, total});
                  });
              Value total = vector::BroadcastOp::create(b, loc, floatType,
                                                        rows.getResult(1));
              // out = sums * d + (m * sum x + out), once per block.
              Value result = loop(
                  b, loc, chunk, width, carried[0],
                  [&](OpBuilder &b, Location loc, Value col, Value out) {
                    Value at = arith::AddIOp::create(b, loc, first, col);
                    Value shifted = vector::FMAOp::create(
                        b, loc, read(b, loc, floatType, mins, {block, at}),
                        total, read(b, loc, floatType, out, {c0, at}));
                    Value next = vector::FMAOp::create(
                        b, loc,
                        read(b, loc, floatType, rows.getResult(0), {col}),
                        read(b, loc, floatType, scales, {block, at}), shifted);
                    return write(b, loc, next, out, {c0, at});
                  });
              scf::YieldOp::create(b, loc,
                                   ValueRange{result, rows.getResult(0)});
            });
        scf::YieldOp::create(b, loc, blocks.getResults());
      });
  rewriter.replaceOp(op, chunks.getResult(0));
  return success();
}
