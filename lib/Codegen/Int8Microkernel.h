//===- Int8Microkernel.h - int8 x int8 block products on the CPU -*- C++
//-*-===//

#ifndef SNAPKV_LIB_CODEGEN_INT8MICROKERNEL_H
#define SNAPKV_LIB_CODEGEN_INT8MICROKERNEL_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::snapkv {

/// Vectorises a one-row int8 x int8 block product
/// (snapkv::isInt8ScaledContraction, static sizes, as snapkv-parallelize
/// leaves it; values packed by 4 rows): per block, the i32 sums of its 32
/// integer products for each column, then one multiply-add of the sums by
/// the two scales into the result. `vnni` (512-bit vectors only): the sums
/// by `vpdpbusd`, else by i32 multiplies of the bytes sign-extended by
/// shifts; the same integers either way.
LogicalResult vectorizeInt8VectorTimesMatrix(RewriterBase &rewriter,
                                             linalg::LinalgOp op, int64_t lanes,
                                             bool vnni);

/// Vectorises an int8 x int8 block product of several rows (a prompt's,
/// static but for the rows, as snapkv-parallelize tiles it): per strip of up
/// to 64 columns, tiles of 4 rows whose i32 block sums stay in registers over
/// a block's 32 rows (each weight read shared by the tile's rows), then the
/// sums times both scales added to the result once per block. `vnni` as
/// above; the same integers either way.
LogicalResult vectorizeInt8MatrixTimesMatrix(RewriterBase &rewriter,
                                             linalg::LinalgOp op, int64_t lanes,
                                             bool vnni);

} // namespace mlir::snapkv

#endif // SNAPKV_LIB_CODEGEN_INT8MICROKERNEL_H
