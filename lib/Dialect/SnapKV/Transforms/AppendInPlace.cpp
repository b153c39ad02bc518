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
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/ADT/BitVector.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_APPENDINPLACE
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

static constexpr StringLiteral kAttr = "snapkv.append_in_place";

namespace {
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
static FailureOr<Plan> planDirect(func::FuncOp func, std::string &why) {
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

/// Records the new calling convention on `func`.
static void annotate(func::FuncOp func, unsigned rows, ArrayRef<unsigned> args,
                     int64_t dim) {
  Builder b(func.getContext());
  SmallVector<int64_t> buffers(args.begin(), args.end());
  func->setAttr(kAttr,
                b.getDictionaryAttr(
                    {b.getNamedAttr("rows", b.getI64IntegerAttr(rows)),
                     b.getNamedAttr("buffers", b.getI64ArrayAttr(buffers)),
                     b.getNamedAttr("dim", b.getI64IntegerAttr(dim))}));
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
  eraseResults(func, erased);
  for (const Append &append : plan.appends)
    append.concat->erase();
  SmallVector<Type> inputs(entry.getArgumentTypes());
  func.setType(FunctionType::get(ctx, inputs, func.getResultTypes()));
  annotate(func, rowsAt, buffers, plan.dim);
  return {buffers, rowsAt};
}

namespace {
/// A caller whose cache arguments are only passed on to callees that append
/// to them, and whose results are those callees' appended caches.
struct CallerPlan {
  DenseMap<func::FuncOp, Plan> callees;
  SmallVector<func::CallOp> calls;
  int64_t dim = -1;
};
} // namespace

static FailureOr<CallerPlan> planCaller(func::FuncOp root, SymbolTable &symbols,
                                        ModuleOp module, std::string &why) {
  CallerPlan plan;
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
      FailureOr<Plan> sub = planDirect(callee, calleeWhy);
      if (failed(sub))
        continue; // a callee without caches (embedding, head)
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
  // The entry point's buffers (argument numbers after `rows` is inserted),
  // in argument order: the order of the entries of its `rows`.
  SmallVector<unsigned> buffers;
  for (func::CallOp call : plan.calls) {
    auto it = plan.callees.find(symbols.lookup<func::FuncOp>(call.getCallee()));
    if (it == plan.callees.end())
      continue;
    for (const Append &append : it->second.appends) {
      unsigned argNo =
          cast<BlockArgument>(call.getOperand(append.arg)).getArgNumber();
      buffers.push_back(argNo >= rowsAt ? argNo + 1 : argNo);
    }
  }
  llvm::sort(buffers);
  auto rowsType = RankedTensorType::get({static_cast<int64_t>(buffers.size())},
                                        IntegerType::get(ctx, 64));
  (void)root.insertArgument(rowsAt, rowsType, {}, root.getLoc());
  Value rowsArg = root.getArgument(rowsAt);
  DenseMap<func::FuncOp, std::pair<SmallVector<unsigned>, unsigned>> rewritten;
  for (auto &[callee, calleePlan] : plan.callees)
    rewritten[callee] = rewriteDirect(callee, calleePlan);

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
      arg.setType(bufferType(arg.getType()));
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
    if (consecutive) {
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
  annotate(root, rowsAt, buffers, plan.dim);
}

namespace {
struct AppendInPlace
    : public mlir::snapkv::impl::AppendInPlaceBase<AppendInPlace> {
  using AppendInPlaceBase::AppendInPlaceBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    auto root = symbols.lookup<func::FuncOp>(funcName);
    if (!root) {
      module.emitWarning() << "snapkv-append-in-place: no function @"
                           << funcName << "; module left unchanged";
      return;
    }
    if (root->hasAttr(kAttr))
      return; // already rewritten
    std::string directWhy, callerWhy;
    FailureOr<Plan> direct = planDirect(root, directWhy);
    if (succeeded(direct)) {
      rewriteDirect(root, *direct);
      return;
    }
    FailureOr<CallerPlan> caller = planCaller(root, symbols, module, callerWhy);
    if (succeeded(caller)) {
      rewriteCaller(root, *caller, symbols);
      return;
    }
    root.emitWarning() << "snapkv-append-in-place left the module unchanged: @"
                       << funcName << ": " << directWhy << "; as an entry "
                       << "point: " << callerWhy;
  }
};
} // namespace
