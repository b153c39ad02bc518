//===- AppendInPlace.cpp - decode appends to caller-owned cache buffers ---===//
//
// An imported decode step appends one row to each cache with tensor.concat
// and returns the longer tensor: compiled, every step allocates and copies the
// whole cache. Here the caches become buffers the caller owns (memref
// arguments with room for more rows) plus one `rows` argument, a
// tensor<N x i64> holding how many rows of each of the N buffers are valid
// (layers may keep different lengths: budget=pyramid); the new row is written
// in place at the buffer's row count and attention reads one row more.
// Destination-passing through `bufferization.to_tensor restrict writable` and
// `bufferization.materialize_in_destination`, so one-shot bufferization
// writes the argument's buffer and nothing is copied.
//
// The ragged layout (budget=adaptive, called by snapkv-compress-kv-cache)
// packs each cache's heads into one buffer [B, R, D] with room after each
// head; `rows` then holds every (keys, values) pair's head starts and
// lengths, the new row goes to each head at start + length, and the fused
// attention becomes snapkv.ragged_attention.
//
// The pool layout (layout=pool: a batched decode step, one sequence per batch
// row) puts every sequence's heads into one buffer [1, R, D] per cache, each
// (sequence, head) a segment with its own start, length and capacity, so that
// one call advances sequences of different lengths; each batch row's
// attention is a snapkv.ragged_attention over its own segments.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/ADT/BitVector.h"

#include <array>

namespace mlir::snapkv {
#define GEN_PASS_DEF_APPENDINPLACE
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

static constexpr StringLiteral kAttr = "snapkv.append_in_place";

namespace {
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
} // namespace

static bool isWeight(func::FuncOp func, unsigned i) {
  return func.getArgAttr(i, "snapkv.weight") != nullptr;
}

/// Where the `rows` argument goes: after the last argument that is not a
/// weight (weights come last in the runner's calling convention).
static unsigned rowsIndex(func::FuncOp func) {
  unsigned at = 0;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (!isWeight(func, i))
      at = i + 1;
  return at;
}

static func::ReturnOp returnOf(func::FuncOp func) {
  return cast<func::ReturnOp>(func.getBody().front().getTerminator());
}

/// The cache arguments `func` appends one row to, directly. A failure names
/// why (an argument concatenated in another way, or also used otherwise).
static LogicalResult planRagged(func::FuncOp func, Plan &plan,
                                std::string &why);

static FailureOr<Plan> planDirect(func::FuncOp func, Layout layout,
                                  std::string &why) {
  Plan plan;
  if (func.isExternal() || !func.getBody().hasOneBlock()) {
    why = "it has no body or more than one block";
    return failure();
  }
  func::ReturnOp ret = returnOf(func);
  for (BlockArgument arg : func.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type)
      continue;
    tensor::ConcatOp concat;
    bool other = false;
    for (Operation *user : arg.getUsers()) {
      if (auto c = dyn_cast<tensor::ConcatOp>(user)) {
        if (concat || c.getNumOperands() != 2 || c.getOperand(0) != arg ||
            c.getOperand(1) == arg) {
          other = true;
          continue;
        }
        concat = c;
      } else if (!isa<tensor::DimOp>(user)) {
        other = true;
      }
    }
    if (!concat)
      continue;
    auto name = [&] {
      return "argument " + std::to_string(arg.getArgNumber());
    };
    if (other) {
      why = name() + " is appended to but also used other than by "
                     "tensor.dim (its old rows would be read after the "
                     "append)";
      return failure();
    }
    int64_t dim = concat.getDim();
    if (!type.isDynamicDim(dim)) {
      why = name() + " has a static length along dim " + std::to_string(dim) +
            ": a buffer of that type has no room for another row";
      return failure();
    }
    auto rowType = cast<RankedTensorType>(concat.getOperand(1).getType());
    if (rowType.getDimSize(dim) != 1) {
      why = name() + " is concatenated with " +
            std::to_string(rowType.getDimSize(dim)) +
            " rows (not one static row) along dim " + std::to_string(dim);
      return failure();
    }
    if (plan.dim >= 0 && plan.dim != dim) {
      why = "the caches are appended along different dimensions";
      return failure();
    }
    plan.dim = dim;
    std::optional<unsigned> result;
    for (OpOperand &use : concat.getResult().getUses()) {
      if (use.getOwner() != ret.getOperation())
        continue;
      if (result) {
        why = name() + "'s appended cache is returned twice";
        return failure();
      }
      result = use.getOperandNumber();
    }
    if (!result) {
      why = name() + "'s appended cache is not returned";
      return failure();
    }
    plan.appends.push_back({arg.getArgNumber(), concat, *result});
  }
  if (plan.appends.empty()) {
    why = "no argument is appended to (tensor.concat of the argument and one "
          "row, returned)";
    return failure();
  }
  if (layout != Layout::Uniform && failed(planRagged(func, plan, why)))
    return failure();
  return plan;
}

/// Whether `dim` (of a cache) only feeds run-time checks, through pure
/// arithmetic: what the importer's shape checks of the removed mask leave.
static bool onlyChecked(tensor::DimOp dim) {
  SmallVector<Value> work{dim.getResult()};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Value value = work.pop_back_val();
    for (Operation *user : value.getUsers()) {
      if (isa<cf::AssertOp>(user) || !seen.insert(user).second)
        continue;
      if (!isa_and_nonnull<arith::ArithDialect>(user->getDialect()) ||
          user->getNumResults() != 1 || user->getNumRegions() != 0)
        return false;
      work.push_back(user->getResult(0));
    }
  }
  return true;
}

