//===- AttentionMatcher.h - find decomposed attention in imported IR -----===//
//
// Recognises the attention that torch-mlir's FX importer emits for a
// HuggingFace Llama-family layer (docs/model-ir.md), eager or SDPA: Q.K^T
// batch matmul, a constant scale (after the product, or split over Q and K),
// additive causal mask, five-op softmax (with SDPA's fully-masked-row guard),
// P.V batch matmul, with the GQA repeat, reshapes, transposes and the
// importer's broadcast copies around them. Matching is exact: whatever
// deviates is reported as a kind of mismatch, never guessed.
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_DIALECT_SNAPKV_TRANSFORMS_ATTENTIONMATCHER_H
#define SNAPKV_DIALECT_SNAPKV_TRANSFORMS_ATTENTIONMATCHER_H

#include "snapkv/Dialect/SnapKV/IR/SnapKVOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include <optional>
#include <string>

namespace mlir::snapkv {

/// Why a batch_matmul is not part of a recognised attention. The message of
/// each kind is in `attentionMismatchMessage`.
enum class AttentionMismatch {
  // The P . V candidate itself.
  OnBuffers,
  ExplicitMaps,
  ProbabilitiesNotCollapsed,
  NoSoftmaxDivision,
  NoSoftmaxExp,
  // Past this point the left operand is a division of exponentials by a row
  // statistic: the batch_matmul is an attention's P . V.
  SoftmaxDenominator,
  SoftmaxNoMaxShift,
  SoftmaxRowMax,
  NotMaskedRowGuard,
  // The scores in front of the softmax.
  NoMaskAdd,
  Softcapping,
  ScaleNotConstant,
  ScaleNotPositive,
  ScoresNotMatmul,
  // The operands of Q . K^T and P . V.
  QueriesNotCollapsed,
  DynamicQueryDims,
  KeysNotTransposed,
  NotGqaRepeat,
  NoRepeatNorHeadPerQuery,
  ValuesNotCollapsed,
  KVTypesDiffer,
  DynamicKVHeads,
  HeadCountMismatch,
  ElementTypesDiffer,
  RepeatCopiesMismatch,
  // snapkv.sdpa (SDPA kept by the export): its operands.
  SdpaNotCollapsed,
  SdpaMaskNotRowColumn,
};

/// How far matching got before a mismatch of this kind: 0 when the
/// batch_matmul is not (or not yet) recognisable as a P . V, higher the
/// further the match went. Used to report the most telling failure.
unsigned attentionMismatchStage(AttentionMismatch kind);

/// The fixed message of `kind`.
StringRef attentionMismatchMessage(AttentionMismatch kind);

/// A failed match: the kind and, for some kinds, numbers that go with it.
struct AttentionFailure {
  AttentionMismatch kind;
  std::string detail;
  std::string message() const;
};

/// A key or value operand of attention traced back through the GQA repeat.
struct RepeatedKV {
  /// [B, Hkv, T, D]: the tensor before the repeat.
  Value source;
  /// The value attention consumes: [B, Hq, T, D], or [B * Hq, T, D] when the
  /// importer collapsed batch and heads straight out of the repeat.
  Value repeated;
  /// The 5-D repeat op ([B, Hkv, G, T, D]); null when G == 1 and there is none.
  linalg::GenericOp repeatOp;
};

/// One recognised attention: decomposed (the two batch matmuls) or kept as
/// one `snapkv.sdpa` by the export (`sdpa`; the matmuls and `maskAdd` null).
struct AttentionMatch {
  linalg::BatchMatmulOp scoresMatmul; // Q . K^T
  linalg::BatchMatmulOp outputMatmul; // P . V
  SdpaOp sdpa;
  /// The op whose result is the attention's [B * Hq, Lq, D] output.
  Operation *root() const {
    return sdpa ? static_cast<Operation *>(sdpa)
                : static_cast<Operation *>(outputMatmul);
  }
  /// [B, Hq, Lq, D] post-RoPE queries (the left operand of Q . K^T, before
  /// any constant factor of an SDPA scale split and before SDPA's widening
  /// of bf16/f16 queries, keys and values to f32: `queries`, `keys.source`
  /// and `values.source` then have the model's type, the products f32).
  Value queries;
  RepeatedKV keys, values;
  /// The `addf(scaled scores, mask)` generic and its mask operand; null
  /// when matched with `maskOptional` and there is no mask (every key is
  /// visible to every query). For `sdpa`, `mask` is the boolean condition
  /// (key visible) indexed [b|0, h|0, row, column].
  linalg::GenericOp maskAdd;
  Value mask;
  /// SDPA's `select(all scores of the row == -inf, 0, softmax)`; null for
  /// eager attention.
  linalg::GenericOp maskedRowGuard;
  /// The model's effective scale, rounded to f32: the product of the
  /// constant factors on the scores, on Q and on K^T (1 when there is none).
  float scale = 1.0f;
  int64_t batch = 0, queryHeads = 0, kvHeads = 0, headDim = 0;
};

/// Matches the attention whose P . V product is `outputMatmul`; on failure
/// says why. With `maskOptional`, scores without an additive mask match too
/// (the rewritten decode step, whose mask the rewrite removed).
FailureOr<AttentionMatch> matchAttention(linalg::BatchMatmulOp outputMatmul,
                                         AttentionFailure &failure,
                                         bool maskOptional = false);

/// Matches a kept SDPA: its queries, keys and values through the importer's
/// collapse of batch and heads (and the GQA repeat), its mask through the
/// broadcast over heads. Nothing of the softmax is matched: the op is it.
FailureOr<AttentionMatch> matchSdpa(SdpaOp op, AttentionFailure &failure);

/// Why a mask is not a causal (or covered sliding-window) mask.
enum class MaskMismatch {
  NotRowColumn,
  NotSelect,
  NotCausal,
  KeysNotArange,
  QueriesNotRows,
  SlidingWindowKeys,
};

StringRef maskMismatchMessage(MaskMismatch kind);

/// How an additive mask relates query row i to key column j.
struct CausalMask {
  /// 1-D key positions (an arange) and the query position source: a 1-D
  /// arange (prefill) or a one-element tensor (decode).
  Value keyPositions, queryPositions;
  /// True when query positions vary along the score rows (prefill form).
  bool queryIsRow = false;
  /// A sliding window: key j is visible from query i only when
  /// `query - key < window` (HuggingFace's sliding_window). None for a plain
  /// causal mask.
  std::optional<int64_t> window;
};

/// Checks that `match.mask` is `select(cond, 0, very negative)` with
/// `cond = key <= query`, optionally and-ed with a sliding-window term
/// `key > query - W`, key positions an arange along the score columns.
FailureOr<CausalMask> matchCausalMask(const AttentionMatch &match,
                                      MaskMismatch &failure);

/// True when `value` is `index_cast(linalg.index 0)` over a 1-D tensor, i.e.
/// 0, 1, 2, ... (through expand_shape).
bool isArange(Value value);

/// Looks through the importer's broadcast copies (generics that re-read a
/// same-shaped tensor at the iteration indices) and returns what they copy.
Value skipCopies(Value value);

/// A scalar position expression: `offset + base`.
struct PositionValue {
  enum class Base { Zero, Argument, CacheLength };
  Base base = Base::Zero;
  int64_t offset = 0;
  /// The function argument for Argument and CacheLength.
  BlockArgument argument;
};

/// Evaluates a one-element integer tensor or an integer scalar built from
/// constants, additions, casts, `tensor.dim` of a function argument and
/// function arguments themselves. std::nullopt when anything else is involved.
std::optional<PositionValue> evaluatePosition(Value value);

/// Positions `base + 0, base + 1, ...` along a 1-D tensor: an arange (base
/// 0), an elementwise `arange + s` with `s` a scalar that `evaluatePosition`
/// understands, or `arange + t[0]` with `t` a one-element tensor it
/// understands, broadcast (through expand_shape). std::nullopt otherwise. A
/// prompt chunk's queries after a cache of T rows are at `arange + T`.
std::optional<PositionValue> shiftedArange(Value value);

} // namespace mlir::snapkv

#endif // SNAPKV_DIALECT_SNAPKV_TRANSFORMS_ATTENTIONMATCHER_H
