//===- KVCacheAnalysis.cpp - what snapkv-compress-kv-cache matches --------===//
//
// Finds the attention layers of prefill, decode and extend functions and
// checks every condition of the rewrite before anything changes: a refusal
// never leaves a half-rewritten module behind.
//
//===----------------------------------------------------------------------===//

#include "KVCacheAnalysis.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

namespace mlir::snapkv::detail {

std::string Refusal::message() const {
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

/// Sets `refusal` and fails.
LogicalResult refuseWith(Refusal &refusal, RefusalKind kind,
                         SmallVector<std::string, 4> args,
                         std::optional<unsigned> layer) {
  refusal = Refusal{kind, std::move(args), layer};
  return failure();
}

/// A refusal for a mask the matcher did not accept.
LogicalResult refuseMask(Refusal &refusal, MaskMismatch kind, unsigned layer) {
  return refuseWith(refusal, RefusalKind::Mask,
                    {maskMismatchMessage(kind).str()}, layer);
}

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
      (void)refuseWith(refusal, RefusalKind::UnrecognisedSdpa,
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
    layers.push_back({m, d.keyResult, d.valueResult, d.keyCache, d.valueCache});
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

} // namespace mlir::snapkv::detail