/// The ragged layout on top of `planDirect`'s plan: every appended cache
/// [B, Hc, T, D] is read only by `snapkv.attention` ops of one new query (no
/// offset: every key visible), each taking one cache's append as keys and
/// another's as values, so that both can live in packed buffers with each
/// head's rows at its own `starts`/`lengths`.
static LogicalResult planRagged(func::FuncOp func, Plan &plan,
                                std::string &why) {
  func::ReturnOp ret = returnOf(func);
  DenseMap<Operation *, unsigned> appendOf;
  for (auto [i, append] : llvm::enumerate(plan.appends)) {
    appendOf[append.concat] = i;
    auto type = cast<RankedTensorType>(append.concat.getType());
    std::string name = "argument " + std::to_string(append.arg);
    if (type.getRank() != 4 || plan.dim != 2) {
      why = name + " is not a [B, H, T, D] cache appended along dim 2";
      return failure();
    }
    if (type.isDynamicDim(0) || type.isDynamicDim(1) || type.isDynamicDim(3)) {
      why = name + " has a dynamic batch, head count or head dim";
      return failure();
    }
    if ((plan.batch && plan.batch != type.getDimSize(0)) ||
        (plan.heads && plan.heads != type.getDimSize(1))) {
      why = "the caches differ in batch or head count";
      return failure();
    }
    plan.batch = type.getDimSize(0);
    plan.heads = type.getDimSize(1);
    for (Operation *user : func.getArgument(append.arg).getUsers()) {
      auto dim = dyn_cast<tensor::DimOp>(user);
      if (user == append.concat || (dim && onlyChecked(dim)))
        continue;
      why = name + " is read other than by its append and run-time checks "
                   "(a ragged buffer has no [B, H, T, D] view)";
      return failure();
    }
  }
  SmallVector<int> pairOf(plan.appends.size(), -1);
  for (auto [i, append] : llvm::enumerate(plan.appends)) {
    for (Operation *user : append.concat->getUsers()) {
      if (user == ret.getOperation())
        continue;
      auto attention = dyn_cast<AttentionOp>(user);
      std::string name = "argument " + std::to_string(append.arg);
      if (!attention) {
        why = name + "'s append is read by " +
              user->getName().getStringRef().str() +
              ", not by snapkv.attention (an attention snapkv-fuse-attention "
              "recognises)";
        return failure();
      }
      if (attention.getOffset() ||
          attention.getQueries().getType().getDimSize(2) != 1) {
        why = "a snapkv.attention over argument " + std::to_string(append.arg) +
              " has an offset or more than one query row";
        return failure();
      }
      // snapkv.ragged_attention has neither.
      if (attention.getSoftcap() || attention.getSlidingWindow()) {
        why = "a snapkv.attention over argument " + std::to_string(append.arg) +
              " has a softcap or a sliding window";
        return failure();
      }
      Operation *keys = attention.getKeys().getDefiningOp();
      Operation *values = attention.getValues().getDefiningOp();
      if (!keys || !values || !appendOf.count(keys) ||
          !appendOf.count(values) || keys == values) {
        why = "a snapkv.attention does not read two appended caches as its "
              "keys and values";
        return failure();
      }
      unsigned k = appendOf[keys], v = appendOf[values];
      std::pair<unsigned, unsigned> pair{k, v};
      auto found = llvm::find(plan.pairs, pair);
      if (found == plan.pairs.end()) {
        if (pairOf[k] >= 0 || pairOf[v] >= 0) {
          why = "a cache is read by attentions with different partners";
          return failure();
        }
        pairOf[k] = pairOf[v] = plan.pairs.size();
        plan.pairs.push_back(pair);
        plan.attentions.emplace_back();
        found = plan.pairs.end() - 1;
      }
      SmallVector<AttentionOp> &list =
          plan.attentions[found - plan.pairs.begin()];
      if (!llvm::is_contained(list, attention))
        list.push_back(attention);
    }
  }
  for (auto [i, pair] : llvm::enumerate(pairOf))
    if (pair < 0) {
      why = "argument " + std::to_string(plan.appends[i].arg) +
            "'s append is not read by a snapkv.attention";
      return failure();
    }
  return success();
}

static MemRefType bufferType(Type tensor) {
  auto type = cast<RankedTensorType>(tensor);
  return MemRefType::get(type.getShape(), type.getElementType());
}

/// Erase results `erased` from `func` and its return.
static void eraseResults(func::FuncOp func, const llvm::BitVector &erased) {
  func::ReturnOp ret = returnOf(func);
  ret->eraseOperands(erased);
  (void)func.eraseResults(erased);
}

/// Records the new calling convention on `func`: `rows` is one argument
/// number, or (pool) the list of the rows arguments.
static void annotate(func::FuncOp func, ArrayRef<unsigned> rows,
                     ArrayRef<unsigned> args, int64_t dim,
                     Layout layout = Layout::Uniform) {
  Builder b(func.getContext());
  SmallVector<int64_t> buffers(args.begin(), args.end());
  SmallVector<int64_t> rowArgs(rows.begin(), rows.end());
  SmallVector<NamedAttribute> fields{
      b.getNamedAttr("rows", layout == Layout::Pool
                                 ? Attribute(b.getI64ArrayAttr(rowArgs))
                                 : Attribute(b.getI64IntegerAttr(rows[0]))),
      b.getNamedAttr("buffers", b.getI64ArrayAttr(buffers)),
      b.getNamedAttr("dim", b.getI64IntegerAttr(dim))};
  if (layout != Layout::Uniform)
    fields.push_back(b.getNamedAttr(
        "layout", b.getStringAttr(layout == Layout::Pool ? "pool" : "ragged")));
  func->setAttr(kAttr, b.getDictionaryAttr(fields));
}

/// Element [indices...] of `tensor` as an index.
static Value extractIndex(OpBuilder &b, Location loc, Value tensor,
                          ValueRange indices) {
  Value v = tensor::ExtractOp::create(b, loc, tensor, indices);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
}

/// `tensor`[p, which] : [B, Hc] of the rows argument [P, 2, B, Hc] (pool:
/// [P, 3, B, Hc]).
static Value rowsSlice(OpBuilder &b, Location loc, Value rows, int64_t p,
                       int64_t which, int64_t batch, int64_t heads) {
  auto type = RankedTensorType::get({batch, heads}, b.getI64Type());
  SmallVector<OpFoldResult> offsets{b.getIndexAttr(p), b.getIndexAttr(which),
                                    b.getIndexAttr(0), b.getIndexAttr(0)};
  SmallVector<OpFoldResult> sizes{b.getIndexAttr(1), b.getIndexAttr(1),
                                  b.getIndexAttr(batch), b.getIndexAttr(heads)};
  SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
  return tensor::ExtractSliceOp::create(b, loc, type, rows, offsets, sizes,
                                        strides);
}

