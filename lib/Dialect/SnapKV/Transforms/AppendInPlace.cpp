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

#include "AppendInPlaceLayouts.h"

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
using namespace mlir::snapkv::detail;

static constexpr StringLiteral kAttr = "snapkv.append_in_place";

static bool isWeight(func::FuncOp func, unsigned i) {
  return func.getArgAttr(i, "snapkv.weight") != nullptr;
}

unsigned snapkv::detail::rowsIndex(func::FuncOp func) {
  unsigned at = 0;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (!isWeight(func, i))
      at = i + 1;
  return at;
}

func::ReturnOp snapkv::detail::returnOf(func::FuncOp func) {
  return cast<func::ReturnOp>(func.getBody().front().getTerminator());
}

/// The cache arguments `func` appends one row to, directly. A failure names
/// why (an argument concatenated in another way, or also used otherwise).
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

std::pair<SmallVector<unsigned>, unsigned>
snapkv::detail::finishRewrite(func::FuncOp func, const Plan &plan,
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
