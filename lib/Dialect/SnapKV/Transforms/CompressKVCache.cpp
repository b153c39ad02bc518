//===- CompressKVCache.cpp - SnapKV model rewrite -------------------------===//
//
// Analyse prefill and decode completely, then rewrite: a refusal never leaves
// a half-rewritten module behind.
//
//===----------------------------------------------------------------------===//

#include "../IR/DecompositionUtils.h"
#include "KVCacheAnalysis.h"
#include "SignatureRewrite.h"

#include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.h"
#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Verifier.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::snapkv {
#define GEN_PASS_DEF_COMPRESSKVCACHE
#include "snapkv/Dialect/SnapKV/Transforms/Passes.h.inc"
} // namespace mlir::snapkv

using namespace mlir;
using namespace mlir::snapkv;
using namespace mlir::snapkv::detail;

namespace {

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

/// Returns `extra[i]` right after the i-th operand of `ret`, for each i in
/// `extra` (new results that follow the result they belong with).
void returnAfter(func::ReturnOp ret,
                 const llvm::SmallDenseMap<unsigned, Value> &extra) {
  SmallVector<Value> operands;
  for (auto [i, operand] : llvm::enumerate(ret.getOperands())) {
    operands.push_back(operand);
    if (Value value = extra.lookup(i))
      operands.push_back(value);
  }
  ret->setOperands(operands);
}

/// An extend function to rewrite: a prompt chunk's (chunked prefill) or
/// the generated window's (decode-time compression), with the capacity its
/// select keeps.
struct ExtendTarget {
  func::FuncOp func;
  int64_t capacity;
  /// What its selects rank by: the pass's scoring, or staging-scoring for
  /// the staged chunks of a two-level chunked prefill.
  Scoring scoring;
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
    else if (block != 1 &&
             (scoring == Scoring::recent || scoring == Scoring::random ||
              scoring == Scoring::keydiff))
      bad = "block sums pooled votes: it needs a scoring that votes (votes, "
            "prefix_votes, sum or norm_sum)";
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
    else if (kvDtype == KVCacheType::i8 &&
             (extends() || budget == BudgetPolicy::adaptive))
      bad = std::string("kv-dtype=i8 is not available with ") +
            (chunk > 0            ? "chunk"
             : decodeInterval > 0 ? "decode-interval"
                                  : "budget=adaptive") +
            " (the extend function and the ragged cache take the model's "
            "element type)";
    else if (staging != 0 && chunk == 0)
      bad = "staging is the capacity chunks are compacted to before the last "
            "one: it needs chunk";
    else if (staging != 0 && staging < capacity)
      bad = "staging (" + std::to_string(staging) +
            ") must be at least capacity (" + std::to_string(capacity) +
            "): the staged rows are what the final selection chooses from";
    else if (stagingCarry && staging == 0)
      bad = "staging-carry carries the staged rows' scores: it needs staging";
    else if (stagingCarry && !isAccumulated(stagingScoring))
      bad = "staging-carry adds up accumulated attention: it needs "
            "staging-scoring sum or norm_sum";
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

  /// `how`: what the selects rank by (the pass's scoring by default); the
  /// accumulated scorings read all the queries, the others the window's.
  void rewritePrefill(func::FuncOp func, ArrayRef<PrefillLayer> layers,
                      ArrayRef<int64_t> layerCapacity,
                      StringRef what = "the prompt",
                      std::optional<Scoring> how = std::nullopt) {
    Scoring scoring = how.value_or(this->scoring);
    bool accumulated = isAccumulated(scoring);
    // Blocks are the final selection's; a staged select keeps positions.
    int64_t block = how ? 1 : static_cast<int64_t>(this->block);
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
      Value queries =
          accumulated ? m.queries
                      : tensor::ExtractSliceOp::create(b, loc, m.queries,
                                                       offsets, sizes, strides)
                            .getResult();
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
      Value keys = select.getSelectedKeys(),
            values = select.getSelectedValues();
      // The select votes with the unquantized K/V; only the kept rows are
      // quantized (per row, so the same as gathering quantized rows).
      if (kvDtype == KVCacheType::i8) {
        keys = quantizeRows(b, loc, keys);
        values = quantizeRows(b, loc, values);
      }
      ret->setOperand(layer.keyResult, keys);
      ret->setOperand(layer.valueResult, values);
    }
    // Each layer's offsets follow its values (prefillChange's `inserted`).
    returnAfter(ret, layerOffsets);
    updateSignature(func);
  }

