//===- CompressKVCache.cpp - SnapKV model rewrite
//--------------------------===//
//
// Analyse prefill and decode completely, then rewrite: a refusal never leaves
// a half-rewritten module behind.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/AttentionMatcher.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

#include <cmath>

namespace mlir::snapkv {
#define GEN_PASS_DEF_COMPRESSKVCACHE
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {

/// Why a function cannot be rewritten: a kind (SnapKVEnums.td: its code and
/// message), the values its message names and, for per-layer reasons, the
/// layer.
struct Refusal {
  RefusalKind kind = RefusalKind::NoAttention;
  SmallVector<std::string, 4> args;
  std::optional<unsigned> layer;

  std::string message() const {
    std::string text = RefusalKindAttr::getFormat(kind).str();
    for (auto [i, arg] : llvm::enumerate(args)) {
      std::string placeholder = "{" + std::to_string(i) + "}";
      size_t at = text.find(placeholder);
      assert(at != std::string::npos && "refusal argument without placeholder");
      text.replace(at, placeholder.size(), arg);
    }
    if (layer)
      text = "layer " + std::to_string(*layer) + ": " + text;
    return text;
  }
};

/// Sets `refusal` and fails.
LogicalResult refuseWith(Refusal &refusal, RefusalKind kind,
                         SmallVector<std::string, 4> args = {},
                         std::optional<unsigned> layer = std::nullopt) {
  refusal = Refusal{kind, std::move(args), layer};
  return failure();
}

/// A refusal for a mask the matcher did not accept.
LogicalResult refuseMask(Refusal &refusal, MaskMismatch kind, unsigned layer) {
  return refuseWith(refusal, RefusalKind::Mask,
                    {maskMismatchMessage(kind).str()}, layer);
}

/// One prefill layer: its attention and the result positions of its K/V.
struct PrefillLayer {
  AttentionMatch attention;
  unsigned keyResult = 0, valueResult = 0;
};

/// One decode layer: its attention, the cache arguments and the appends.
struct DecodeLayer {
  AttentionMatch attention;
  BlockArgument keyCache, valueCache;
  tensor::ConcatOp keyAppend, valueAppend;
  unsigned keyResult = 0, valueResult = 0;
};

std::string describe(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->getLoc().print(os);
  return op->getName().getStringRef().str() + " at " + text;
}

std::string describe(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value))
    return "%arg" + std::to_string(arg.getArgNumber());
  return describe(value.getDefiningOp());
}

/// Every attention of `func`, in program order. Fails when a batch_matmul is
/// neither half of a recognised attention.
FailureOr<SmallVector<AttentionMatch>> findAttentions(func::FuncOp func,
                                                      Refusal &refusal) {
  SmallVector<linalg::BatchMatmulOp> matmuls;
  func.walk([&](linalg::BatchMatmulOp op) { matmuls.push_back(op); });
  SmallVector<AttentionMatch> found;
  // SDPA kept by the export: the op is the attention, only its operands and
  // mask are read (matchSdpa).
  WalkResult kept = func.walk([&](SdpaOp op) {
    AttentionFailure failure;
    FailureOr<AttentionMatch> m = matchSdpa(op, failure);
    if (failed(m)) {
      (void)refuseWith(refusal, RefusalKind::UnrecognisedBatchMatmul,
                       {describe(op.getOperation()), failure.message()});
      return WalkResult::interrupt();
    }
    found.push_back(*m);
    return WalkResult::advance();
  });
  if (kept.wasInterrupted())
    return failure();
  llvm::DenseMap<Operation *, AttentionFailure> failures;
  llvm::DenseSet<Operation *> covered;
  for (linalg::BatchMatmulOp matmul : matmuls) {
    AttentionFailure failure;
    if (FailureOr<AttentionMatch> m = matchAttention(matmul, failure);
        succeeded(m)) {
      covered.insert(m->scoresMatmul);
      covered.insert(m->outputMatmul);
      found.push_back(*m);
    } else {
      failures[matmul] = failure;
    }
  }
  // Report the uncovered batch_matmul whose match got furthest (the first
  // one among equals): a P.V whose softmax was recognised says more than a
  // Q.K^T product that was only tried as P.V.
  linalg::BatchMatmulOp worst;
  for (linalg::BatchMatmulOp matmul : matmuls) {
    if (covered.contains(matmul))
      continue;
    if (!worst || attentionMismatchStage(failures[matmul].kind) >
                      attentionMismatchStage(failures[worst].kind))
      worst = matmul;
  }
  if (worst) {
    return refuseWith(
        refusal, RefusalKind::UnrecognisedBatchMatmul,
        {describe(worst.getOperation()), failures[worst].message()});
  }
  if (found.empty()) {
    // A model exported with one function per layer keeps its attention in
    // the callee; say which function to name.
    std::optional<std::string> callee;
    func.walk([&](func::CallOp call) {
      auto target = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
          call, call.getCalleeAttr());
      bool attention = false;
      if (target && !target.isExternal())
        target.walk([&](Operation *op) {
          attention |= isa<linalg::BatchMatmulOp, SdpaOp>(op);
        });
      if (attention && !callee)
        callee = target.getName().str();
    });
    if (callee)
      (void)refuseWith(refusal, RefusalKind::AttentionInCallee, {*callee});
    else
      (void)refuseWith(refusal, RefusalKind::NoAttention);
    return failure();
  }
  return found;
}

/// The single position of `value` among the operands of `ret`.
std::optional<unsigned> resultIndex(func::ReturnOp ret, Value value) {
  std::optional<unsigned> index;
  for (OpOperand &operand : ret->getOpOperands()) {
    if (operand.get() != value)
      continue;
    if (index)
      return std::nullopt;
    index = operand.getOperandNumber();
  }
  return index;
}

func::ReturnOp soleReturn(func::FuncOp func) {
  if (!func.getBody().hasOneBlock())
    return nullptr;
  return dyn_cast<func::ReturnOp>(func.getBody().front().getTerminator());
}

/// Checks shared by prefill and decode layers.
LogicalResult checkLayerSet(ArrayRef<AttentionMatch> attentions,
                            Refusal &refusal) {
  llvm::DenseSet<Value> sources;
  for (auto [layer, m] : llvm::enumerate(attentions)) {
    for (Value source : {m.keys.source, m.values.source}) {
      if (!sources.insert(source).second)
        return refuseWith(refusal, RefusalKind::SharedKV, {}, layer);
    }
    Type element =
        cast<RankedTensorType>(m.keys.source.getType()).getElementType();
    if (!element.isF32() && !element.isF16() && !element.isBF16())
      return refuseWith(refusal, RefusalKind::UnsupportedElementType, {},
                        layer);
  }
  return success();
}

