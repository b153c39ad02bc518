//===- AppendInPlaceLayouts.h - append-in-place's layouts ---*- C++ -*-===//
//
// What snapkv-append-in-place's uniform rewrite shares with its ragged and
// pool layouts (AppendInPlaceLayouts.cpp). Internal to SnapKVTransforms.
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_APPENDINPLACELAYOUTS_H
#define SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_APPENDINPLACELAYOUTS_H

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include "llvm/ADT/BitVector.h"

#include <string>
#include <utility>

namespace mlir::snapkv::detail {

/// How the caches are laid out after the rewrite (see the file comment).
enum class Layout { Uniform, Ragged, Pool };

/// One cache argument appended to: `concat` is `tensor.concat dim(dim) %arg,
/// %row` and its result is returned as result `result`.
struct Append {
  unsigned arg;
  tensor::ConcatOp concat;
  unsigned result;
};

/// What a function's rewrite does to its signature.
struct Plan {
  SmallVector<Append> appends;
  int64_t dim = -1;
  /// Ragged layout: the (key, value) appends (indices into `appends`) that
  /// feed the same attentions, and those attentions.
  SmallVector<std::pair<unsigned, unsigned>> pairs;
  SmallVector<SmallVector<AttentionOp>> attentions;
  /// Batch and cache heads of every pair (ragged, pool).
  int64_t batch = 0, heads = 0;
};

func::ReturnOp returnOf(func::FuncOp func);

/// Where the `rows` argument goes: after the last argument that is not a
/// weight (weights come last in the runner's calling convention).
unsigned rowsIndex(func::FuncOp func);

/// The end of a rewrite of `func`: the `erased` results and the appends
/// gone, the signature updated, the convention recorded. Returns the buffers'
/// argument numbers and the rows argument's.
std::pair<SmallVector<unsigned>, unsigned>
finishRewrite(func::FuncOp func, const Plan &plan,
              const llvm::BitVector &erased, unsigned rowsAt,
              const SmallVector<unsigned> &buffers, int64_t dim, Layout layout);

/// The ragged and pool layouts' part of planning `func`: the (key, value)
/// pairs and the attentions that read them. A failure says why in `why`.
LogicalResult planRagged(func::FuncOp func, Plan &plan, std::string &why);

/// The ragged rewrite (budget=adaptive) and the pool rewrite (layout=pool) of
/// `func` by `plan`: the buffers' new argument numbers and the rows
/// argument's.
std::pair<SmallVector<unsigned>, unsigned> rewriteRagged(func::FuncOp func,
                                                         const Plan &plan);
std::pair<SmallVector<unsigned>, unsigned> rewritePool(func::FuncOp func,
                                                       const Plan &plan);

} // namespace mlir::snapkv::detail

#endif // SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_APPENDINPLACELAYOUTS_H
