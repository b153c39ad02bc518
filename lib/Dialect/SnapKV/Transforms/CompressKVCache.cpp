//===- CompressKVCache.cpp - SnapKV model rewrite --------------------------===//
//
// Analyse prefill and decode completely, then rewrite: a refusal never leaves
// a half-rewritten module behind.
//
//===----------------------------------------------------------------------===//

#include "snapkv/Dialect/SnapKV/Transforms/AttentionMatcher.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/SetVector.h"

#include <cmath>

namespace mlir::snapkv {
#define GEN_PASS_DEF_COMPRESSKVCACHE
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;

namespace {

/// Why a function cannot be rewritten.
struct Refusal {
  std::string reason;
};

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
  llvm::DenseMap<Operation *, std::string> failures;
  llvm::DenseSet<Operation *> covered;
  for (linalg::BatchMatmulOp matmul : matmuls) {
    std::string why;
    if (std::optional<AttentionMatch> m = matchAttention(matmul, why)) {
      covered.insert(m->scoresMatmul);
      covered.insert(m->outputMatmul);
      found.push_back(*m);
    } else {
      failures[matmul] = why;
    }
  }
  // Report the uncovered batch_matmul that got furthest: one whose left
  // operand is a softmax (a P.V candidate) says more than a Q.K^T product
  // that was only tried as P.V.
  linalg::BatchMatmulOp worst;
  for (linalg::BatchMatmulOp matmul : matmuls) {
    if (covered.contains(matmul))
      continue;
    bool pastSoftmax = !StringRef(failures[matmul]).starts_with("attention probabilities") &&
                       !StringRef(failures[matmul]).starts_with("the left operand");
    if (!worst || pastSoftmax) {
      worst = matmul;
      if (pastSoftmax)
        break;
    }
  }
  if (worst) {
    refusal.reason = describe(worst.getOperation()) +
                     " is not part of a recognised attention: " +
                     failures[worst];
    return failure();
  }
  if (found.empty()) {
    refusal.reason = "no attention (Q.K^T, scale, mask, softmax, P.V) found";
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
      if (!sources.insert(source).second) {
        refusal.reason = "layer " + std::to_string(layer) +
                         ": its keys or values are also read by another "
                         "attention (or serve as both keys and values)";
        return failure();
      }
    }
    Type element =
        cast<RankedTensorType>(m.keys.source.getType()).getElementType();
    if (!element.isF32() && !element.isF16() && !element.isBF16()) {
      refusal.reason = "layer " + std::to_string(layer) +
                       ": element type is not f32, f16 or bf16";
      return failure();
    }
  }
  return success();
}

