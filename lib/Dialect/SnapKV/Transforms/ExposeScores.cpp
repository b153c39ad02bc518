//===- ExposeScores.cpp - return the scores of each select ----------------===//

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_EXPOSESCORES
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

/// "window=8 capacity=16 kernel=5 pooling=avg gqa=expand order=position".
static std::string clauses(SelectOp op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "window=" << op.getWindow() << " capacity=" << op.getCapacity()
     << " kernel=" << op.getKernel()
     << " pooling=" << stringifyPoolingKind(op.getPooling())
     << " gqa=" << stringifyGqaPolicy(op.getGqa())
     << " order=" << stringifyOrder(op.getOrder());
  if (std::optional<APFloat> scale = op.getScale())
    os << " scale=" << scale->convertToFloat();
  if (op.getBlock() != 1)
    os << " block=" << op.getBlock();
  return text;
}

/// Makes `func` also return `extra` (after its own results) and records
/// `described` in its `snapkv.exposed_scores`.
static void appendResults(func::FuncOp func, ValueRange extra,
                          ArrayRef<Attribute> described) {
  MLIRContext *ctx = func.getContext();
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  SmallVector<Value> results(ret.getOperands());
  results.append(extra.begin(), extra.end());
  ret->setOperands(results);
  func.setType(FunctionType::get(ctx, func.getFunctionType().getInputs(),
                                 ret.getOperandTypes()));
  // Result attributes, if any, must match the new result count.
  if (ArrayAttr attrs = func.getResAttrsAttr()) {
    SmallVector<Attribute> padded(attrs.begin(), attrs.end());
    padded.resize(results.size(), DictionaryAttr::get(ctx));
    func.setResAttrsAttr(ArrayAttr::get(ctx, padded));
  }
  SmallVector<Attribute> all;
  if (auto before = func->getAttrOfType<ArrayAttr>("snapkv.exposed_scores"))
    all.append(before.begin(), before.end());
  all.append(described.begin(), described.end());
  func->setAttr("snapkv.exposed_scores", ArrayAttr::get(ctx, all));
}

static bool endsInOneReturn(func::FuncOp func) {
  return !func.isExternal() && func.getBody().hasOneBlock() &&
         isa<func::ReturnOp>(func.getBody().front().getTerminator());
}

namespace {
struct ExposeScoresPass : snapkv::impl::ExposeScoresBase<ExposeScoresPass> {
  using Base::Base;

  /// Why `func` cannot be changed, or an empty string.
  std::string problem(func::FuncOp func, ModuleOp module,
                      ArrayRef<func::FuncOp> targets) {
    if (func.isExternal())
      return "has no body";
    if (!SymbolTable::symbolKnownUseEmpty(func, module)) {
      if (!throughCallers)
        return "is called in this module (its callers would not match the "
               "new results; through-callers passes them out)";
      // Kept in a local: a temporary optional in the range would dangle.
      std::optional<SymbolTable::UseRange> uses =
          SymbolTable::getSymbolUses(func, module);
      for (const SymbolTable::SymbolUse &use : *uses) {
        auto call = dyn_cast<func::CallOp>(use.getUser());
        auto caller =
            call ? call->getParentOfType<func::FuncOp>() : func::FuncOp();
        if (!call || call->getParentOp() != caller)
          return "is used other than by a func.call at the top of a function";
        if (!endsInOneReturn(caller))
          return "is called by @" + caller.getSymName().str() +
                 ", which does not end in a single func.return";
        if (!SymbolTable::symbolKnownUseEmpty(caller, module))
          return "is called by @" + caller.getSymName().str() +
                 ", which is called itself";
        if (llvm::is_contained(targets, caller))
          return "is called by @" + caller.getSymName().str() +
                 ", which is changed for its own selects";
      }
    }
    if (!endsInOneReturn(func))
      return "does not end in a single func.return";
    bool any = false;
    func.walk([&](SelectOp) { any = true; });
    return any ? "" : "holds no snapkv.select";
  }

