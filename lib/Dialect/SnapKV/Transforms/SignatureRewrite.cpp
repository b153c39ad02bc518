//===- SignatureRewrite.cpp - carry new signatures to the callers ---------===//
//
// See SignatureRewrite.h.
//
//===----------------------------------------------------------------------===//

#include "SignatureRewrite.h"

#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/StringMap.h"

namespace mlir::snapkv::detail {

/// Checks that `change` can be carried to every caller of `callee`: each use
/// is a func.call in the single block of a function that is not rewritten
/// and not used itself; a changed result is only returned by the caller; a
/// changed operand is an argument of the caller used only as such operands
/// (or by tensor.dim).
FailureOr<CallSites> analyseCallers(ModuleOp module, func::FuncOp callee,
                                    const SignatureChange &change,
                                    ArrayRef<func::FuncOp> rewritten,
                                    Refusal &refusal) {
  CallSites sites;
  if (change.empty())
    return sites;
  std::optional<SymbolTable::UseRange> uses =
      SymbolTable::getSymbolUses(callee, module);
  if (!uses) {
    (void)refuseWith(refusal, RefusalKind::CalleeNotOnlyCalled,
                     {"an operation with unknown symbol uses"});
    return failure();
  }
  for (const SymbolTable::SymbolUse &use : *uses) {
    auto call = dyn_cast<func::CallOp>(use.getUser());
    if (!call) {
      (void)refuseWith(refusal, RefusalKind::CalleeNotOnlyCalled,
                       {describe(use.getUser())});
      return failure();
    }
    auto caller = call->getParentOfType<func::FuncOp>();
    if (!caller) {
      (void)refuseWith(refusal, RefusalKind::CalleeNotOnlyCalled,
                       {describe(call.getOperation())});
      return failure();
    }
    std::string name = caller.getName().str();
    if (llvm::is_contained(rewritten, caller)) {
      (void)refuseWith(refusal, RefusalKind::CallerRewritten, {name});
      return failure();
    }
    if (!soleReturn(caller) || call->getBlock() != &caller.getBody().front()) {
      (void)refuseWith(refusal, RefusalKind::CallNotInEntryBlock, {name});
      return failure();
    }
    if (std::optional<SymbolTable::UseRange> callerUses =
            SymbolTable::getSymbolUses(caller, module);
        !callerUses || !callerUses->empty()) {
      std::string user = callerUses ? describe(callerUses->begin()->getUser())
                                    : "an operation with unknown symbol uses";
      (void)refuseWith(refusal, RefusalKind::CallerCalled, {name, user});
      return failure();
    }
    for (auto [index, type] : change.results) {
      for (Operation *user : call.getResult(index).getUsers()) {
        if (isa<func::ReturnOp>(user))
          continue;
        (void)refuseWith(refusal, RefusalKind::CallResultOtherUse,
                         {std::to_string(index), name, describe(user)});
        return failure();
      }
    }
    // The caller's own argument passed at `index`, or null (refused).
    auto callerArgument = [&](unsigned index) -> BlockArgument {
      auto arg = dyn_cast<BlockArgument>(call.getOperand(index));
      if (arg && arg.getOwner() == &caller.getBody().front())
        return arg;
      (void)refuseWith(refusal, RefusalKind::CallOperandNotArgument,
                       {std::to_string(index), name});
      return {};
    };
    for (auto [index, type] : change.args) {
      BlockArgument arg = callerArgument(index);
      if (!arg)
        return failure();
      for (OpOperand &argUse : arg.getUses()) {
        Operation *user = argUse.getOwner();
        if (isa<tensor::DimOp>(user))
          continue;
        auto other = dyn_cast<func::CallOp>(user);
        auto found = other && other.getCallee() == callee.getName()
                         ? change.args.find(argUse.getOperandNumber())
                         : change.args.end();
        if (found != change.args.end() && found->second == type)
          continue;
        (void)refuseWith(
            refusal, RefusalKind::CallArgumentOtherUse,
            {describe(arg), name, std::to_string(index), describe(user)});
        return failure();
      }
    }
    for (auto [index, type] : change.insertedArgs)
      if (!callerArgument(index))
        return failure();
    sites.calls.push_back(call);
  }
  return sites;
}

/// The types prefill's K/V results take: `snapkv.select`'s results, layer l
/// keeping `capacities[l]` positions.
SignatureChange prefillChange(ArrayRef<PrefillLayer> layers, GqaPolicy gqa,
                              ArrayRef<int64_t> capacities, bool ragged,
                              KVCacheType kvDtype) {
  SignatureChange change;
  for (auto [layer, capacity] : llvm::zip_equal(layers, capacities)) {
    const AttentionMatch &m = layer.attention;
    if (ragged) {
      // snapkv.select_adaptive's packed keys, values and offsets.
      FailureOr<SmallVector<Type, 4>> types =
          SelectAdaptiveOp::inferResultTypes(
              m.queries.getType(), m.keys.source.getType(), capacity, gqa);
      change.results[layer.keyResult] = (*types)[0];
      change.results[layer.valueResult] = (*types)[1];
      change.inserted.push_back({layer.valueResult, (*types)[3]});
      continue;
    }
    auto type = cast<RankedTensorType>(m.keys.source.getType());
    int64_t heads = gqa == GqaPolicy::expand ? m.queryHeads : m.kvHeads;
    int64_t length = type.getDimSize(2);
    if (!ShapedType::isDynamic(length))
      length = std::min(length, capacity);
    auto compacted = RankedTensorType::get(
        {type.getDimSize(0), heads, length, type.getDimSize(3)},
        type.getElementType());
    if (kvDtype == KVCacheType::i8)
      compacted = quantizedType(compacted);
    if (compacted == type)
      continue;
    change.results[layer.keyResult] = compacted;
    change.results[layer.valueResult] = compacted;
  }
  return change;
}

/// The types decode's caches take: `Hq` heads under gqa=expand, packed i8
/// rows under kv-dtype=i8.
SignatureChange decodeChange(ArrayRef<DecodeLayer> layers, GqaPolicy gqa,
                             KVCacheType kvDtype) {
  SignatureChange change;
  for (const DecodeLayer &layer : layers) {
    const AttentionMatch &m = layer.attention;
    bool expand = gqa == GqaPolicy::expand && m.queryHeads != m.kvHeads;
    if (!expand && kvDtype == KVCacheType::same)
      continue;
    auto type = cast<RankedTensorType>(layer.keyCache.getType());
    auto expanded = RankedTensorType::get(
        {type.getDimSize(0), expand ? m.queryHeads : type.getDimSize(1),
         type.getDimSize(2), type.getDimSize(3)},
        type.getElementType());
    if (kvDtype == KVCacheType::i8)
      expanded = quantizedType(expanded);
    change.args[layer.keyCache.getArgNumber()] = expanded;
    change.args[layer.valueCache.getArgNumber()] = expanded;
    change.results[layer.keyResult] = expanded;
    change.results[layer.valueResult] = expanded;
  }
  return change;
}

void eraseDeadOps(func::FuncOp func) {
  bool erased = true;
  while (erased) {
    erased = false;
    SmallVector<Operation *> dead;
    func.walk<WalkOrder::PostOrder>([&](Operation *op) {
      if (op != func && isOpTriviallyDead(op))
        dead.push_back(op);
    });
    for (Operation *op : llvm::reverse(dead)) {
      if (op->use_empty()) {
        op->erase();
        erased = true;
      }
    }
  }
}

void updateSignature(func::FuncOp func) {
  auto ret = soleReturn(func);
  func.setType(FunctionType::get(func.getContext(),
                                 func.getBody().front().getArgumentTypes(),
                                 ret.getOperandTypes()));
}

/// Gives each call of `callee` its new signature, and each caller the types
/// that now flow to its results and from its arguments.
void updateCallers(func::FuncOp callee, const CallSites &sites) {
  FunctionType type = callee.getFunctionType();
  llvm::SetVector<func::FuncOp> callers;
  for (func::CallOp call : sites.calls) {
    for (auto [result, t] : llvm::zip(call.getResults(), type.getResults()))
      result.setType(t);
    for (auto [operand, t] : llvm::zip(call.getOperands(), type.getInputs()))
      if (auto arg = dyn_cast<BlockArgument>(operand);
          arg && arg.getType() != t)
        arg.setType(t);
    callers.insert(call->getParentOfType<func::FuncOp>());
  }
  for (func::FuncOp caller : callers)
    updateSignature(caller);
}

/// Replaces each call of `callee` (whose signature gained the results
/// `inserted`, each after the result it names) by one that returns them, and
/// returns each new result from the caller right after the result it follows
/// (analyseCallers checked that those are only returned).
void insertCallResults(func::FuncOp callee, const CallSites &sites,
                       ArrayRef<std::pair<unsigned, Type>> inserted) {
  llvm::SetVector<func::FuncOp> callers;
  for (func::CallOp call : sites.calls) {
    OpBuilder b(call);
    auto replacement =
        func::CallOp::create(b, call.getLoc(), callee, call.getOperands());
    auto newIndex = [&](unsigned old) {
      return old + llvm::count_if(inserted, [&](auto &entry) {
               return entry.first < old;
             });
    };
    auto caller = call->getParentOfType<func::FuncOp>();
    func::ReturnOp ret = soleReturn(caller);
    // Positions in the caller's return after which a new result goes.
    SmallVector<std::pair<unsigned, Value>> additions;
    for (auto [after, type] : inserted)
      for (OpOperand &use : call.getResult(after).getUses())
        if (use.getOwner() == ret.getOperation())
          additions.push_back({use.getOperandNumber(),
                               replacement.getResult(newIndex(after) + 1)});
    for (unsigned i = 0; i < call.getNumResults(); ++i)
      call.getResult(i).replaceAllUsesWith(replacement.getResult(newIndex(i)));
    call.erase();
    SmallVector<Value> operands;
    for (auto [i, operand] : llvm::enumerate(ret.getOperands())) {
      operands.push_back(operand);
      for (auto &[at, value] : additions)
        if (at == i)
          operands.push_back(value);
    }
    ret->setOperands(operands);
    callers.insert(caller);
  }
  for (func::FuncOp caller : callers)
    updateSignature(caller);
}

void insertCallArguments(func::FuncOp callee, const CallSites &sites,
                         ArrayRef<std::pair<unsigned, Type>> inserted) {
  llvm::SetVector<func::FuncOp> callers;
  for (func::CallOp call : sites.calls) {
    auto caller = call->getParentOfType<func::FuncOp>();
    SmallVector<Value> operands;
    for (auto [i, operand] : llvm::enumerate(call.getOperands())) {
      operands.push_back(operand);
      for (auto [after, type] : inserted) {
        if (after != i)
          continue;
        unsigned at = cast<BlockArgument>(operand).getArgNumber() + 1;
        (void)caller.insertArgument(at, type, {}, call.getLoc());
        operands.push_back(caller.getArgument(at));
      }
    }
    call->setOperands(operands);
    callers.insert(caller);
  }
  for (func::FuncOp caller : callers)
    updateSignature(caller);
}

/// The func.call ops of `callee` in `module`, in the order they appear.
SmallVector<func::CallOp> callsOf(func::FuncOp callee, ModuleOp module) {
  SmallVector<func::CallOp> calls;
  module.walk([&](func::CallOp call) {
    if (call.getCallee() == callee.getSymName())
      calls.push_back(call);
  });
  return calls;
}

/// `func` and every function that reaches it through func.call, `func`
/// first: the call chain from the entry points down to it.
llvm::SetVector<func::FuncOp> callChain(func::FuncOp func, ModuleOp module) {
  llvm::SetVector<func::FuncOp> chain;
  chain.insert(func);
  for (size_t i = 0; i < chain.size(); ++i)
    for (func::CallOp call : callsOf(chain[i], module))
      if (auto caller = call->getParentOfType<func::FuncOp>())
        chain.insert(caller);
  return chain;
}

/// Copies `chain` as `<name><suffix>` (renamed if taken), each copy after
/// its original, and points the copies' calls within the chain at the
/// copies. Returns the copies in the order of `chain`.
SmallVector<func::FuncOp> copyChain(ArrayRef<func::FuncOp> chain,
                                    StringRef suffix, ModuleOp module) {
  SymbolTable symbols(module);
  llvm::StringMap<std::string> renamed;
  SmallVector<func::FuncOp> copies;
  for (func::FuncOp func : chain) {
    func::FuncOp copy = func.clone();
    copy.setName((func.getSymName() + suffix).str());
    symbols.insert(copy, std::next(Block::iterator(func)));
    renamed[func.getSymName()] = copy.getSymName().str();
    copies.push_back(copy);
  }
  for (func::FuncOp copy : copies)
    copy.walk([&](func::CallOp call) {
      if (auto it = renamed.find(call.getCallee()); it != renamed.end())
        call.setCallee(it->second);
    });
  return copies;
}

/// Gives each call of @name its own copy (`<name>_layer<l>`, l in call
/// order) and erases the original; `copies` gets the copies' names. Fails,
/// saying why in `why`, unless every use is a call and all calls are in the
/// entry block of one function (the layers, in order).
LogicalResult copyPerCall(ModuleOp module, StringRef name,
                          SmallVectorImpl<std::string> &copies,
                          std::string &why) {
  auto func = module.lookupSymbol<func::FuncOp>(name);
  if (!func || func.isExternal()) {
    why = "@" + name.str() + " is missing or has no body";
    return failure();
  }
  std::optional<SymbolTable::UseRange> uses =
      SymbolTable::getSymbolUses(func, module);
  SmallVector<func::CallOp> calls = callsOf(func, module);
  if (!uses || llvm::range_size(*uses) != calls.size()) {
    why = "@" + name.str() + " is used other than by func.call";
    return failure();
  }
  for (func::CallOp call : calls) {
    auto caller = call->getParentOfType<func::FuncOp>();
    if (caller != calls.front()->getParentOfType<func::FuncOp>() ||
        call->getBlock() != &caller.getBody().front()) {
      why = "the calls of @" + name.str() +
            " are not all in the entry block of one function";
      return failure();
    }
  }
  SymbolTable symbols(module);
  for (auto [l, call] : llvm::enumerate(calls)) {
    func::FuncOp copy = func.clone();
    copy.setName(name.str() + "_layer" + std::to_string(l));
    symbols.insert(copy, Block::iterator(func)); // renamed if taken
    call.setCallee(copy.getSymName());
    copies.push_back(copy.getSymName().str());
  }
  func.erase();
  return success();
}

} // namespace mlir::snapkv::detail