/// The attentions of a single-block function that ends in func.return.
FailureOr<SmallVector<AttentionMatch>>
findLayers(func::FuncOp func, func::ReturnOp &ret, Refusal &refusal) {
  ret = soleReturn(func);
  if (!ret) {
    (void)refuseWith(refusal, RefusalKind::NotSingleBlock);
    return failure();
  }
  FailureOr<SmallVector<AttentionMatch>> attentions =
      findAttentions(func, refusal);
  if (failed(attentions) || failed(checkLayerSet(*attentions, refusal)))
    return failure();
  return attentions;
}

FailureOr<SmallVector<PrefillLayer>>
analysePrefill(func::FuncOp func, int64_t window, Refusal &refusal) {
  func::ReturnOp ret;
  FailureOr<SmallVector<AttentionMatch>> attentions =
      findLayers(func, ret, refusal);
  if (failed(attentions))
    return failure();
  SmallVector<PrefillLayer> layers;
  for (auto [index, m] : llvm::enumerate(*attentions)) {
    auto layer = static_cast<unsigned>(index);
    auto refuse = [&](RefusalKind kind, SmallVector<std::string, 4> args = {}) {
      (void)refuseWith(refusal, kind, std::move(args), layer);
      return failure();
    };
    MaskMismatch maskFailure;
    FailureOr<CausalMask> mask = matchCausalMask(m, maskFailure);
    if (failed(mask)) {
      (void)refuseMask(refusal, maskFailure, layer);
      return failure();
    }
    Value keyRows = mask->keyPositions, queryRows = mask->queryPositions;
    while (auto e = keyRows.getDefiningOp<tensor::ExpandShapeOp>())
      keyRows = e.getSrc();
    while (auto e = queryRows.getDefiningOp<tensor::ExpandShapeOp>())
      queryRows = e.getSrc();
    if (!mask->queryIsRow || keyRows != queryRows)
      return refuse(RefusalKind::NotSelfAttention);
    auto qType = cast<RankedTensorType>(m.queries.getType());
    int64_t length = qType.getDimSize(2);
    // A sliding window that covers every query-key distance of the prompt
    // (at most L - 1) hides nothing: the mask is the causal one.
    if (mask->window && qType.isDynamicDim(2))
      return refuse(RefusalKind::SlidingWindowDynamicPrompt,
                    {std::to_string(*mask->window)});
    if (mask->window && length > *mask->window)
      return refuse(RefusalKind::SlidingWindowNarrower,
                    {std::to_string(*mask->window), std::to_string(length)});
    if (!qType.isDynamicDim(2) && length < window)
      return refuse(RefusalKind::PromptShorterThanWindow,
                    {std::to_string(length), std::to_string(window)});
    std::optional<unsigned> k = resultIndex(ret, m.keys.source);
    std::optional<unsigned> v = resultIndex(ret, m.values.source);
    if (!k || !v)
      return refuse(RefusalKind::KVNotReturned, {k ? "values" : "keys"});
    layers.push_back({m, *k, *v});
  }
  return layers;
}

/// The cache argument and appended token of `append = concat(cache, new)`.
LogicalResult matchAppend(Value source, func::ReturnOp ret,
                          tensor::ConcatOp &append, BlockArgument &cache,
                          unsigned &result, Refusal &refusal, bool oneRow) {
  append = source.getDefiningOp<tensor::ConcatOp>();
  if (!append || append.getDim() != 2 || append.getInputs().size() != 2)
    return refuseWith(refusal, RefusalKind::NotCacheAppend);
  cache = dyn_cast<BlockArgument>(append.getInputs()[0]);
  if (!cache || cache.getOwner()->getParentOp() != ret->getParentOp())
    return refuseWith(refusal, RefusalKind::AppendNotFromArgument);
  auto token = cast<RankedTensorType>(append.getInputs()[1].getType());
  if (oneRow && (!token.hasStaticShape() || token.getDimSize(2) != 1))
    return refuseWith(refusal, RefusalKind::AppendedTokenNotOneRow);
  std::optional<unsigned> index = resultIndex(ret, append.getResult());
  if (!index)
    return refuseWith(refusal, RefusalKind::AppendNotReturned,
                      {describe(cache)});
  result = *index;
  for (Operation *user : cache.getUsers()) {
    if (user != append && !isa<tensor::DimOp>(user))
      return refuseWith(
          refusal, RefusalKind::CacheOtherUse,
          {describe(cache), user->getName().getStringRef().str()});
  }
  return success();
}

/// The append may only feed the return and the GQA repeat (directly or via
/// the unit-dim expand_shape the importer inserts), or attention itself when
/// there is no repeat.
LogicalResult checkAppendUses(tensor::ConcatOp append, const RepeatedKV &kv,
                              Refusal &refusal) {
  for (Operation *user : append->getUsers()) {
    if (isa<func::ReturnOp>(user))
      continue;
    if (kv.repeatOp && user == kv.repeatOp)
      continue;
    if (auto expand = dyn_cast<tensor::ExpandShapeOp>(user)) {
      bool feedsRepeat = llvm::all_of(expand->getUsers(), [&](Operation *op) {
        // The dynamic repeat reads it with tensor.extract in its body.
        return kv.repeatOp && kv.repeatOp->isAncestor(op);
      });
      if (feedsRepeat)
        continue;
    }
    if (!kv.repeatOp)
      continue;
    return refuseWith(refusal, RefusalKind::AppendOtherUse,
                      {user->getName().getStringRef().str()});
  }
  return success();
}