/// The attentions of a single-block function that ends in func.return.
FailureOr<SmallVector<AttentionMatch>>
findLayers(func::FuncOp func, func::ReturnOp &ret, Refusal &refusal) {
  ret = soleReturn(func);
  if (!ret) {
    refusal.reason = "the function does not have a single block ending in "
                     "func.return";
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
  for (auto [layer, m] : llvm::enumerate(*attentions)) {
    std::string prefix = "layer " + std::to_string(layer) + ": ";
    std::string why;
    std::optional<CausalMask> mask = matchCausalMask(m, why);
    if (!mask) {
      refusal.reason = prefix + why;
      return failure();
    }
    Value keyRows = mask->keyPositions, queryRows = mask->queryPositions;
    while (auto e = keyRows.getDefiningOp<tensor::ExpandShapeOp>())
      keyRows = e.getSrc();
    while (auto e = queryRows.getDefiningOp<tensor::ExpandShapeOp>())
      queryRows = e.getSrc();
    if (!mask->queryIsRow || keyRows != queryRows) {
      refusal.reason = prefix + "the mask does not compare the prompt's "
                                "positions with themselves (not causal "
                                "self-attention over the prompt)";
      return failure();
    }
    auto qType = cast<RankedTensorType>(m.queries.getType());
    if (!qType.isDynamicDim(2) && qType.getDimSize(2) < window) {
      refusal.reason = prefix + "the prompt has " +
                       std::to_string(qType.getDimSize(2)) +
                       " positions, fewer than window=" +
                       std::to_string(window);
      return failure();
    }
    std::optional<unsigned> k = resultIndex(ret, m.keys.source);
    std::optional<unsigned> v = resultIndex(ret, m.values.source);
    if (!k || !v) {
      refusal.reason = prefix + "the " + (k ? "values" : "keys") +
                       " this attention reads are not returned exactly once "
                       "(K/V must reach a result of the function to be "
                       "cached)";
      return failure();
    }
    layers.push_back({m, *k, *v});
  }
  return layers;
}

/// The cache argument and appended token of `append = concat(cache, new)`.
LogicalResult matchAppend(Value source, func::ReturnOp ret,
                          tensor::ConcatOp &append, BlockArgument &cache,
                          unsigned &result, Refusal &refusal) {
  append = source.getDefiningOp<tensor::ConcatOp>();
  if (!append || append.getDim() != 2 || append.getInputs().size() != 2) {
    refusal.reason = "the keys/values attention reads are not "
                     "concat(cache argument, new token) along the sequence";
    return failure();
  }
  cache = dyn_cast<BlockArgument>(append.getInputs()[0]);
  if (!cache || cache.getOwner()->getParentOp() != ret->getParentOp()) {
    refusal.reason = "the first operand of the cache append is not a "
                     "function argument";
    return failure();
  }
  auto token = cast<RankedTensorType>(append.getInputs()[1].getType());
  if (!token.hasStaticShape() || token.getDimSize(2) != 1) {
    refusal.reason = "the token appended to the cache is not one static row";
    return failure();
  }
  std::optional<unsigned> index = resultIndex(ret, append.getResult());
  if (!index) {
    refusal.reason = "the appended cache " + describe(cache) +
                     " is not returned exactly once";
    return failure();
  }
  result = *index;
  for (Operation *user : cache.getUsers()) {
    if (user != append && !isa<tensor::DimOp>(user)) {
      refusal.reason = "cache argument " + describe(cache) +
                       " has a use other than the append and tensor.dim (" +
                       user->getName().getStringRef().str() + ")";
      return failure();
    }
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
    refusal.reason = "the appended cache has a use other than the return and "
                     "the GQA repeat (" +
                     user->getName().getStringRef().str() + ")";
    return failure();
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
    generic.getBody()->walk([&](Operation *op) {
      trig |= isa<math::CosOp, math::SinOp>(op);
    });
    if (trig)
      tables.push_back(generic);
  });
  if (tables.empty()) {
    refusal.reason = "no RoPE tables (generics computing math.cos/math.sin) "
                     "found, so the logical position cannot be checked";
    return failure();
  }
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
    if (caches.contains(arg)) {
      refusal.reason = "the RoPE position is computed from cache argument " +
                       describe(arg) +
                       " (its physical length), not from the logical "
                       "position argument";
      return failure();
    }
    fromPositionArgument = true;
  }
  if (!fromPositionArgument) {
    refusal.reason = "the RoPE position does not come from a function "
                     "argument (it must be the logical position)";
    return failure();
  }
  return success();
}

FailureOr<SmallVector<DecodeLayer>> analyseDecode(func::FuncOp func,
                                                  Refusal &refusal) {
  func::ReturnOp ret;
  FailureOr<SmallVector<AttentionMatch>> attentions =
      findLayers(func, ret, refusal);
  if (failed(attentions))
    return failure();
  SmallVector<DecodeLayer> layers;
  llvm::DenseSet<Value> caches;
  for (auto [layer, m] : llvm::enumerate(*attentions)) {
    std::string prefix = "layer " + std::to_string(layer) + ": ";
    DecodeLayer d;
    d.attention = m;
    if (failed(matchAppend(m.keys.source, ret, d.keyAppend, d.keyCache,
                           d.keyResult, refusal)) ||
        failed(matchAppend(m.values.source, ret, d.valueAppend, d.valueCache,
                           d.valueResult, refusal)) ||
        failed(checkAppendUses(d.keyAppend, m.keys, refusal)) ||
        failed(checkAppendUses(d.valueAppend, m.values, refusal))) {
      refusal.reason = prefix + refusal.reason;
      return failure();
    }
    caches.insert(d.keyCache);
    caches.insert(d.valueCache);
    layers.push_back(d);
  }
  for (auto [layer, d] : llvm::enumerate(layers)) {
    std::string prefix = "layer " + std::to_string(layer) + ": ";
    const AttentionMatch &m = d.attention;
    auto qType = cast<RankedTensorType>(m.queries.getType());
    if (qType.getDimSize(2) != 1) {
      refusal.reason = prefix + "decode attention has more than one query row";
      return failure();
    }
    std::string why;
    std::optional<CausalMask> mask = matchCausalMask(m, why);
    if (!mask) {
      refusal.reason = prefix + why;
      return failure();
    }
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
    if (!atEnd) {
      refusal.reason = prefix + "the mask's query position is not the cache "
                                "length or the position argument, so the "
                                "mask cannot be rebuilt for logical positions";
      return failure();
    }
  }
  if (failed(checkRopePositions(func, caches, refusal)))
    return failure();
  return layers;
}