/// `lengths` [B, Hc] plus one, elementwise: every head's rows after the
/// append.
static Value plusOne(OpBuilder &b, Location loc, Value lengths) {
  auto type = cast<RankedTensorType>(lengths.getType());
  Value init = tensor::EmptyOp::create(
      b, loc, tensor::getMixedSizes(b, loc, lengths), type.getElementType());
  auto identity = AffineMap::getMultiDimIdentityMap(2, b.getContext());
  return linalg::GenericOp::create(
             b, loc, type, lengths, init,
             ArrayRef<AffineMap>{identity, identity},
             SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
             [](OpBuilder &nb, Location nloc, ValueRange args) {
               Value inc = arith::ConstantIntOp::create(nb, nloc, 1, 64);
               linalg::YieldOp::create(
                   nb, nloc,
                   ValueRange{arith::AddIOp::create(nb, nloc, args[0], inc)});
             })
      .getResult(0);
}

/// Row `[b, c]` of a new-row tensor [B, Hc, 1, D] as [1, 1, D], inserted
/// into the packed `cache` [B', R, D] at [`to`, `at`].
static Value insertRow(OpBuilder &b, Location loc, Value row, Value cache,
                       Value bi, Value c, OpFoldResult to, Value at) {
  auto rowType = cast<RankedTensorType>(row.getType());
  int64_t dim = rowType.getDimSize(3);
  auto one3 = RankedTensorType::get({1, 1, dim}, rowType.getElementType());
  Value piece = tensor::ExtractSliceOp::create(
      b, loc, one3, row,
      ArrayRef<OpFoldResult>{bi, c, b.getIndexAttr(0), b.getIndexAttr(0)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(1),
                             b.getIndexAttr(1), b.getIndexAttr(dim)},
      SmallVector<OpFoldResult>(4, b.getIndexAttr(1)));
  return tensor::InsertSliceOp::create(
      b, loc, piece, cache, ArrayRef<OpFoldResult>{to, at, b.getIndexAttr(0)},
      ArrayRef<OpFoldResult>{b.getIndexAttr(1), b.getIndexAttr(1),
                             b.getIndexAttr(dim)},
      SmallVector<OpFoldResult>(3, b.getIndexAttr(1)));
}

/// The cache arguments `args` [B, Hc, T, D] as packed buffers `memref<batch
/// x ? x D>`, each read as a tensor (`bufferization.to_tensor restrict
/// writable`) after `last`, which advances; their argument numbers go to
/// `buffers`. What read a cache's length (the run-time checks, onlyChecked)
/// reads head 0's of batch row 0 (`lengths`); its other sizes are static.
static SmallVector<Value, 2> packCaches(OpBuilder &b, Location loc,
                                        ArrayRef<BlockArgument> args,
                                        int64_t batch, Value lengths,
                                        Value zero, Operation *&last,
                                        SmallVector<unsigned> &buffers) {
  SmallVector<Value, 2> caches;
  for (BlockArgument arg : args) {
    auto type = cast<RankedTensorType>(arg.getType());
    auto packed =
        RankedTensorType::get({batch, ShapedType::kDynamic, type.getDimSize(3)},
                              type.getElementType());
    for (Operation *user : llvm::make_early_inc_range(arg.getUsers()))
      if (auto dim = dyn_cast<tensor::DimOp>(user)) {
        b.setInsertionPoint(dim);
        std::optional<int64_t> d = dim.getConstantIndex();
        Value size =
            d && *d != 2 && !type.isDynamicDim(*d)
                ? arith::ConstantIndexOp::create(b, loc, type.getDimSize(*d))
                : extractIndex(b, loc, lengths, {zero, zero});
        dim.replaceAllUsesWith(size);
        dim.erase();
      }
    arg.setType(MemRefType::get(packed.getShape(), packed.getElementType()));
    b.setInsertionPointAfter(last);
    Value cache = bufferization::ToTensorOp::create(
        b, loc, packed, arg, /*restrict=*/true, /*writable=*/true);
    last = cache.getDefiningOp();
    caches.push_back(cache);
    buffers.push_back(arg.getArgNumber());
  }
  b.setInsertionPointAfter(last);
  return caches;
}

/// The loops over every (batch row, head) that write the new rows into
/// `caches`, placed after the later of the two appends (both rows exist
/// there); `b` is left at the start of the inner loop's body.
static std::pair<scf::ForOp, scf::ForOp>
rowLoops(OpBuilder &b, Location loc, const Append &keyAppend,
         const Append &valueAppend, ValueRange caches, Value zero, Value one,
         Value batchEnd, Value headEnd) {
  Operation *later = keyAppend.concat;
  if (later->isBeforeInBlock(valueAppend.concat))
    later = valueAppend.concat;
  b.setInsertionPointAfter(later);
  auto outer = scf::ForOp::create(b, loc, zero, batchEnd, one, caches);
  b.setInsertionPointToStart(outer.getBody());
  auto inner =
      scf::ForOp::create(b, loc, zero, headEnd, one, outer.getRegionIterArgs());
  b.setInsertionPointToStart(inner.getBody());
  return {outer, inner};
}

/// The end of a rewrite of `func`: the `erased` results and the appends
/// gone, the signature updated, the convention recorded. Returns the buffers'
/// argument numbers and the rows argument's.
static std::pair<SmallVector<unsigned>, unsigned>
finishRewrite(func::FuncOp func, const Plan &plan,
              const llvm::BitVector &erased, unsigned rowsAt,
              const SmallVector<unsigned> &buffers, int64_t dim,
              Layout layout) {
  eraseResults(func, erased);
  for (const Append &append : plan.appends)
    append.concat->erase();
  SmallVector<Type> inputs(func.getBody().front().getArgumentTypes());
  func.setType(
      FunctionType::get(func.getContext(), inputs, func.getResultTypes()));
  annotate(func, rowsAt, buffers, dim, layout);
  return {buffers, rowsAt};
}