/// RoPE tables (generics computing cos/sin) must be derived from a non-cache
/// argument, never from a cache (its length is physical, not logical).
LogicalResult checkRopePositions(func::FuncOp func,
                                 const llvm::DenseSet<Value> &caches,
                                 Refusal &refusal) {
  SmallVector<Operation *> tables;
  func.walk([&](linalg::GenericOp generic) {
    bool trig = false;
    generic.getBody()->walk(
        [&](Operation *op) { trig |= isa<math::CosOp, math::SinOp>(op); });
    if (trig)
      tables.push_back(generic);
  });
  if (tables.empty())
    return refuseWith(refusal, RefusalKind::NoRopeTables);
  llvm::SetVector<Operation *> visited;
  SmallVector<Operation *> work(tables.begin(), tables.end());
  llvm::SetVector<BlockArgument> arguments;
  auto visitValue = [&](Value value) {
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      if (arg.getOwner()->getParentOp() == func)
        arguments.insert(arg);
      return;
    }
    if (Operation *def = value.getDefiningOp())
      if (visited.insert(def))
        work.push_back(def);
  };
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    op->walk([&](Operation *nested) {
      for (Value operand : nested->getOperands())
        visitValue(operand);
    });
  }
  bool fromPositionArgument = false;
  for (BlockArgument arg : arguments) {
    if (caches.contains(arg))
      return refuseWith(refusal, RefusalKind::RopeFromCache, {describe(arg)});
    fromPositionArgument = true;
  }
  if (!fromPositionArgument)
    return refuseWith(refusal, RefusalKind::RopeNotFromArgument);
  return success();
}

/// `m`'s keys and values as appends to cache arguments (decode's one row, or
/// a prompt chunk's rows), each returned and read only by the attention.
LogicalResult matchAppends(const AttentionMatch &m, func::ReturnOp ret,
                           DecodeLayer &d, Refusal &refusal, bool oneRow) {
  d.attention = m;
  if (failed(matchAppend(m.keys.source, ret, d.keyAppend, d.keyCache,
                         d.keyResult, refusal, oneRow)) ||
      failed(matchAppend(m.values.source, ret, d.valueAppend, d.valueCache,
                         d.valueResult, refusal, oneRow)))
    return failure();
  return success(succeeded(checkAppendUses(d.keyAppend, m.keys, refusal)) &&
                 succeeded(checkAppendUses(d.valueAppend, m.values, refusal)));
}

/// The attentions of `func`, each over appends to its cache arguments
/// (matchAppends), and the set of those arguments.
FailureOr<SmallVector<DecodeLayer>> appendLayers(func::FuncOp func, bool oneRow,
                                                 llvm::DenseSet<Value> &caches,
                                                 Refusal &refusal) {
  func::ReturnOp ret;
  FailureOr<SmallVector<AttentionMatch>> attentions =
      findLayers(func, ret, refusal);
  if (failed(attentions))
    return failure();
  SmallVector<DecodeLayer> layers;
  for (auto [layer, m] : llvm::enumerate(*attentions)) {
    DecodeLayer d;
    if (failed(matchAppends(m, ret, d, refusal, oneRow))) {
      refusal.layer = layer;
      return failure();
    }
    caches.insert(d.keyCache);
    caches.insert(d.valueCache);
    layers.push_back(d);
  }
  return layers;
}

FailureOr<SmallVector<DecodeLayer>> analyseDecode(func::FuncOp func,
                                                  Refusal &refusal) {
  llvm::DenseSet<Value> caches;
  FailureOr<SmallVector<DecodeLayer>> found =
      appendLayers(func, /*oneRow=*/true, caches, refusal);
  if (failed(found))
    return failure();
  SmallVector<DecodeLayer> layers = std::move(*found);
  for (auto [index, d] : llvm::enumerate(layers)) {
    auto layer = static_cast<unsigned>(index);
    const AttentionMatch &m = d.attention;
    auto qType = cast<RankedTensorType>(m.queries.getType());
    if (qType.getDimSize(2) != 1)
      return refuseWith(refusal, RefusalKind::DecodeManyQueries, {}, layer);
    MaskMismatch maskFailure;
    FailureOr<CausalMask> mask = matchCausalMask(m, maskFailure);
    if (failed(mask))
      return refuseMask(refusal, maskFailure, layer);
    // The logical position of the new token is a run-time value: nothing
    // bounds the query-key distances a window would have to cover.
    if (mask->window)
      return refuseWith(refusal, RefusalKind::SlidingWindowInDecode,
                        {std::to_string(*mask->window)}, layer);
    // The query position must be the end of the cache, physical or logical:
    // then every cached key is visible, and stays visible when compacted.
    std::optional<PositionValue> query = evaluatePosition(mask->queryPositions);
    auto cacheType = cast<RankedTensorType>(d.keyCache.getType());
    bool atEnd = false;
    if (query) {
      switch (query->base) {
      case PositionValue::Base::CacheLength:
        atEnd = query->offset == 0 && caches.contains(query->argument);
        break;
      case PositionValue::Base::Argument:
        atEnd = query->offset == 0 && !caches.contains(query->argument);
        break;
      case PositionValue::Base::Zero:
        atEnd = !cacheType.isDynamicDim(2) &&
                query->offset == cacheType.getDimSize(2);
        break;
      }
    }
    if (!atEnd)
      return refuseWith(refusal, RefusalKind::DecodeMaskPosition, {}, layer);
  }
  if (failed(checkRopePositions(func, caches, refusal)))
    return failure();
  return layers;
}

/// A prompt chunk's layers (chunked prefill): each attention reads
/// `concat(cache argument, chunk)` and returns it, as decode does for one
/// token, under a causal mask whose query rows sit at `cache length + row`.
/// Its physical mask stays exact over a compacted cache (every cached key
/// precedes the chunk), so only the returned K/V change, as in prefill: the
/// result is prefill's layer form, the select reading the whole append.
FailureOr<SmallVector<PrefillLayer>> analyseExtend(func::FuncOp func,
                                                   Refusal &refusal) {
  llvm::DenseSet<Value> caches;
  FailureOr<SmallVector<DecodeLayer>> appends =
      appendLayers(func, /*oneRow=*/false, caches, refusal);
  if (failed(appends))
    return failure();
  SmallVector<PrefillLayer> layers;
  for (auto [index, d] : llvm::enumerate(*appends)) {
    auto layer = static_cast<unsigned>(index);
    const AttentionMatch &m = d.attention;
    MaskMismatch maskFailure;
    FailureOr<CausalMask> mask = matchCausalMask(m, maskFailure);
    if (failed(mask))
      return refuseMask(refusal, maskFailure, layer);
    if (mask->window)
      return refuseWith(refusal, RefusalKind::SlidingWindowInExtend,
                        {std::to_string(*mask->window)}, layer);
    std::optional<PositionValue> query =
        mask->queryIsRow ? shiftedArange(mask->queryPositions) : std::nullopt;
    if (!query || query->base != PositionValue::Base::CacheLength ||
        query->offset != 0 ||
        (query->argument != d.keyCache && query->argument != d.valueCache))
      return refuseWith(refusal, RefusalKind::ExtendQueryPositions, {}, layer);
    layers.push_back({m, d.keyResult, d.valueResult});
  }
  if (failed(checkRopePositions(func, caches, refusal)))
    return failure();
  return layers;
}

