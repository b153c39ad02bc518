//===- SelectDecomposition.h - a select as its stage ops ----*- C++ -*-===//

#ifndef SNAPKV_DIALECT_SNAPKV_IR_SELECTDECOMPOSITION_H
#define SNAPKV_DIALECT_SNAPKV_IR_SELECTDECOMPOSITION_H

#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::snapkv {
/// Replaces `op` (a select or select_adaptive) with its stage ops (its
/// AggregatedOpInterface decomposition), which inherit its configuration;
/// fails, leaving `op`, where it has no stage form.
LogicalResult decomposeSelect(RewriterBase &rewriter,
                              linalg::AggregatedOpInterface op);
} // namespace mlir::snapkv

#endif // SNAPKV_DIALECT_SNAPKV_IR_SELECTDECOMPOSITION_H