/// The ragged rewrite of `func` by `plan`: each pair's caches become packed
/// buffers [B, R, D] (head c's rows at `starts[b, c]`, `lengths[b, c]` of
/// them valid, room after them), the new rows are written at `starts +
/// lengths`, and each attention becomes a `snapkv.ragged_attention` over one
/// row more. `rows : tensor<P x 2 x B x Hc x i64>` holds, per pair, `starts`
/// then `lengths`.
static std::pair<SmallVector<unsigned>, unsigned>
rewriteRagged(func::FuncOp func, const Plan &plan) {
  MLIRContext *ctx = func.getContext();
  Location loc = func.getLoc();
  unsigned rowsAt = rowsIndex(func);
  int64_t batch = plan.batch, heads = plan.heads;
  auto rowsType = RankedTensorType::get(
      {static_cast<int64_t>(plan.pairs.size()), 2, batch, heads},
      IntegerType::get(ctx, 64));
  (void)func.insertArgument(rowsAt, rowsType, {}, loc);
  Value rowsArg = func.getArgument(rowsAt);
  auto argOf = [&](const Append &append) {
    return func.getArgument(append.arg >= rowsAt ? append.arg + 1 : append.arg);
  };
  Block &entry = func.getBody().front();
  func::ReturnOp ret = returnOf(func);
  llvm::BitVector erased(ret.getNumOperands());
  OpBuilder b = OpBuilder::atBlockBegin(&entry);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value lastHead = arith::ConstantIndexOp::create(b, loc, heads - 1);
  Value batchEnd = arith::ConstantIndexOp::create(b, loc, batch);
  Value headEnd = arith::ConstantIndexOp::create(b, loc, heads);
  // The prologue (row slices, buffers as tensors) grows after `last`; an
  // insertion point would dangle when the op after it is erased.
  Operation *last = headEnd.getDefiningOp();
  SmallVector<unsigned> buffers;
  for (auto [p, pair] : llvm::enumerate(plan.pairs)) {
    Append keyAppend = plan.appends[pair.first];
    Append valueAppend = plan.appends[pair.second];
    b.setInsertionPointAfter(last);
    Value starts = rowsSlice(b, loc, rowsArg, p, 0, batch, heads);
    Value lengths = rowsSlice(b, loc, rowsArg, p, 1, batch, heads);
    last = lengths.getDefiningOp();
    SmallVector<Value, 2> caches =
        packCaches(b, loc, {argOf(keyAppend), argOf(valueAppend)}, batch,
                   lengths, zero, last, buffers);
    Value total = tensor::DimOp::create(b, loc, caches[0], 1);
    last = total.getDefiningOp();
    auto [outer, inner] = rowLoops(b, loc, keyAppend, valueAppend, caches, zero,
                                   one, batchEnd, headEnd);
    Value keyRow = keyAppend.concat.getOperand(1);
    Value valueRow = valueAppend.concat.getOperand(1);
    Value bi = outer.getInductionVar();
    Value c = inner.getInductionVar();
    Value start = extractIndex(b, loc, starts, {bi, c});
    Value length = extractIndex(b, loc, lengths, {bi, c});
    // The row goes at start + length, before the next head's first row (or
    // the buffer's end): heads must be laid out in ascending order.
    Value nextHead = arith::MinUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, c, one), lastHead);
    Value nextStart = extractIndex(b, loc, starts, {bi, nextHead});
    Value isLast =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, c, lastHead);
    Value limit = arith::SelectOp::create(b, loc, isLast, total, nextStart);
    Value at = arith::AddIOp::create(b, loc, start, length);
    Value valid = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, start, zero),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, length, zero));
    cf::AssertOp::create(b, loc, valid,
                         "append in place: a head's start or length is "
                         "negative");
    Value fits =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, at, limit);
    cf::AssertOp::create(b, loc, fits,
                         "append in place: a head has no room for the new "
                         "row (start + length reaches the next head's start "
                         "or the buffer's end)");
    SmallVector<Value, 2> written;
    std::array<Value, 2> rows{keyRow, valueRow};
    for (auto [row, cache] : llvm::zip(rows, inner.getRegionIterArgs()))
      written.push_back(insertRow(b, loc, row, cache, bi, c, bi, at));
    scf::YieldOp::create(b, loc, written);
    b.setInsertionPointAfter(inner);
    scf::YieldOp::create(b, loc, inner.getResults());
    b.setInsertionPointAfter(outer);
    // Every head now holds one row more.
    Value grown = plusOne(b, loc, lengths);
    // The attentions read both appends, so they follow the writes.
    for (AttentionOp attention : plan.attentions[p]) {
      b.setInsertionPoint(attention);
      auto ragged = RaggedAttentionOp::create(
          b, attention.getLoc(), attention.getType(), attention.getQueries(),
          outer.getResult(0), outer.getResult(1), starts, grown,
          attention.getScaleAttr());
      attention.replaceAllUsesWith(ragged.getResult());
      attention.erase();
    }
    b.setInsertionPoint(ret);
    std::array<Append, 2> both{keyAppend, valueAppend};
    for (auto [i, append] : llvm::enumerate(both)) {
      bufferization::MaterializeInDestinationOp::create(
          b, loc, TypeRange{}, outer.getResult(i), argOf(append),
          /*restrict=*/true, /*writable=*/true);
      erased.set(append.result);
    }
  }
  // In pair order: pair p's keys and values are buffers 2p and 2p + 1.
  return finishRewrite(func, plan, erased, rowsAt, buffers, 1, Layout::Ragged);
}