  void expose(func::FuncOp func, ModuleOp module) {
    SmallVector<Value> results;
    SmallVector<Attribute> described;
    SmallVector<SelectOp> selects;
    func.walk([&](SelectOp select) { selects.push_back(select); });
    for (SelectOp select : selects) {
      auto indices = cast<RankedTensorType>(select.getIndices().getType());
      auto keys = cast<RankedTensorType>(select.getKeys().getType());
      int64_t prefix = keys.isDynamicDim(2)
                           ? ShapedType::kDynamic
                           : keys.getDimSize(2) - select.getWindow();
      auto scoreType = RankedTensorType::get(
          {indices.getDimSize(0), indices.getDimSize(1), prefix},
          Float32Type::get(&getContext()));
      // The clauses the two ops share, copied by name.
      SmallVector<NamedAttribute> shared;
      for (StringRef name :
           {"window", "kernel", "pooling", "gqa", "scale", "block"})
        if (Attribute value = select->getAttr(name))
          shared.emplace_back(StringAttr::get(&getContext(), name), value);
      // The votes the select ranks by (recent, random and keydiff rank
      // without any: their window's votes are shown).
      if (select.getScoring() != Scoring::votes &&
          select.getScoring() != Scoring::recent &&
          select.getScoring() != Scoring::random &&
          select.getScoring() != Scoring::keydiff)
        shared.emplace_back(StringAttr::get(&getContext(), "scoring"),
                            select.getScoringAttr());
      OpBuilder b(select->getContext());
      b.setInsertionPointAfter(select);
      Location loc = select.getLoc();
      SmallVector<Value> prefixSize;
      if (scoreType.isDynamicDim(2))
        prefixSize.push_back(arith::SubIOp::create(
            b, loc, tensor::DimOp::create(b, loc, select.getKeys(), 2),
            arith::ConstantIndexOp::create(b, loc, select.getWindow())));
      Value votesInit = tensor::EmptyOp::create(b, loc, scoreType, prefixSize);
      Value pooledInit = tensor::EmptyOp::create(b, loc, scoreType, prefixSize);
      auto score =
          ScoreOp::create(b, loc, TypeRange{scoreType, scoreType},
                          ValueRange{select.getQueries(), select.getKeys(),
                                     votesInit, pooledInit},
                          shared);
      results.append({select.getQueries(), select.getKeys(),
                      select.getIndices(), score.getVotes(),
                      score.getPooled()});
      described.push_back(StringAttr::get(&getContext(), clauses(select)));
    }
    unsigned before = func.getNumResults();
    appendResults(func, results, described);
    if (!throughCallers)
      return;
    // Each call takes the new results and its caller returns them.
    SmallVector<func::CallOp> calls;
    std::optional<SymbolTable::UseRange> uses =
        SymbolTable::getSymbolUses(func, module);
    for (const SymbolTable::SymbolUse &use : *uses)
      calls.push_back(cast<func::CallOp>(use.getUser()));
    for (func::CallOp call : calls) {
      OpBuilder b(call);
      auto wider =
          func::CallOp::create(b, call.getLoc(), func, call.getOperands());
      wider->setDiscardableAttrs(call->getDiscardableAttrDictionary());
      call.replaceAllUsesWith(wider.getResults().take_front(before));
      call.erase();
      appendResults(wider->getParentOfType<func::FuncOp>(),
                    wider.getResults().drop_front(before), described);
    }
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> targets;
    if (functions.empty()) {
      for (auto func : module.getOps<func::FuncOp>()) {
        bool any = false;
        func.walk([&](SelectOp) { any = true; });
        if (any)
          targets.push_back(func);
      }
    } else {
      for (const std::string &name : functions) {
        auto func = module.lookupSymbol<func::FuncOp>(name);
        if (!func) {
          emitError(module.getLoc())
              << "snapkv-expose-scores: no function @" << name;
          return signalPassFailure();
        }
        targets.push_back(func);
      }
    }
    // Check everything before changing anything.
    for (func::FuncOp func : targets) {
      std::string why = problem(func, module, targets);
      if (!why.empty()) {
        emitError(func.getLoc())
            << "snapkv-expose-scores: @" << func.getSymName() << " " << why;
        return signalPassFailure();
      }
    }
    for (func::FuncOp func : targets)
      expose(func, module);
  }
};
} // namespace