/// Prefill results and decode arguments/results must line up layer by layer.
LogicalResult checkCorrespondence(func::FuncOp prefill, func::FuncOp decode,
                                  ArrayRef<PrefillLayer> pre,
                                  ArrayRef<DecodeLayer> dec, Refusal &refusal) {
  if (pre.size() != dec.size())
    return refuseWith(refusal, RefusalKind::LayerCountMismatch,
                      {prefill.getName().str(), std::to_string(pre.size()),
                       decode.getName().str(), std::to_string(dec.size())});
  unsigned firstResult = ~0u, firstArg = ~0u;
  for (const DecodeLayer &d : dec)
    firstArg = std::min(
        {firstArg, d.keyCache.getArgNumber(), d.valueCache.getArgNumber()});
  for (const PrefillLayer &p : pre)
    firstResult = std::min({firstResult, p.keyResult, p.valueResult});
  for (auto [layer, pair] : llvm::enumerate(llvm::zip(pre, dec))) {
    auto &[p, d] = pair;
    bool sameResults =
        p.keyResult == d.keyResult && p.valueResult == d.valueResult;
    bool sameArgs =
        d.keyCache.getArgNumber() - firstArg == p.keyResult - firstResult &&
        d.valueCache.getArgNumber() - firstArg == p.valueResult - firstResult;
    auto pk = cast<RankedTensorType>(p.attention.keys.source.getType());
    auto dk = cast<RankedTensorType>(d.keyCache.getType());
    bool sameShape = pk.getElementType() == dk.getElementType() &&
                     pk.getDimSize(0) == dk.getDimSize(0) &&
                     pk.getDimSize(1) == dk.getDimSize(1) &&
                     pk.getDimSize(3) == dk.getDimSize(3) &&
                     p.attention.queryHeads == d.attention.queryHeads;
    if (!sameResults || !sameArgs || !sameShape)
      return refuseWith(refusal, RefusalKind::CachesMisaligned,
                        {decode.getName().str(), prefill.getName().str()},
                        static_cast<unsigned>(layer));
  }
  return success();
}

/// Positions of a rewritten function's arguments and results whose types
/// change, with their new types.
struct SignatureChange {
  llvm::SmallDenseMap<unsigned, Type> args, results;
  /// New results, each after the (changed) result it names:
  /// budget=adaptive's per-layer offsets follow the layer's values.
  SmallVector<std::pair<unsigned, Type>> inserted;
  bool empty() const {
    return args.empty() && results.empty() && inserted.empty();
  }
};

/// The calls of a function whose signature changes, all in the entry block
/// of callers that are not used themselves (a model exported with one
/// function per layer: the entry points call it once per layer).
struct CallSites {
  SmallVector<func::CallOp> calls;
};

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
    for (auto [index, type] : change.args) {
      auto arg = dyn_cast<BlockArgument>(call.getOperand(index));
      if (!arg || arg.getOwner() != &caller.getBody().front()) {
        (void)refuseWith(refusal, RefusalKind::CallOperandNotArgument,
                         {std::to_string(index), name});
        return failure();
      }
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
    sites.calls.push_back(call);
  }
  return sites;
}

/// The types prefill's K/V results take: `snapkv.select`'s results, layer l
/// keeping `capacities[l]` positions.
SignatureChange prefillChange(ArrayRef<PrefillLayer> layers, GqaPolicy gqa,
                              ArrayRef<int64_t> capacities, bool ragged) {
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
    if (compacted == type)
      continue;
    change.results[layer.keyResult] = compacted;
    change.results[layer.valueResult] = compacted;
  }
  return change;
}

/// The types decode's caches take: `Hq` heads under gqa=expand.
SignatureChange decodeChange(ArrayRef<DecodeLayer> layers, GqaPolicy gqa) {
  SignatureChange change;
  if (gqa != GqaPolicy::expand)
    return change;
  for (const DecodeLayer &layer : layers) {
    const AttentionMatch &m = layer.attention;
    if (m.queryHeads == m.kvHeads)
      continue;
    auto type = cast<RankedTensorType>(layer.keyCache.getType());
    auto expanded =
        RankedTensorType::get({type.getDimSize(0), m.queryHeads,
                               type.getDimSize(2), type.getDimSize(3)},
                              type.getElementType());
    change.args[layer.keyCache.getArgNumber()] = expanded;
    change.args[layer.valueCache.getArgNumber()] = expanded;
    change.results[layer.keyResult] = expanded;
    change.results[layer.valueResult] = expanded;
  }
  return change;
}