/// The pool rewrite of `func` by `plan` (layout=pool): every batch row is a
/// sequence of its own, and each pair's caches become one pool [1, R, D]
/// that all of them share. Head c of batch row b is the segment of
/// `capacities[b, c]` rows from `starts[b, c]` on, `lengths[b, c]` of them
/// valid (segments in any order; the caller keeps them disjoint). `rows :
/// tensor<P x 3 x B x Hc x i64>` holds per pair the starts, lengths and
/// capacities. The new rows go at `starts + lengths`, and each attention
/// becomes, batch row by batch row, a `snapkv.ragged_attention` of that row's
/// queries over its own segments of the pool.
static std::pair<SmallVector<unsigned>, unsigned>
rewritePool(func::FuncOp func, const Plan &plan) {
  MLIRContext *ctx = func.getContext();
  Location loc = func.getLoc();
  unsigned rowsAt = rowsIndex(func);
  int64_t heads = plan.heads;
  auto rowsType = RankedTensorType::get(
      {static_cast<int64_t>(plan.pairs.size()), 3, plan.batch, heads},
      IntegerType::get(ctx, 64));
  (void)func.insertArgument(rowsAt, rowsType, {}, loc);
  Value rowsArg = func.getArgument(rowsAt);
  auto argOf = [&](const Append &append) {
    return func.getArgument(append.arg >= rowsAt ? append.arg + 1 : append.arg);
  };
  Block &entry = func.getBody().front();
  func::ReturnOp ret = returnOf(func);
  llvm::BitVector erased(ret.getNumOperands());
  OpBuilder b = OpBuilder::atBlockBegin(&entry);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value headEnd = arith::ConstantIndexOp::create(b, loc, heads);
  Value batch = arith::ConstantIndexOp::create(b, loc, plan.batch);
  Operation *last = batch.getDefiningOp();
  SmallVector<unsigned> buffers;
  for (auto [p, pair] : llvm::enumerate(plan.pairs)) {
    Append keyAppend = plan.appends[pair.first];
    Append valueAppend = plan.appends[pair.second];
    b.setInsertionPointAfter(last);
    std::array<Value, 3> table;
    for (int64_t which = 0; which < 3; ++which)
      table[which] = rowsSlice(b, loc, rowsArg, p, which, plan.batch, heads);
    auto [starts, lengths, capacities] = table;
    last = capacities.getDefiningOp();
    SmallVector<Value, 2> pools =
        packCaches(b, loc, {argOf(keyAppend), argOf(valueAppend)}, 1, lengths,
                   zero, last, buffers);
    Value total = tensor::DimOp::create(b, loc, pools[0], 1);
    last = total.getDefiningOp();
    auto [outer, inner] = rowLoops(b, loc, keyAppend, valueAppend, pools, zero,
                                   one, batch, headEnd);
    Value keyRow = keyAppend.concat.getOperand(1);
    Value valueRow = valueAppend.concat.getOperand(1);
    Value bi = outer.getInductionVar();
    Value c = inner.getInductionVar();
    Value start = extractIndex(b, loc, starts, {bi, c});
    Value length = extractIndex(b, loc, lengths, {bi, c});
    Value capacity = extractIndex(b, loc, capacities, {bi, c});
    Value valid = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, start, zero),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, length, zero));
    cf::AssertOp::create(b, loc, valid,
                         "append in place: a segment's start or length is "
                         "negative");
    Value fits = arith::AndIOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, length,
                              capacity),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle,
                              arith::AddIOp::create(b, loc, start, capacity),
                              total));
    cf::AssertOp::create(b, loc, fits,
                         "append in place: a segment has no room for the new "
                         "row (its length reaches its capacity, or it ends "
                         "past the pool)");
    Value at = arith::AddIOp::create(b, loc, start, length);
    SmallVector<Value, 2> written;
    std::array<Value, 2> rows{keyRow, valueRow};
    for (auto [row, pool] : llvm::zip(rows, inner.getRegionIterArgs()))
      written.push_back(
          insertRow(b, loc, row, pool, bi, c, b.getIndexAttr(0), at));
    scf::YieldOp::create(b, loc, written);
    b.setInsertionPointAfter(inner);
    scf::YieldOp::create(b, loc, inner.getResults());
    b.setInsertionPointAfter(outer);
    Value grown = plusOne(b, loc, lengths);
    // The attentions read both appends, so they follow the writes.
    for (AttentionOp attention : plan.attentions[p]) {
      b.setInsertionPoint(attention);
      Location aloc = attention.getLoc();
      Value queries = attention.getQueries();
      auto qType = cast<RankedTensorType>(queries.getType());
      auto oneQ = RankedTensorType::get(
          {1, qType.getDimSize(1), 1, qType.getDimSize(3)},
          qType.getElementType());
      auto oneRows = RankedTensorType::get({1, heads}, b.getI64Type());
      Value init = tensor::EmptyOp::create(b, aloc, qType.getShape(),
                                           qType.getElementType());
      auto loop = scf::ForOp::create(b, aloc, zero, batch, one, init);
      b.setInsertionPointToStart(loop.getBody());
      Value row = loop.getInductionVar();
      auto sliceRow = [&](Value from, RankedTensorType type) -> Value {
        SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0));
        offsets[0] = row;
        SmallVector<OpFoldResult> sizes;
        for (int64_t size : type.getShape())
          sizes.push_back(b.getIndexAttr(size));
        return tensor::ExtractSliceOp::create(
            b, aloc, type, from, offsets, sizes,
            SmallVector<OpFoldResult>(type.getRank(), b.getIndexAttr(1)));
      };
      Value q = sliceRow(queries, oneQ);
      auto ragged = RaggedAttentionOp::create(
          b, aloc, oneQ, q, outer.getResult(0), outer.getResult(1),
          sliceRow(starts, oneRows), sliceRow(grown, oneRows),
          attention.getScaleAttr());
      SmallVector<OpFoldResult> offsets(4, b.getIndexAttr(0));
      offsets[0] = row;
      SmallVector<OpFoldResult> sizes;
      for (int64_t size : oneQ.getShape())
        sizes.push_back(b.getIndexAttr(size));
      Value placed = tensor::InsertSliceOp::create(
          b, aloc, ragged.getResult(), loop.getRegionIterArgs()[0], offsets,
          sizes, SmallVector<OpFoldResult>(4, b.getIndexAttr(1)));
      scf::YieldOp::create(b, aloc, placed);
      b.setInsertionPointAfter(loop);
      attention.replaceAllUsesWith(loop.getResult(0));
      attention.erase();
    }
    b.setInsertionPoint(ret);
    std::array<Append, 2> both{keyAppend, valueAppend};
    for (auto [i, append] : llvm::enumerate(both)) {
      bufferization::MaterializeInDestinationOp::create(
          b, loc, TypeRange{}, outer.getResult(i), argOf(append),
          /*restrict=*/true, /*writable=*/true);
      erased.set(append.result);
    }
  }
  return finishRewrite(func, plan, erased, rowsAt, buffers, 1, Layout::Pool);
}