  /// staging-carry: the scores that go in after each layer's value cache
  /// and come out after its values, `[B, Hc, rows] x f32`.
  void addCarriedScores(ArrayRef<PrefillLayer> layers,
                        SignatureChange &change) {
    for (const PrefillLayer &layer : layers) {
      const AttentionMatch &m = layer.attention;
      auto type = RankedTensorType::get(
          {m.batch, gqa == GqaPolicy::expand ? m.queryHeads : m.kvHeads,
           ShapedType::kDynamic},
          Float32Type::get(&getContext()));
      change.insertedArgs.push_back({layer.valueCache.getArgNumber(), type});
      change.inserted.push_back({layer.valueResult, type});
    }
  }

  /// staging-carry (docs/semantics.md, "Carried scores"): each layer of the
  /// staged extend function takes its cache rows' carried scores (a new
  /// argument after its value cache), adds the chunk's accumulated votes
  /// (`snapkv.score` with window 1 and kernel 1: every row but the last
  /// gets them; the last enters at 0), keeps the top `capacity - window` of
  /// the prefix by that sum plus the window (snapkv.top_positions; every
  /// row when the concatenation is shorter than `capacity`), and returns
  /// the kept rows' sums after its values. Not pooled: the staged rows are
  /// not adjacent positions.
  void rewriteCarried(func::FuncOp func, ArrayRef<PrefillLayer> layers,
                      int64_t capacity, Scoring scoring) {
    func::ReturnOp ret = soleReturn(func);
    MLIRContext *ctx = &getContext();
    OpBuilder b(ret);
    Type f32 = b.getF32Type();
    llvm::SmallDenseMap<unsigned, Value> carriedOut;
    for (auto [index, layer] : llvm::enumerate(layers)) {
      const AttentionMatch &m = layer.attention;
      Location loc = m.root()->getLoc();
      Value keys = m.keys.source, values = m.values.source;
      auto rowsType = cast<RankedTensorType>(keys.getType());
      int64_t heads = gqa == GqaPolicy::expand ? m.queryHeads : m.kvHeads;
      auto scoresType =
          RankedTensorType::get({m.batch, heads, ShapedType::kDynamic}, f32);
      unsigned at = layer.valueCache.getArgNumber() + 1;
      (void)func.insertArgument(at, scoresType, {}, loc);
      Value carried = func.getArgument(at);
      OpFoldResult length = snapkv::detail::promptLength(
          b, loc, keys, values, window, "snapkv: a staged chunk", 1,
          "prompt length (keys dim 2) must be below 2^31 - 1");
      // The carried scores belong to the cache rows, the first rows of keys.
      Value rows = tensor::DimOp::create(b, loc, carried, 2);
      Value cached = tensor::DimOp::create(b, loc, layer.valueCache, 2);
      cf::AssertOp::create(
          b, loc,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rows, cached),
          "snapkv: layer " + std::to_string(index) +
              "'s carried scores do not hold one score per cache row");
      Value l = getValueOrCreateConstantIndexOp(b, loc, length);
      Value one = arith::ConstantIndexOp::create(b, loc, 1);
      ScoreOp score = snapkv::detail::createScore(
          b, loc, m.queries, keys, length, b.getI64IntegerAttr(1),
          b.getI64IntegerAttr(1), PoolingKindAttr::get(ctx, PoolingKind::avg),
          GqaPolicyAttr::get(ctx, gqa), b.getF32FloatAttr(m.scale), scoring);
      Value zero = arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.0f));
      auto padTo = [&](Value scores, Value high) {
        SmallVector<OpFoldResult> low(3, b.getIndexAttr(0));
        SmallVector<OpFoldResult> highs = {b.getIndexAttr(0), b.getIndexAttr(0),
                                           high};
        return tensor::PadOp::create(b, loc, scoresType, scores, low, highs,
                                     zero)
            .getResult();
      };
      // Both over all `length` rows: the votes miss the last row, the
      // carried scores the chunk's rows.
      Value votes = padTo(score.getVotes(), one);
      Value before = padTo(carried, arith::SubIOp::create(b, loc, l, rows));
      Value init = tensor::EmptyOp::create(b, loc, scoresType, ValueRange{l});
      Value total = linalg::AddOp::create(b, loc, ValueRange{votes, before},
                                          ValueRange{init})
                        .getResult(0);
      // [B, Hc, length, 1]: gathered like the K/V rows.
      auto columnType =
          RankedTensorType::get({m.batch, heads, ShapedType::kDynamic, 1}, f32);
      Value column = tensor::ExpandShapeOp::create(
          b, loc, columnType, total,
          SmallVector<ReassociationIndices>{{0}, {1}, {2, 3}});
      auto keptType = RankedTensorType::get(
          {m.batch, heads, ShapedType::kDynamic, rowsType.getDimSize(3)},
          rowsType.getElementType());
      auto gathered = [&](Value indices,
                          OpFoldResult slots) -> SmallVector<Value> {
        SmallVector<Value> out;
        for (auto [source, cols] : {std::pair(keys, rowsType.getDimSize(3)),
                                    std::pair(values, rowsType.getDimSize(3)),
                                    std::pair(column, int64_t(1))}) {
          SmallVector<OpFoldResult> shape = {b.getIndexAttr(m.batch),
                                             b.getIndexAttr(heads), slots,
                                             b.getIndexAttr(cols)};
          Type elem = cast<RankedTensorType>(source.getType()).getElementType();
          Value empty = tensor::EmptyOp::create(b, loc, shape, elem);
          out.push_back(GatherOp::create(b, loc, empty.getType(), source,
                                         indices, empty));
        }
        out.back() = tensor::CollapseShapeOp::create(
            b, loc, out.back(),
            SmallVector<ReassociationIndices>{{0}, {1}, {2, 3}});
        return out;
      };
      SmallVector<Value> kept = snapkv::detail::bypassOrSelect(
          b, loc, TypeRange{keptType, keptType, scoresType}, length, capacity,
          [&](OpFoldResult all) {
            auto type = RankedTensorType::get(
                {m.batch, heads, ShapedType::kDynamic}, b.getI64Type());
            Value every = tensor::GenerateOp::create(
                b, loc, type,
                ValueRange{getValueOrCreateConstantIndexOp(b, loc, all)},
                [](OpBuilder &nb, Location nl, ValueRange ivs) {
                  tensor::YieldOp::create(nb, nl,
                                          arith::IndexCastOp::create(
                                              nb, nl, nb.getI64Type(), ivs[2])
                                              .getResult());
                });
            return gathered(every, all);
          },
          [&](OpFoldResult) {
            // The prefix's sums rank; the window is kept after them.
            Value prefix = arith::SubIOp::create(
                b, loc, l, arith::ConstantIndexOp::create(b, loc, window));
            Value ranked = tensor::ExtractSliceOp::create(
                b, loc, total, SmallVector<OpFoldResult>(3, b.getIndexAttr(0)),
                SmallVector<OpFoldResult>{b.getIndexAttr(m.batch),
                                          b.getIndexAttr(heads), prefix},
                SmallVector<OpFoldResult>(3, b.getIndexAttr(1)));
            Value empty = tensor::EmptyOp::create(
                b, loc, ArrayRef<int64_t>{m.batch, heads, capacity},
                b.getI64Type());
            auto top = TopPositionsOp::create(
                b, loc, empty.getType(), ranked, empty,
                b.getI64IntegerAttr(window), b.getI64IntegerAttr(capacity),
                OrderAttr::get(ctx, order));
            return gathered(top.getResult(), b.getIndexAttr(capacity));
          });
      ret->setOperand(layer.keyResult, kept[0]);
      ret->setOperand(layer.valueResult, kept[1]);
      carriedOut[layer.valueResult] = kept[2];
    }
    // Each layer's scores follow its values (addCarriedScores' `inserted`).
    returnAfter(ret, carriedOut);
    eraseDeadOps(func);
    updateSignature(func);
  }

  /// Returns the new append (of the expanded cache and the repeated row).
  tensor::ConcatOp expandCache(OpBuilder &b, BlockArgument cache,
                               tensor::ConcatOp append, RepeatedKV kv,
                               int64_t queryHeads) {
    auto type = cast<RankedTensorType>(cache.getType());
    int64_t group = queryHeads / type.getDimSize(1);
    cache.setType(
        RankedTensorType::get({type.getDimSize(0), queryHeads,
                               type.getDimSize(2), type.getDimSize(3)},
                              type.getElementType()));
    b.setInsertionPoint(append);
    Location loc = append.getLoc();
    Value token = repeatHeads(b, loc, append.getInputs()[1], group);
    auto appended =
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
    return appended;
  }

  /// kv-dtype=i8: `cache` holds packed rows; the new row is quantized and
  /// appended, the append is returned, and what read it reads its rows
  /// dequantized.
  void quantizeCache(OpBuilder &b, BlockArgument cache,
                     tensor::ConcatOp append) {
    auto type = cast<RankedTensorType>(cache.getType());
    cache.setType(quantizedType(type));
    b.setInsertionPoint(append);
    Location loc = append.getLoc();
    Value row = quantizeRows(b, loc, append.getInputs()[1]);
    Value appended =
        tensor::ConcatOp::create(b, loc, 2, ValueRange{cache, row});
    Value read = dequantizeRows(b, loc, appended, type.getElementType());
    append.getResult().replaceUsesWithIf(appended, [](OpOperand &use) {
      return isa<func::ReturnOp>(use.getOwner());
    });
    append.getResult().replaceAllUsesWith(read);
  }

  void rewriteDecode(func::FuncOp func, ArrayRef<DecodeLayer> layers) {
    OpBuilder b(func.getContext());
    for (const DecodeLayer &layer : layers) {
      AttentionMatch m = layer.attention;
      tensor::ConcatOp keyAppend = layer.keyAppend,
                       valueAppend = layer.valueAppend;
      if (gqa == GqaPolicy::expand && m.queryHeads != m.kvHeads) {
        keyAppend =
            expandCache(b, layer.keyCache, keyAppend, m.keys, m.queryHeads);
        valueAppend = expandCache(b, layer.valueCache, valueAppend, m.values,
                                  m.queryHeads);
      }
      if (kvDtype == KVCacheType::i8) {
        quantizeCache(b, layer.keyCache, keyAppend);
        quantizeCache(b, layer.valueCache, valueAppend);
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
        *pre, gqa, layerCapacity, budget == BudgetPolicy::adaptive, kvDtype);
    FailureOr<CallSites> prefillCalls =
        analyseCallers(module, prefill, prefillTypes, rewritten, refusal);
    if (failed(prefillCalls)) {
      refuse(prefill, prefillName, refusal);
      return failure();
    }
    FailureOr<CallSites> decodeCalls = CallSites{};
    if (decode) {
      decodeCalls = analyseCallers(
          module, decode, decodeChange(*dec, gqa, kvDtype), rewritten, refusal);
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
    SmallVector<ExtendTarget, 3> targets;
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
    std::string compressEntry, stagingEntry;
    // Indices into `targets`: the staged chunks' (if any) and decode-time
    // compression's (0, the chunks' own extend, unless it has a copy).
    std::optional<size_t> stagingTarget;
    size_t compressTarget = 0;
    if (extends()) {
      auto extend = module.lookupSymbol<func::FuncOp>(extendFunc);
      if (!extend || extend.isExternal()) {
        refuse(module, extendFunc,
               Refusal{RefusalKind::NoExtendFunction, {}, {}});
        return;
      }
      int64_t decodeCap = decodeCapacity > 0 ? decodeCapacity : capacity;
      targets.push_back({extend, chunk > 0 ? capacity : decodeCap, scoring});
      // Two-level chunked prefill: the chunks before the last compact to
      // `staging` through their own copy of the chain.
      if (staging > 0) {
        SmallVector<func::FuncOp> staged = copyChain(
            callChain(extend, module).getArrayRef(), "_stage", module);
        copies.append(staged.begin(), staged.end());
        stagingTarget = targets.size();
        targets.push_back({staged.front(), staging, stagingScoring});
        stagingEntry = entryOf(staged.front());
        if (stagingEntry.empty()) {
          refuse(extend, extendFunc,
                 Refusal{RefusalKind::StagingEntry,
                         {"@" + extendFunc +
                          " is reached from no public "
                          "function or from several"},
                         {}});
          return;
        }
      }
      compressTarget = 0;
      if (decodeInterval > 0 && chunk > 0 && decodeCap != capacity) {
        SmallVector<func::FuncOp> decodeCopies = copyChain(
            callChain(extend, module).getArrayRef(), "_decode", module);
        copies.append(decodeCopies.begin(), decodeCopies.end());
        compressTarget = targets.size();
        targets.push_back({decodeCopies.front(), decodeCap, scoring});
      }
      if (decodeInterval > 0)
        compressEntry = entryOf(targets[compressTarget].func);
      // Without one entry the runner would compress through the chunks'
      // extend, at the wrong capacity.
      if (compressTarget != 0 && compressEntry.empty()) {
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
        if (succeeded(layers)) {
          SignatureChange change = prefillChange(
              *layers, gqa,
              SmallVector<int64_t>(layers->size(), target.capacity), false);
          if (stagingCarry && &target == &targets[*stagingTarget])
            addCarriedScores(*layers, change);
          calls = analyseCallers(module, target.func, change, {target.func},
                                 refusal);
        }
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
    for (auto [i, target] : llvm::enumerate(targets)) {
      if (stagingCarry && i == stagingTarget) {
        SignatureChange carriedScores;
        addCarriedScores(target.layers, carriedScores);
        rewriteCarried(target.func, target.layers, target.capacity,
                       target.scoring);
        insertCallArguments(target.func, target.calls,
                            carriedScores.insertedArgs);
        // The calls' operands now line up with the callee's arguments; the
        // results are re-made (the calls replaced) last.
        updateCallers(target.func, target.calls);
        insertCallResults(target.func, target.calls, carriedScores.inserted);
        continue;
      }
      bool chunks = chunk > 0 && (i == 0 || i == stagingTarget);
      rewritePrefill(
          target.func, target.layers,
          SmallVector<int64_t>(target.layers.size(), target.capacity),
          chunks ? "a prefill chunk" : "the generated window",
          i == stagingTarget ? std::optional<Scoring>(target.scoring)
                             : std::nullopt);
      updateCallers(target.func, target.calls);
    }
    Builder b(&getContext());
    if (kvDtype == KVCacheType::i8)
      module->setAttr(kKVCacheAttrName,
                      b.getDictionaryAttr(
                          {b.getNamedAttr("dtype", b.getStringAttr("i8")),
                           b.getNamedAttr("scale", b.getStringAttr("f32"))}));
    if (chunk > 0) {
      SmallVector<NamedAttribute> fields = {
          b.getNamedAttr("chunk", b.getI64IntegerAttr(chunk)),
          b.getNamedAttr("window", b.getI64IntegerAttr(window)),
          b.getNamedAttr("function", b.getStringAttr(extendFunc))};
      if (staging > 0) {
        fields.push_back(
            b.getNamedAttr("staging", b.getI64IntegerAttr(staging)));
        fields.push_back(b.getNamedAttr(
            "staging_function",
            b.getStringAttr(targets[*stagingTarget].func.getSymName())));
        fields.push_back(
            b.getNamedAttr("staging_entry", b.getStringAttr(stagingEntry)));
        // The staged entry point takes and returns each layer's scores
        // after its values.
        if (stagingCarry)
          fields.push_back(b.getNamedAttr("staging_carry", b.getUnitAttr()));
      }
      module->setAttr(kChunkedPrefillAttrName, b.getDictionaryAttr(fields));
    }
    if (decodeInterval > 0) {
      ExtendTarget &compress = targets[compressTarget];
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