/// [B, Hkv, 1, D] -> [B, Hkv * G, 1, D] in HuggingFace repeat_kv order.
Value repeatHeads(OpBuilder &b, Location loc, Value token, int64_t group) {
  auto type = cast<RankedTensorType>(token.getType());
  SmallVector<int64_t> shape{type.getDimSize(0), type.getDimSize(1), group,
                             type.getDimSize(2), type.getDimSize(3)};
  Value init = tensor::EmptyOp::create(b, loc, shape, type.getElementType());
  MLIRContext *ctx = b.getContext();
  auto in = AffineMap::get(5, 0,
                           {getAffineDimExpr(0, ctx), getAffineDimExpr(1, ctx),
                            getAffineDimExpr(3, ctx), getAffineDimExpr(4, ctx)},
                           ctx);
  auto generic = linalg::GenericOp::create(
      b, loc, init.getType(), token, init,
      {in, AffineMap::getMultiDimIdentityMap(5, ctx)},
      SmallVector<utils::IteratorType>(5, utils::IteratorType::parallel),
      [](OpBuilder &nb, Location nloc, ValueRange args) {
        linalg::YieldOp::create(nb, nloc, args[0]);
      });
  return tensor::CollapseShapeOp::create(
      b, loc, generic.getResult(0),
      SmallVector<ReassociationIndices>{{0}, {1, 2}, {3}, {4}});
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

/// An extend function to rewrite: a prompt chunk's (chunked prefill) or
/// the generated window's (decode-time compression), with the capacity its
/// select keeps.
struct ExtendTarget {
  func::FuncOp func;
  int64_t capacity;
  SmallVector<PrefillLayer> layers = {};
  CallSites calls = {};
};

struct CompressKVCachePass
    : snapkv::impl::CompressKVCacheBase<CompressKVCachePass> {
  using Base::Base;

  // pooling, gqa, order and scoring are enum options: the option parser
  // rejects any other value before the pass runs.
  LogicalResult checkOptions() {
    ModuleOp module = getOperation();
    std::string bad;
    if (window < 1)
      bad = "window must be >= 1 (got " + std::to_string(window) + ")";
    else if (capacity <= window)
      bad = "capacity must be greater than window (got capacity=" +
            std::to_string(capacity) + ", window=" + std::to_string(window) +
            ")";
    else if (kernelSize < 1 || kernelSize % 2 == 0)
      bad = "kernel must be odd and >= 1 (got " + std::to_string(kernelSize) +
            ")";
    else if (scoring == Scoring::recent && sinks.hasValue() &&
             (sinks < 0 || sinks > capacity - window))
      bad = "sinks must be between 0 and capacity - window (got " +
            std::to_string(sinks) + ")";
    else if (scoring == Scoring::random && seed < 0)
      bad = "seed must be non-negative (got " + std::to_string(seed) + ")";
    else if (floor != 0 && budget != BudgetPolicy::adaptive)
      bad = "floor is Ada-KV's per-head minimum: it needs budget=adaptive";
    else if (floor < 0 || floor > capacity - window)
      bad = "floor must be between 0 and capacity - window (" +
            std::to_string(capacity - window) + "), got " +
            std::to_string(floor);
    else if (budget == BudgetPolicy::adaptive && scoring != Scoring::votes &&
             scoring != Scoring::prefix_votes)
      bad = "budget=adaptive ranks scores across heads: scoring must be votes "
            "or prefix_votes";
    else if (budget == BudgetPolicy::adaptive && order != Order::position)
      bad = "budget=adaptive keeps each head's positions in ascending order "
            "(order=score is not available)";
    else if (budget != BudgetPolicy::uniform && pyramidBeta < 1)
      bad =
          "pyramid-beta must be >= 1 (got " + std::to_string(pyramidBeta) + ")";
    else if (budget != BudgetPolicy::uniform && scoring == Scoring::recent &&
             sinks.hasValue())
      bad = "sinks takes one number of sinks for every layer, so it needs "
            "budget=uniform (a pyramid layer may keep fewer than the sinks)";
    else if (block < 1)
      bad = "block must be >= 1 (got " + std::to_string(block) + ")";
    else if (block != 1 && scoring != Scoring::votes &&
             scoring != Scoring::prefix_votes)
      bad = "block sums pooled votes: it needs scoring=votes or prefix_votes";
    else if (block != 1 && budget != BudgetPolicy::uniform)
      bad = "block needs budget=uniform (a per-layer or per-head budget need "
            "not be a multiple of the block)";
    else if ((capacity - window) % block != 0)
      bad = "block (" + std::to_string(block) +
            ") must divide capacity - window (" +
            std::to_string(capacity - window) + " = " +
            std::to_string(capacity) + " - " + std::to_string(window) + ")";
    else if (decodeCapacity > window && (decodeCapacity - window) % block != 0)
      bad = "block (" + std::to_string(block) +
            ") must divide decode-capacity - window (" +
            std::to_string(decodeCapacity - window) + " = " +
            std::to_string(decodeCapacity) + " - " + std::to_string(window) +
            ")";
    else if (prefillFunc.empty())
      bad = "prefill-func must name a function";
    else if (chunk < 0)
      bad = "chunk must be >= 0 (got " + std::to_string(chunk) + ")";
    else if (decodeInterval < 0)
      bad = "decode-interval must be >= 0 (got " +
            std::to_string(decodeInterval) + ")";
    else if (decodeCapacity < 0)
      bad = "decode-capacity must be >= 0 (got " +
            std::to_string(decodeCapacity) + ")";
    else if (decodeCapacity > 0 && decodeInterval == 0)
      bad = "decode-capacity is the size decode-time compression compacts "
            "to: it needs decode-interval";
    else if (decodeCapacity > 0 && decodeCapacity <= window)
      bad = "decode-capacity must be greater than window: the generated "
            "window is always kept (got decode-capacity=" +
            std::to_string(decodeCapacity) +
            ", window=" + std::to_string(window) + ")";
    else if (chunk > 0 && chunk < window)
      bad = "chunk must be at least the window: a chunk's last `window` "
            "queries vote (got chunk=" +
            std::to_string(chunk) + ", window=" + std::to_string(window) + ")";
    else if (extends() && gqa == GqaPolicy::expand)
      bad = std::string(chunk > 0 ? "chunk" : "decode-interval") +
            " needs gqa=mean or gqa=max: with expand the caches the extend "
            "function extends would hold Hq heads";
    else if (extends() && budget != BudgetPolicy::uniform)
      bad = std::string(chunk > 0 ? "chunk" : "decode-interval") +
            " needs budget=uniform (per-layer and per-head budgets are not "
            "available with chunked prefill or decode-time compression)";
    else if (extends() && extendFunc.empty())
      bad = std::string(chunk > 0 ? "chunk" : "decode-interval") +
            " needs extend-func to name a function";
    // At a location, not on the module op, which mlir-opt would print whole.
    if (!bad.empty())
      return emitError(module.getLoc()) << "snapkv-compress-kv-cache: " << bad;
    return success();
  }

  /// Whether the extend function is rewritten: chunked prefill or
  /// decode-time compression runs it.
  bool extends() const { return chunk > 0 || decodeInterval > 0; }

  /// Leaves the module unchanged and says why.
  void refuse(Operation *where, StringRef function, const Refusal &refusal) {
    // Diagnose at the location only: printing a whole model function as the
    // "current operation" would bury the reason.
    auto diag = strict ? mlir::emitError(where->getLoc())
                       : mlir::emitWarning(where->getLoc());
    diag << "snapkv-compress-kv-cache left the module unchanged: @" << function
         << ": " << refusal.message();
    // The same reason for programs: snapkv-opt reads it for its exit status,
    // `snapkv-describe-module` prints it as JSON.
    Builder b(&getContext());
    SmallVector<NamedAttribute> fields{
        b.getNamedAttr("reason",
                       b.getStringAttr(stringifyRefusalKind(refusal.kind))),
        b.getNamedAttr("function", b.getStringAttr(function)),
        b.getNamedAttr("message", b.getStringAttr(refusal.message()))};
    if (refusal.layer)
      fields.push_back(
          b.getNamedAttr("layer", b.getI64IntegerAttr(*refusal.layer)));
    getOperation()->setAttr(kRefusalAttrName, b.getDictionaryAttr(fields));
    if (strict)
      signalPassFailure();
  }

  /// Each layer's capacity, lowest layer first.
  SmallVector<int64_t> capacities(size_t layers) {
    return layerCapacities(budget, window, capacity,
                           static_cast<int64_t>(layers), pyramidBeta);
  }

  void rewritePrefill(func::FuncOp func, ArrayRef<PrefillLayer> layers,
                      ArrayRef<int64_t> layerCapacity,
                      StringRef what = "the prompt") {
    func::ReturnOp ret = soleReturn(func);
    OpBuilder b(ret);
    // budget=adaptive: the offsets to return after each layer's values.
    llvm::SmallDenseMap<unsigned, Value> layerOffsets;
    for (auto [index, layer] : llvm::enumerate(layers)) {
      AttentionMatch m = layer.attention;
      Location loc = m.root()->getLoc();
      auto qType = cast<RankedTensorType>(m.queries.getType());
      OpFoldResult start;
      if (qType.isDynamicDim(2)) {
        // A prompt shorter than the window would slice out of bounds.
        Value length = tensor::DimOp::create(b, loc, m.queries, 2);
        Value w = arith::ConstantIndexOp::create(b, loc, window);
        Value enough =
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, length, w);
        cf::AssertOp::create(b, loc, enough,
                             "snapkv: " + what.str() +
                                 " is shorter than the observation window");
        start = arith::SubIOp::create(b, loc, length, w).getResult();
      } else {
        start = b.getIndexAttr(qType.getDimSize(2) - window);
      }
      SmallVector<OpFoldResult> offsets{b.getIndexAttr(0), b.getIndexAttr(0),
                                        start, b.getIndexAttr(0)};
      SmallVector<OpFoldResult> sizes{
          b.getIndexAttr(m.batch), b.getIndexAttr(m.queryHeads),
          b.getIndexAttr(window), b.getIndexAttr(m.headDim)};
      SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
      Value queries = tensor::ExtractSliceOp::create(b, loc, m.queries, offsets,
                                                     sizes, strides);
      // Always the model's own effective scale, never the op's default: an
      // f32 value of 1/sqrt(D) computed differently could break a tie
      // differently from the model's logits.
      FloatAttr scale = b.getF32FloatAttr(m.scale);
      std::optional<int64_t> layerSinks, layerSeed;
      // Unset, the op's default applies (4, or capacity - window).
      if (scoring == Scoring::recent && sinks.hasValue())
        layerSinks = sinks;
      if (scoring == Scoring::random)
        layerSeed = seed + static_cast<int64_t>(index);
      if (budget == BudgetPolicy::adaptive) {
        FailureOr<SmallVector<Type, 4>> types =
            SelectAdaptiveOp::inferResultTypes(queries.getType(),
                                               m.keys.source.getType(),
                                               layerCapacity[index], gqa);
        auto select = SelectAdaptiveOp::create(
            b, loc, TypeRange(*types), queries, m.keys.source, m.values.source,
            window, layerCapacity[index], floor, kernelSize, pooling, gqa,
            scale, scoring);
        ret->setOperand(layer.keyResult, select.getSelectedKeys());
        ret->setOperand(layer.valueResult, select.getSelectedValues());
        layerOffsets[layer.valueResult] = select.getOffsets();
        continue;
      }
      auto select = SelectOp::create(
          b, loc, queries, m.keys.source, m.values.source, window,
          layerCapacity[index], kernelSize, pooling, gqa, order, scale, scoring,
          layerSinks, layerSeed, block);
      ret->setOperand(layer.keyResult, select.getSelectedKeys());
      ret->setOperand(layer.valueResult, select.getSelectedValues());
    }
    if (!layerOffsets.empty()) {
      // Each layer's offsets follow its values (prefillChange's `inserted`).
      SmallVector<Value> operands;
      for (auto [i, operand] : llvm::enumerate(ret.getOperands())) {
        operands.push_back(operand);
        if (Value extra = layerOffsets.lookup(i))
          operands.push_back(extra);
      }
      ret->setOperands(operands);
    }
    updateSignature(func);
  }

  void expandCache(OpBuilder &b, BlockArgument cache, tensor::ConcatOp append,
                   RepeatedKV kv, int64_t queryHeads) {
    auto type = cast<RankedTensorType>(cache.getType());
    int64_t group = queryHeads / type.getDimSize(1);
    cache.setType(
        RankedTensorType::get({type.getDimSize(0), queryHeads,
                               type.getDimSize(2), type.getDimSize(3)},
                              type.getElementType()));
    b.setInsertionPoint(append);
    Location loc = append.getLoc();
    Value token = repeatHeads(b, loc, append.getInputs()[1], group);
    Value appended =
        tensor::ConcatOp::create(b, loc, 2, ValueRange{cache, token});
    Value replacement = appended;
    if (cast<RankedTensorType>(kv.repeated.getType()).getRank() == 3)
      replacement = tensor::CollapseShapeOp::create(
          b, loc, appended,
          SmallVector<ReassociationIndices>{{0, 1}, {2}, {3}});
    kv.repeated.replaceAllUsesWith(replacement);
    append.getResult().replaceUsesWithIf(appended, [](OpOperand &use) {
      return isa<func::ReturnOp>(use.getOwner());
    });
  }

  void rewriteDecode(func::FuncOp func, ArrayRef<DecodeLayer> layers) {
    OpBuilder b(func.getContext());
    for (const DecodeLayer &layer : layers) {
      AttentionMatch m = layer.attention;
      if (gqa == GqaPolicy::expand && m.queryHeads != m.kvHeads) {
        expandCache(b, layer.keyCache, layer.keyAppend, m.keys, m.queryHeads);
        expandCache(b, layer.valueCache, layer.valueAppend, m.values,
                    m.queryHeads);
      }
      // Logical mask: the new token sees every cached key (see Passes.td).
      if (m.sdpa)
        m.sdpa.getMaskMutable().clear();
      else
        m.maskAdd.getResult(0).replaceAllUsesWith(m.maskAdd.getDpsInputs()[0]);
    }
    eraseDeadOps(func);
    updateSignature(func);
  }

  /// Rewrites @prefill (and @decode) in `module`, layer l of the prefill
  /// function keeping `capacities[l]` positions (`capacitiesOf(layers)`). A
  /// refusal is reported (refuse) and leaves `module` unchanged.
  LogicalResult
  rewritePair(ModuleOp module, StringRef prefillName, StringRef decodeName,
              function_ref<SmallVector<int64_t>(size_t)> capacitiesOf) {
    auto prefill = module.lookupSymbol<func::FuncOp>(prefillName);
    if (!prefill || prefill.isExternal()) {
      refuse(module, prefillName,
             Refusal{RefusalKind::NoPrefillFunction, {}, {}});
      return failure();
    }
    Refusal refusal;
    FailureOr<SmallVector<PrefillLayer>> pre =
        analysePrefill(prefill, window, refusal);
    if (failed(pre)) {
      refuse(prefill, prefillName, refusal);
      return failure();
    }

    func::FuncOp decode;
    FailureOr<SmallVector<DecodeLayer>> dec;
    if (!decodeName.empty()) {
      decode = module.lookupSymbol<func::FuncOp>(decodeName);
      if (!decode || decode.isExternal()) {
        refuse(module, decodeName,
               Refusal{RefusalKind::NoDecodeFunction, {}, {}});
        return failure();
      }
      dec = analyseDecode(decode, refusal);
      if (failed(dec) ||
          failed(checkCorrespondence(prefill, decode, *pre, *dec, refusal))) {
        refuse(decode, decodeName, refusal);
        return failure();
      }
    }

    SmallVector<int64_t> layerCapacity = capacitiesOf(pre->size());
    if (budget == BudgetPolicy::adaptive)
      for (auto [index, layer] : llvm::enumerate(*pre)) {
        // What snapkv.select_adaptive's verifier requires, said before
        // anything changes.
        const AttentionMatch &m = layer.attention;
        int64_t heads = gqa == GqaPolicy::expand ? m.queryHeads : m.kvHeads;
        int64_t length =
            cast<RankedTensorType>(m.keys.source.getType()).getDimSize(2);
        constexpr int64_t limit = std::numeric_limits<int32_t>::max();
        std::optional<std::pair<std::string, int64_t>> large;
        if (layerCapacity[index] >= limit / heads)
          large = {"capacity", layerCapacity[index]};
        else if (!ShapedType::isDynamic(length) && length >= limit / heads)
          large = {"prompt length", length};
        if (large) {
          refuse(prefill, prefillName,
                 Refusal{RefusalKind::AdaptiveTooLarge,
                         {large->first, std::to_string(heads),
                          std::to_string(large->second)},
                         static_cast<unsigned>(index)});
          return failure();
        }
      }
    SmallVector<func::FuncOp> rewritten{prefill};
    if (decode)
      rewritten.push_back(decode);
    SignatureChange prefillTypes = prefillChange(
        *pre, gqa, layerCapacity, budget == BudgetPolicy::adaptive);
    FailureOr<CallSites> prefillCalls =
        analyseCallers(module, prefill, prefillTypes, rewritten, refusal);
    if (failed(prefillCalls)) {
      refuse(prefill, prefillName, refusal);
      return failure();
    }
    FailureOr<CallSites> decodeCalls = CallSites{};
    if (decode) {
      decodeCalls = analyseCallers(module, decode, decodeChange(*dec, gqa),
                                   rewritten, refusal);
      if (failed(decodeCalls)) {
        refuse(decode, decodeName, refusal);
        return failure();
      }
    }

    rewritePrefill(prefill, *pre, layerCapacity);
    if (prefillTypes.inserted.empty())
      updateCallers(prefill, *prefillCalls);
    else
      insertCallResults(prefill, *prefillCalls, prefillTypes.inserted);
    if (decode) {
      rewriteDecode(decode, *dec);
      updateCallers(decode, *decodeCalls);
    }
    return success();
  }

  /// budget=pyramid on a model exported with one function per layer (the
  /// entry points call it once per layer): the layers need different
  /// capacities, so each call of the prefill layer function gets its own
  /// copy (`<name>_layer<l>`), rewritten with its layer's capacity. Decode
  /// does not depend on the capacity: its layer function stays shared and is
  /// rewritten once, with the first copy. The work is done on a copy of the
  /// module, moved in only when every layer was rewritten. Returns false when
  /// the prefill function is called at most once (nothing to copy).
  FailureOr<bool> rewriteLayerCopies(ModuleOp module) {
    auto prefill = module.lookupSymbol<func::FuncOp>(prefillFunc);
    if (!prefill || callsOf(prefill, module).size() < 2)
      return false;
    OwningOpRef<ModuleOp> work = module.clone();
    std::string why;
    SmallVector<std::string> copies;
    if (failed(copyPerCall(*work, prefillFunc, copies, why))) {
      refuse(prefill, prefillFunc,
             Refusal{RefusalKind::LayerCopies, {why}, {}});
      return failure();
    }
    SmallVector<int64_t> all =
        layerCapacities(budget, window, capacity,
                        static_cast<int64_t>(copies.size()), pyramidBeta);
    for (auto [l, name] : llvm::enumerate(copies)) {
      int64_t layerCapacity = all[l];
      auto same = [&](size_t layers) {
        return SmallVector<int64_t>(layers, layerCapacity);
      };
      if (failed(rewritePair(*work, name, l == 0 ? decodeFunc : StringRef(),
                             same)))
        return failure();
      // The copies' capacities assume one attention layer per copy.
      auto copy = work->lookupSymbol<func::FuncOp>(name);
      if (size_t count = llvm::range_size(copy.getOps<SelectOp>());
          count != 1) {
        refuse(prefill, prefillFunc,
               Refusal{RefusalKind::LayerCopies,
                       {"@" + prefillFunc + " holds " + std::to_string(count) +
                        " attention layers, not one"},
                       {}});
        return failure();
      }
    }
    module.getBodyRegion().takeBody(work->getBodyRegion());
    return true;
  }

  /// budget=adaptive with a decode step: prefill returns packed caches and
  /// offsets (snapkv.select_adaptive), and decode, its attention fused,
  /// takes caller-owned ragged buffers that it appends each head's row to
  /// (appendInPlace, ragged): a packed cache has no functional append. The
  /// work is done on a copy of the module, moved in only when all of it
  /// succeeded.
  void rewriteRagged(ModuleOp module) {
    OwningOpRef<ModuleOp> work = module.clone();
    if (failed(rewritePair(*work, prefillFunc, decodeFunc,
                           [&](size_t layers) { return capacities(layers); })))
      return;
    auto decode = work->lookupSymbol<func::FuncOp>(decodeFunc);
    // The entry point that calls the decode layer function, or decode.
    StringRef root = decodeFunc;
    if (SmallVector<func::CallOp> calls = callsOf(decode, *work);
        !calls.empty())
      root = calls.front()->getParentOfType<func::FuncOp>().getSymName();
    fuseAttentions(decode);
    std::string why;
    if (failed(appendInPlace(*work, root, /*ragged=*/true, why))) {
      auto original = module.lookupSymbol<func::FuncOp>(decodeFunc);
      refuse(original, decodeFunc,
             Refusal{RefusalKind::RaggedDecode, {why}, {}});
      return;
    }
    if (failed(verify(*work))) {
      emitError(module.getLoc())
          << "snapkv-compress-kv-cache produced invalid IR (a bug: please "
             "report it with this input)";
      return signalPassFailure();
    }
    module.getBodyRegion().takeBody(work->getBodyRegion());
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // A refusal recorded by an earlier run no longer describes this one.
    module->removeAttr(kRefusalAttrName);
    if (failed(checkOptions()))
      return signalPassFailure();
    if (budget == BudgetPolicy::adaptive && !decodeFunc.empty()) {
      rewriteRagged(module);
      return;
    }
    // Chunked prefill and decode-time compression: the extend function is
    // analysed before anything changes and rewritten after prefill and
    // decode were. A decode capacity other than the chunks' needs its own
    // copy of the extend call chain (`<name>_decode`) whose select keeps M.
    SmallVector<ExtendTarget> targets;
    SmallVector<func::FuncOp> copies;
    // Until the rewrite commits, a refusal leaves the module as it was.
    llvm::scope_exit dropCopies([&] {
      for (func::FuncOp copy : copies)
        copy.erase();
    });
    // The public function of a call chain: what the runner calls.
    auto entryOf = [&](func::FuncOp func) -> std::string {
      llvm::SetVector<func::FuncOp> chain = callChain(func, module);
      auto entries = llvm::make_filter_range(
          chain, [](func::FuncOp f) { return f.isPublic(); });
      if (!llvm::hasSingleElement(entries))
        return std::string();
      func::FuncOp entry = *entries.begin();
      return entry.getSymName().str();
    };
    std::string compressEntry;
    if (extends()) {
      auto extend = module.lookupSymbol<func::FuncOp>(extendFunc);
      if (!extend || extend.isExternal()) {
        refuse(module, extendFunc,
               Refusal{RefusalKind::NoExtendFunction, {}, {}});
        return;
      }
      int64_t decodeCap = decodeCapacity > 0 ? decodeCapacity : capacity;
      targets.push_back({extend, chunk > 0 ? capacity : decodeCap});
      if (decodeInterval > 0 && chunk > 0 && decodeCap != capacity) {
        copies = copyChain(callChain(extend, module).getArrayRef(), "_decode",
                           module);
        targets.push_back({copies.front(), decodeCap});
      }
      if (decodeInterval > 0)
        compressEntry = entryOf(targets.back().func);
      // Without one entry the runner would compress through the chunks'
      // extend, at the wrong capacity.
      if (!copies.empty() && compressEntry.empty()) {
        refuse(extend, extendFunc,
               Refusal{RefusalKind::ExtendEntry,
                       {"@" + extendFunc +
                        " is reached from no public function or from several"},
                       {}});
        return;
      }
      for (ExtendTarget &target : targets) {
        Refusal refusal;
        FailureOr<SmallVector<PrefillLayer>> layers =
            analyseExtend(target.func, refusal);
        FailureOr<CallSites> calls = failure();
        if (succeeded(layers))
          calls = analyseCallers(
              module, target.func,
              prefillChange(
                  *layers, gqa,
                  SmallVector<int64_t>(layers->size(), target.capacity), false),
              {target.func}, refusal);
        if (failed(calls)) {
          refuse(extend, extendFunc, refusal);
          return;
        }
        target.layers = std::move(*layers);
        target.calls = std::move(*calls);
      }
    }
    bool done = false;
    if (budget == BudgetPolicy::pyramid ||
        budget == BudgetPolicy::inverted_pyramid) {
      FailureOr<bool> copied = rewriteLayerCopies(module);
      if (failed(copied))
        return;
      done = *copied;
    }
    if (!done &&
        failed(rewritePair(module, prefillFunc, decodeFunc,
                           [&](size_t layers) { return capacities(layers); })))
      return;
    copies.clear(); // committed
    for (ExtendTarget &target : targets) {
      rewritePrefill(
          target.func, target.layers,
          SmallVector<int64_t>(target.layers.size(), target.capacity),
          chunk > 0 && &target == &targets.front() ? "a prefill chunk"
                                                   : "the generated window");
      updateCallers(target.func, target.calls);
    }
    Builder b(&getContext());
    if (chunk > 0)
      module->setAttr(
          kChunkedPrefillAttrName,
          b.getDictionaryAttr(
              {b.getNamedAttr("chunk", b.getI64IntegerAttr(chunk)),
               b.getNamedAttr("window", b.getI64IntegerAttr(window)),
               b.getNamedAttr("function", b.getStringAttr(extendFunc))}));
    if (decodeInterval > 0) {
      ExtendTarget &compress = targets.back();
      SmallVector<NamedAttribute> fields = {
          b.getNamedAttr("interval", b.getI64IntegerAttr(decodeInterval)),
          b.getNamedAttr("window", b.getI64IntegerAttr(window)),
          b.getNamedAttr("capacity", b.getI64IntegerAttr(compress.capacity)),
          b.getNamedAttr("function",
                         b.getStringAttr(compress.func.getSymName()))};
      if (!compressEntry.empty())
        fields.push_back(
            b.getNamedAttr("entry", b.getStringAttr(compressEntry)));
      module->setAttr(kDecodeCompressionAttrName, b.getDictionaryAttr(fields));
    }
    if (failed(verify(module))) {
      emitError(module.getLoc())
          << "snapkv-compress-kv-cache produced invalid IR (a bug: please "
             "report it with this input)";
      return signalPassFailure();
    }
  }
};

} // namespace
