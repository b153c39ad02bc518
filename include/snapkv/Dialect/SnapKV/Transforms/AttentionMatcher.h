//===- AttentionMatcher.h - find decomposed attention in imported IR -----===//
//
// Recognises the attention that torch-mlir's FX importer emits for a
// HuggingFace Llama-family layer (docs/model-ir.md): Q.K^T batch matmul,
// scale, additive causal mask, five-op softmax, P.V batch matmul, with the
// GQA repeat, reshapes, transposes and the importer's broadcast copies around
// them. Matching is exact: whatever deviates is reported with a reason, never
// guessed.
//
//===----------------------------------------------------------------------===//

#ifndef SNAPKV_DIALECT_SNAPKV_TRANSFORMS_ATTENTIONMATCHER_H
#define SNAPKV_DIALECT_SNAPKV_TRANSFORMS_ATTENTIONMATCHER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"

#include <optional>
#include <string>

namespace mlir::snapkv {

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

/// One recognised attention.
struct AttentionMatch {
  linalg::BatchMatmulOp scoresMatmul; // Q . K^T
  linalg::BatchMatmulOp outputMatmul; // P . V
  /// [B, Hq, Lq, D] post-RoPE queries (the left operand of Q . K^T).
  Value queries;
  RepeatedKV keys, values;
  /// The `addf(scaled scores, mask)` generic and its mask operand.
  linalg::GenericOp maskAdd;
  Value mask;
  double scale = 0;
  int64_t batch = 0, queryHeads = 0, kvHeads = 0, headDim = 0;
};

/// Matches the attention whose P . V product is `outputMatmul`. On failure
/// returns std::nullopt and sets `why` to a reason naming what was expected.
std::optional<AttentionMatch> matchAttention(linalg::BatchMatmulOp outputMatmul,
                                             std::string &why);

/// How an additive mask relates query row i to key column j.
struct CausalMask {
  /// 1-D key positions (an arange) and the query position source: a 1-D
  /// arange (prefill) or a one-element tensor (decode).
  Value keyPositions, queryPositions;
  /// True when query positions vary along the score rows (prefill form).
  bool queryIsRow = false;
};

/// Checks that `match.mask` is `select(key <= query, 0, very negative)` with
/// key positions an arange along the score columns. On failure returns
/// std::nullopt and sets `why`.
std::optional<CausalMask> matchCausalMask(AttentionMatch match,
                                          std::string &why);

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

} // namespace mlir::snapkv

#endif // SNAPKV_DIALECT_SNAPKV_TRANSFORMS_ATTENTIONMATCHER_H