/// Rewrites `func` by `plan`; returns the new argument numbers of the buffers
/// and the rows argument's number.
static std::pair<SmallVector<unsigned>, unsigned>
rewriteDirect(func::FuncOp func, const Plan &plan) {
  MLIRContext *ctx = func.getContext();
  Location loc = func.getLoc();
  unsigned rowsAt = rowsIndex(func);
  auto rowsType = RankedTensorType::get(
      {static_cast<int64_t>(plan.appends.size())}, IntegerType::get(ctx, 64));
  (void)func.insertArgument(rowsAt, rowsType, {}, loc);
  Value rowsArg = func.getArgument(rowsAt);

  Block &entry = func.getBody().front();
  OpBuilder b = OpBuilder::atBlockBegin(&entry);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value zero64 = arith::ConstantIntOp::create(b, loc, 0, 64);
  // Each buffer's row count, tensor and capacity check follow, in argument
  // order.
  OpBuilder::InsertPoint prologue = b.saveInsertionPoint();

  func::ReturnOp ret = returnOf(func);
  llvm::BitVector erased(ret.getNumOperands());
  SmallVector<unsigned> buffers;
  for (auto [index, append] : llvm::enumerate(plan.appends)) {
    unsigned argNo = append.arg >= rowsAt ? append.arg + 1 : append.arg;
    BlockArgument arg = func.getArgument(argNo);
    auto tensorType = cast<RankedTensorType>(arg.getType());
    MemRefType memrefType = bufferType(tensorType);
    arg.setType(memrefType);
    b.restoreInsertionPoint(prologue);
    Value at = arith::ConstantIndexOp::create(b, loc, index);
    Value rows64 = tensor::ExtractOp::create(b, loc, rowsArg, ValueRange{at});
    Value rows = arith::IndexCastOp::create(b, loc, b.getIndexType(), rows64);
    Value grown = arith::AddIOp::create(b, loc, rows, one);
    Value nonNegative = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                              rows64, zero64);
    cf::AssertOp::create(b, loc, nonNegative,
                         "append in place: a row count is negative");
    auto cache = bufferization::ToTensorOp::create(b, loc, tensorType, arg,
                                                   /*restrict=*/true,
                                                   /*writable=*/true);
    arg.replaceAllUsesExcept(cache.getResult(), cache);
    // tensor.dim of the old cache along the appended dim is `rows`.
    for (Operation *user : llvm::make_early_inc_range(cache->getUsers()))
      if (auto dimOp = dyn_cast<tensor::DimOp>(user))
        if (std::optional<int64_t> d = dimOp.getConstantIndex();
            d && *d == plan.dim) {
          dimOp.replaceAllUsesWith(rows);
          dimOp.erase();
        }
    Value capacity = tensor::DimOp::create(b, loc, cache, plan.dim);
    Value fits = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, rows,
                                       capacity);
    cf::AssertOp::create(b, loc, fits,
                         "append in place: the cache buffer has no room for "
                         "the new row (rows >= its capacity)");
    prologue = b.saveInsertionPoint();

    tensor::ConcatOp concat = append.concat;
    b.setInsertionPoint(concat);
    Value row = concat.getOperand(1);
    auto rowType = cast<RankedTensorType>(row.getType());
    unsigned rank = rowType.getRank();
    SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0));
    SmallVector<OpFoldResult> strides(rank, b.getIndexAttr(1));
    offsets[plan.dim] = rows;
    SmallVector<OpFoldResult> rowSizes = tensor::getMixedSizes(b, loc, row);
    Value written = tensor::InsertSliceOp::create(b, loc, row, cache, offsets,
                                                  rowSizes, strides);
    SmallVector<OpFoldResult> viewSizes =
        tensor::getMixedSizes(b, loc, written);
    viewSizes[plan.dim] = grown;
    SmallVector<OpFoldResult> origin(rank, b.getIndexAttr(0));
    Value view = tensor::ExtractSliceOp::create(b, loc, written, origin,
                                                viewSizes, strides);
    if (view.getType() != concat.getType())
      view = tensor::CastOp::create(b, loc, concat.getType(), view);
    concat.getResult().replaceUsesWithIf(view, [&](OpOperand &use) {
      return use.getOwner() != ret.getOperation();
    });
    b.setInsertionPoint(ret);
    bufferization::MaterializeInDestinationOp::create(
        b, loc, TypeRange{}, written, arg, /*restrict=*/true,
        /*writable=*/true);
    erased.set(append.result);
    buffers.push_back(argNo);
  }
  // The concats now feed only the erased return operands.
  return finishRewrite(func, plan, erased, rowsAt, buffers, plan.dim,
                       Layout::Uniform);
}

namespace {
/// A caller whose cache arguments are only passed on to callees that append
/// to them, and whose results are those callees' appended caches.
struct CallerPlan {
  DenseMap<func::FuncOp, Plan> callees;
  SmallVector<func::CallOp> calls;
  int64_t dim = -1;
  Layout layout = Layout::Uniform;
  int64_t batch = 0, heads = 0;
};
} // namespace

