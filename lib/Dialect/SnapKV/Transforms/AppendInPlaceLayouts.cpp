//===- AppendInPlaceLayouts.cpp - ragged and pool cache layouts ----------===//
//
// snapkv-append-in-place's ragged layout (budget=adaptive: each cache's heads
// packed into one buffer [B, R, D]) and pool layout (layout=pool: a batched
// decode step, every sequence's heads segments of one buffer [1, R, D] per
// cache); AppendInPlace.cpp has the pass and the uniform layout.
//
//===----------------------------------------------------------------------===//

#include "AppendInPlaceLayouts.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

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
LogicalResult snapkv::detail::planRagged(func::FuncOp func, Plan &plan,
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

/// The ragged rewrite of `func` by `plan`: each pair's caches become packed
/// buffers [B, R, D] (head c's rows at `starts[b, c]`, `lengths[b, c]` of
/// them valid, room after them), the new rows are written at `starts +
/// lengths`, and each attention becomes a `snapkv.ragged_attention` over one
/// row more. `rows : tensor<P x 2 x B x Hc x i64>` holds, per pair, `starts`
/// then `lengths`.
std::pair<SmallVector<unsigned>, unsigned>
snapkv::detail::rewriteRagged(func::FuncOp func, const Plan &plan) {
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
std::pair<SmallVector<unsigned>, unsigned>
snapkv::detail::rewritePool(func::FuncOp func, const Plan &plan) {
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