/// Prefill results and decode arguments/results must line up layer by layer.
LogicalResult checkCorrespondence(func::FuncOp prefill, func::FuncOp decode,
                                  ArrayRef<PrefillLayer> pre,
                                  ArrayRef<DecodeLayer> dec, Refusal &refusal) {
  if (pre.size() != dec.size()) {
    refusal.reason = "@" + prefill.getName().str() + " has " +
                     std::to_string(pre.size()) + " attention layers but @" +
                     decode.getName().str() + " has " +
                     std::to_string(dec.size());
    return failure();
  }
  unsigned firstResult = ~0u, firstArg = ~0u;
  for (const DecodeLayer &d : dec)
    firstArg = std::min({firstArg, d.keyCache.getArgNumber(),
                         d.valueCache.getArgNumber()});
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
    if (!sameResults || !sameArgs || !sameShape) {
      refusal.reason = "layer " + std::to_string(layer) +
                       ": the cache arguments and results of @" +
                       decode.getName().str() +
                       " do not line up with the K/V results of @" +
                       prefill.getName().str();
      return failure();
    }
  }
  return success();
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

struct CompressKVCachePass
    : snapkv::impl::CompressKVCacheBase<CompressKVCachePass> {
  using Base::Base;

  PoolingKind poolingKind;
  GqaPolicy gqaPolicy;
  Order orderKind;

  LogicalResult parseOptions() {
    ModuleOp module = getOperation();
    auto p = symbolizePoolingKind(pooling);
    auto g = symbolizeGqaPolicy(gqa);
    auto o = symbolizeOrder(order);
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
    else if (!p)
      bad = "pooling must be avg or max (got '" + pooling + "')";
    else if (!g)
      bad = "gqa must be expand, mean or max (got '" + gqa + "')";
    else if (!o)
      bad = "order must be position or score (got '" + order + "')";
    else if (prefillFunc.empty())
      bad = "prefill-func must name a function";
    // At a location, not on the module op, which mlir-opt would print whole.
    if (!bad.empty())
      return emitError(module.getLoc()) << "snapkv-compress-kv-cache: " << bad;
    poolingKind = *p;
    gqaPolicy = *g;
    orderKind = *o;
    return success();
  }

  /// Leaves the module unchanged and says why.
  void refuse(Operation *where, StringRef function, const Refusal &refusal) {
    // Diagnose at the location only: printing a whole model function as the
    // "current operation" would bury the reason.
    auto diag = strict ? mlir::emitError(where->getLoc())
                       : mlir::emitWarning(where->getLoc());
    diag << "snapkv-compress-kv-cache left the module unchanged: @" << function
         << ": " << refusal.reason;
    if (strict)
      signalPassFailure();
  }

  void rewritePrefill(func::FuncOp func, ArrayRef<PrefillLayer> layers) {
    func::ReturnOp ret = soleReturn(func);
    OpBuilder b(ret);
    for (const PrefillLayer &layer : layers) {
      AttentionMatch m = layer.attention;
      Location loc = m.scoresMatmul.getLoc();
      auto qType = cast<RankedTensorType>(m.queries.getType());
      OpFoldResult start;
      if (qType.isDynamicDim(2)) {
        // A prompt shorter than the window would slice out of bounds.
        Value length = tensor::DimOp::create(b, loc, m.queries, 2);
        Value w = arith::ConstantIndexOp::create(b, loc, window);
        Value enough = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::sge, length, w);
        cf::AssertOp::create(
            b, loc, enough,
            "snapkv: the prompt is shorter than the observation window");
        start = arith::SubIOp::create(b, loc, length, w).getResult();
      } else {
        start = b.getIndexAttr(qType.getDimSize(2) - window);
      }
      SmallVector<OpFoldResult> offsets{b.getIndexAttr(0), b.getIndexAttr(0),
                                        start, b.getIndexAttr(0)};
      SmallVector<OpFoldResult> sizes{b.getIndexAttr(m.batch),
                                      b.getIndexAttr(m.queryHeads),
                                      b.getIndexAttr(window),
                                      b.getIndexAttr(m.headDim)};
      SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
      Value queries = tensor::ExtractSliceOp::create(b, loc, m.queries, offsets,
                                                     sizes, strides);
      // The select's default scale is 1/sqrt(D); spell it out only when the
      // model scales differently.
      FloatAttr scale;
      auto defaultScale =
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(m.headDim)));
      if (static_cast<float>(m.scale) != defaultScale)
        scale = b.getF32FloatAttr(static_cast<float>(m.scale));
      auto select = SelectOp::create(b, loc, queries, m.keys.source,
                                     m.values.source, window, capacity,
                                     kernelSize, poolingKind, gqaPolicy,
                                     orderKind, scale);
      ret->setOperand(layer.keyResult, select.getSelectedKeys());
      ret->setOperand(layer.valueResult, select.getSelectedValues());
    }
    updateSignature(func);
  }

  void expandCache(OpBuilder &b, BlockArgument cache, tensor::ConcatOp append,
                   RepeatedKV kv, int64_t queryHeads) {
    auto type = cast<RankedTensorType>(cache.getType());
    int64_t group = queryHeads / type.getDimSize(1);
    cache.setType(RankedTensorType::get(
        {type.getDimSize(0), queryHeads, type.getDimSize(2), type.getDimSize(3)},
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
      if (gqaPolicy == GqaPolicy::expand && m.queryHeads != m.kvHeads) {
        expandCache(b, layer.keyCache, layer.keyAppend, m.keys, m.queryHeads);
        expandCache(b, layer.valueCache, layer.valueAppend, m.values,
                    m.queryHeads);
      }
      // Logical mask: the new token sees every cached key (see Passes.td).
      m.maskAdd.getResult(0).replaceAllUsesWith(m.maskAdd.getDpsInputs()[0]);
    }
    eraseDeadOps(func);
    updateSignature(func);
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (failed(parseOptions()))
      return signalPassFailure();

    auto prefill = module.lookupSymbol<func::FuncOp>(prefillFunc);
    if (!prefill || prefill.isExternal())
      return refuse(module, prefillFunc,
                    {"no function with a body by this name (prefill-func)"});
    Refusal refusal;
    FailureOr<SmallVector<PrefillLayer>> pre =
        analysePrefill(prefill, window, refusal);
    if (failed(pre))
      return refuse(prefill, prefillFunc, refusal);

    func::FuncOp decode;
    FailureOr<SmallVector<DecodeLayer>> dec;
    if (!decodeFunc.empty()) {
      decode = module.lookupSymbol<func::FuncOp>(decodeFunc);
      if (!decode || decode.isExternal())
        return refuse(module, decodeFunc,
                      {"no function with a body by this name (decode-func; "
                       "pass decode-func=\"\" to rewrite prefill only)"});
      dec = analyseDecode(decode, refusal);
      if (failed(dec))
        return refuse(decode, decodeFunc, refusal);
      if (failed(checkCorrespondence(prefill, decode, *pre, *dec, refusal)))
        return refuse(decode, decodeFunc, refusal);
    }

    rewritePrefill(prefill, *pre);
    if (decode)
      rewriteDecode(decode, *dec);
    if (failed(verify(module))) {
      emitError(module.getLoc())
          << "snapkv-compress-kv-cache produced invalid IR (a bug: please "
             "report it with this input)";
      return signalPassFailure();
    }
  }
};

} // namespace