static FailureOr<CallerPlan> planCaller(func::FuncOp root, SymbolTable &symbols,
                                        ModuleOp module, Layout layout,
                                        std::string &why) {
  CallerPlan plan;
  plan.layout = layout;
  if (root.isExternal() || !root.getBody().hasOneBlock()) {
    why = "it has no body or more than one block";
    return failure();
  }
  for (auto call : root.getBody().front().getOps<func::CallOp>()) {
    auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
    if (!callee)
      continue;
    if (!plan.callees.count(callee)) {
      std::string calleeWhy;
      FailureOr<Plan> sub = planDirect(callee, Layout::Uniform, calleeWhy);
      if (failed(sub))
        continue; // a callee without caches (embedding, head)
      if (layout != Layout::Uniform) {
        sub = planDirect(callee, layout, calleeWhy);
        if (failed(sub)) {
          why = "@" + callee.getSymName().str() + ": " + calleeWhy;
          return failure();
        }
        if ((plan.batch && plan.batch != sub->batch) ||
            (plan.heads && plan.heads != sub->heads)) {
          why = "callees' caches differ in batch or head count";
          return failure();
        }
        plan.batch = sub->batch;
        plan.heads = sub->heads;
      }
      // Every call of it must be in `root`: its signature changes.
      std::optional<SymbolTable::UseRange> uses =
          SymbolTable::getSymbolUses(callee, module);
      if (!uses) {
        why = "@" + callee.getSymName().str() + " has unknown uses";
        return failure();
      }
      for (const SymbolTable::SymbolUse &use : *uses)
        if (use.getUser()->getParentOfType<func::FuncOp>() != root ||
            !isa<func::CallOp>(use.getUser())) {
          why = "@" + callee.getSymName().str() +
                " is used outside the entry point";
          return failure();
        }
      if (plan.dim >= 0 && plan.dim != sub->dim) {
        why = "callees append along different dimensions";
        return failure();
      }
      plan.dim = sub->dim;
      plan.callees[callee] = *sub;
    }
    plan.calls.push_back(call);
  }
  if (plan.callees.empty()) {
    why = "neither it nor a function it calls appends to a cache argument";
    return failure();
  }
  func::ReturnOp ret = returnOf(root);
  llvm::SmallDenseSet<Value> passed;
  for (func::CallOp call : plan.calls) {
    auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
    auto it = plan.callees.find(callee);
    if (it == plan.callees.end())
      continue;
    for (const Append &append : it->second.appends) {
      auto arg = dyn_cast<BlockArgument>(call.getOperand(append.arg));
      if (!arg || arg.getOwner() != &root.getBody().front() ||
          !arg.hasOneUse() || !passed.insert(arg).second) {
        why = "a cache operand of @" + callee.getSymName().str() +
              " is not an argument of the entry point used only there";
        return failure();
      }
      Value result = call.getResult(append.result);
      if (!result.hasOneUse() || *result.getUsers().begin() != ret) {
        why = "an appended cache of @" + callee.getSymName().str() +
              " is used other than by the entry point's return";
        return failure();
      }
    }
  }
  return plan;
}

static void rewriteCaller(func::FuncOp root, CallerPlan &plan,
                          SymbolTable &symbols) {
  MLIRContext *ctx = root.getContext();
  unsigned rowsAt = rowsIndex(root);
  bool ragged = plan.layout == Layout::Ragged;
  bool pool = plan.layout == Layout::Pool;
  // Pool: one rows argument per call (each callee's own, passed through, so
  // that the entry point stays glue whatever the batch), else one.
  unsigned inserted = 1;
  if (pool)
    inserted = llvm::count_if(plan.calls, [&](func::CallOp call) {
      return plan.callees.count(symbols.lookup<func::FuncOp>(call.getCallee()));
    });
  // The entry point's buffers (argument numbers after `rows` is inserted),
  // in argument order: the order of the entries of its `rows`.
  // Ragged and pool: the calls' pairs in call order, keys then values (the
  // order of the entries of `rows`).
  SmallVector<unsigned> buffers;
  int64_t pairs = 0;
  for (func::CallOp call : plan.calls) {
    auto it = plan.callees.find(symbols.lookup<func::FuncOp>(call.getCallee()));
    if (it == plan.callees.end())
      continue;
    auto number = [&](const Append &append) {
      unsigned argNo =
          cast<BlockArgument>(call.getOperand(append.arg)).getArgNumber();
      return argNo >= rowsAt ? argNo + inserted : argNo;
    };
    if (ragged || pool) {
      for (auto [k, v] : it->second.pairs) {
        buffers.push_back(number(it->second.appends[k]));
        buffers.push_back(number(it->second.appends[v]));
      }
      pairs += it->second.pairs.size();
      continue;
    }
    for (const Append &append : it->second.appends)
      buffers.push_back(number(append));
  }
  Value rowsArg;
  if (!pool) {
    RankedTensorType rowsType;
    if (ragged) {
      rowsType = RankedTensorType::get({pairs, 2, plan.batch, plan.heads},
                                       IntegerType::get(ctx, 64));
    } else {
      llvm::sort(buffers);
      rowsType = RankedTensorType::get({static_cast<int64_t>(buffers.size())},
                                       IntegerType::get(ctx, 64));
    }
    (void)root.insertArgument(rowsAt, rowsType, {}, root.getLoc());
    rowsArg = root.getArgument(rowsAt);
  }
  DenseMap<func::FuncOp, std::pair<SmallVector<unsigned>, unsigned>> rewritten;
  for (auto &[callee, calleePlan] : plan.callees)
    rewritten[callee] = ragged ? rewriteRagged(callee, calleePlan)
                        : pool ? rewritePool(callee, calleePlan)
                               : rewriteDirect(callee, calleePlan);
  int64_t nextPair = 0;
  SmallVector<unsigned> rowArgs;

  func::ReturnOp ret = returnOf(root);
  llvm::BitVector erased(ret.getNumOperands());
  for (func::CallOp call : plan.calls) {
    auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
    auto it = plan.callees.find(callee);
    if (it == plan.callees.end())
      continue;
    unsigned calleeRows = rewritten[callee].second;
    SmallVector<Value> operands(call.getOperands());
    llvm::BitVector dropped(call.getNumResults());
    OpBuilder b(call);
    Location loc = call.getLoc();
    // The callee's row counts: the entries of its buffers in the entry
    // point's `rows`; a slice when they are consecutive (one layer's K and
    // V, as exported models pass them), which keeps the entry point glue
    // (snapkv-describe-module) that the runner can run from Python.
    SmallVector<int64_t> positions;
    for (const Append &append : it->second.appends) {
      auto arg = cast<BlockArgument>(operands[append.arg]);
      arg.setType(
          callee.getArgumentTypes()[append.arg >= calleeRows ? append.arg + 1
                                                             : append.arg]);
      positions.push_back(llvm::find(buffers, arg.getArgNumber()) -
                          buffers.begin());
      dropped.set(append.result);
      erased.set(
          call.getResult(append.result).getUses().begin()->getOperandNumber());
    }
    bool consecutive = true;
    for (auto [i, position] : llvm::enumerate(positions))
      consecutive &= position == positions.front() + static_cast<int64_t>(i);
    Value calleeRowsArg;
    if (pool) {
      // The callee's rows, as its own argument of the entry point.
      unsigned at = rowsAt + rowArgs.size();
      (void)root.insertArgument(at, callee.getArgumentTypes()[calleeRows], {},
                                root.getLoc());
      calleeRowsArg = root.getArgument(at);
      rowArgs.push_back(at);
    } else if (ragged) {
      // This call's pairs are the next ones of `rows`, in order.
      auto n = static_cast<int64_t>(it->second.pairs.size());
      calleeRowsArg = tensor::ExtractSliceOp::create(
          b, loc, rowsArg,
          ArrayRef<OpFoldResult>{b.getIndexAttr(nextPair), b.getIndexAttr(0),
                                 b.getIndexAttr(0), b.getIndexAttr(0)},
          ArrayRef<OpFoldResult>{b.getIndexAttr(n), b.getIndexAttr(2),
                                 b.getIndexAttr(plan.batch),
                                 b.getIndexAttr(plan.heads)},
          SmallVector<OpFoldResult>(4, b.getIndexAttr(1)));
      nextPair += n;
    } else if (consecutive) {
      calleeRowsArg = tensor::ExtractSliceOp::create(
          b, loc, rowsArg, ArrayRef<OpFoldResult>{b.getIndexAttr(positions[0])},
          ArrayRef<OpFoldResult>{
              b.getIndexAttr(static_cast<int64_t>(positions.size()))},
          ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
    } else {
      SmallVector<Value> counts;
      for (int64_t position : positions) {
        Value at = arith::ConstantIndexOp::create(b, loc, position);
        counts.push_back(
            tensor::ExtractOp::create(b, loc, rowsArg, ValueRange{at}));
      }
      calleeRowsArg = tensor::FromElementsOp::create(b, loc, counts);
    }
    operands.insert(operands.begin() + calleeRows, calleeRowsArg);
    auto replacement = func::CallOp::create(b, call.getLoc(), callee, operands);
    unsigned next = 0;
    for (unsigned i = 0; i < call.getNumResults(); ++i)
      if (!dropped.test(i))
        call.getResult(i).replaceAllUsesWith(replacement.getResult(next++));
  }
  eraseResults(root, erased);
  for (func::CallOp call : plan.calls)
    if (plan.callees.count(symbols.lookup<func::FuncOp>(call.getCallee())))
      call.erase();
  SmallVector<Type> inputs(root.getBody().front().getArgumentTypes());
  root.setType(FunctionType::get(ctx, inputs, root.getResultTypes()));
  if (!pool)
    rowArgs.push_back(rowsAt);
  annotate(root, rowArgs, buffers,
           plan.layout == Layout::Uniform ? plan.dim : 1, plan.layout);
}

/// `appendInPlace` in any layout.
static LogicalResult appendInPlaceAs(ModuleOp module, StringRef funcName,
                                     Layout layout, std::string &why) {
  SymbolTable symbols(module);
  auto root = symbols.lookup<func::FuncOp>(funcName);
  if (!root) {
    why = "no function @" + funcName.str();
    return failure();
  }
  if (root->hasAttr(kAttr))
    return success(); // already rewritten
  std::string directWhy, callerWhy;
  FailureOr<Plan> direct = planDirect(root, layout, directWhy);
  if (succeeded(direct)) {
    if (layout == Layout::Ragged)
      rewriteRagged(root, *direct);
    else if (layout == Layout::Pool)
      rewritePool(root, *direct);
    else
      rewriteDirect(root, *direct);
    return success();
  }
  FailureOr<CallerPlan> caller =
      planCaller(root, symbols, module, layout, callerWhy);
  if (succeeded(caller)) {
    rewriteCaller(root, *caller, symbols);
    return success();
  }
  why = "@" + funcName.str() + ": " + directWhy +
        "; as an entry point: " + callerWhy;
  return failure();
}

LogicalResult mlir::snapkv::appendInPlace(ModuleOp module, StringRef funcName,
                                          bool ragged, std::string &why) {
  return appendInPlaceAs(module, funcName,
                         ragged ? Layout::Ragged : Layout::Uniform, why);
}

namespace {
struct AppendInPlace
    : public mlir::snapkv::impl::AppendInPlaceBase<AppendInPlace> {
  using AppendInPlaceBase::AppendInPlaceBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (layout != "uniform" && layout != "pool") {
      module.emitError() << "snapkv-append-in-place: layout must be uniform "
                            "or pool, got '"
                         << layout << "'";
      return signalPassFailure();
    }
    auto root = module.lookupSymbol<func::FuncOp>(funcName);
    if (!root) {
      module.emitWarning() << "snapkv-append-in-place: no function @"
                           << funcName << "; module left unchanged";
      return;
    }
    std::string why;
    if (failed(appendInPlaceAs(
            module, funcName, layout == "pool" ? Layout::Pool : Layout::Uniform,
            why)))
      root.emitWarning() << "snapkv-append-in-place left the module "
                            "unchanged: "
                         << why;
  }
};
} // namespace
