#ifndef SNAPKV_DIALECT_SNAPKV_IR_SNAPKVOPS_TD
#define SNAPKV_DIALECT_SNAPKV_IR_SNAPKVOPS_TD

include "snapkv/Dialect/SnapKV/IR/SnapKVDialect.td"
include "snapkv/Dialect/SnapKV/IR/SnapKVEnums.td"
include "snapkv/Dialect/SnapKV/IR/SnapKVAttrs.td"
include "mlir/Dialect/Linalg/IR/LinalgInterfaces.td"
include "mlir/Interfaces/DestinationStyleOpInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/TilingInterface.td"
include "mlir/IR/BuiltinAttributes.td"

class SnapKV_Op<string mnemonic, list<Trait> traits = []>
    : Op<SnapKV_Dialect, mnemonic, traits>;

// Queries, keys and values of the selections: [B, H, L, D] in a precision the
// lowerings compute in.
def SnapKV_QKVTensor : TensorRankOf<[F16, BF16, F32], [4]>;

def SnapKV_PositiveI64Attr : ConfinedAttr<I64Attr, [IntPositive]>;
def SnapKV_NonNegativeI64Attr : ConfinedAttr<I64Attr, [IntNonNegative]>;
// Pooling centres its window on the position: the kernel has a middle.
def SnapKV_KernelAttr : ConfinedAttr<I64Attr, [IntPositive,
    AttrConstraint<CPred<"::llvm::cast<::mlir::IntegerAttr>($_self).getInt() "
                         "% 2 == 1">, "and odd">]>;
def SnapKV_FiniteF32Attr : ConfinedAttr<F32Attr, [
    AttrConstraint<CPred<"::llvm::cast<::mlir::FloatAttr>($_self).getValue()"
                         ".isFinite()">, "whose value is finite">]>;
def SnapKV_PositiveF32Attr : ConfinedAttr<SnapKV_FiniteF32Attr, [
    AttrConstraint<CPred<"::llvm::cast<::mlir::FloatAttr>($_self)"
                         ".getValueAsDouble() > 0.0">, "and positive">]>;
// The scorings that produce votes (what snapkv.score computes and
// snapkv.select_adaptive shares out).
def SnapKV_VoteScoringAttr : ConfinedAttr<SnapKV_ScoringAttr, [
    AttrConstraint<CPred<"::llvm::is_contained("
                         "{::mlir::snapkv::Scoring::votes, "
                         "::mlir::snapkv::Scoring::prefix_votes}, "
                         "::llvm::cast<::mlir::snapkv::ScoringAttr>($_self)"
                         ".getValue())">,
                   "whose value is votes or prefix_votes">]>;
// The scorings snapkv.score computes: the window's votes and the votes
// accumulated over every query it is given (sum, norm_sum).
def SnapKV_ScoreScoringAttr : ConfinedAttr<SnapKV_ScoringAttr, [
    AttrConstraint<CPred<"::llvm::cast<::mlir::snapkv::ScoringAttr>($_self)"
                         ".getValue() != ::mlir::snapkv::Scoring::recent && "
                         "::llvm::cast<::mlir::snapkv::ScoringAttr>($_self)"
                         ".getValue() != ::mlir::snapkv::Scoring::random && "
                         "::llvm::cast<::mlir::snapkv::ScoringAttr>($_self)"
                         ".getValue() != ::mlir::snapkv::Scoring::keydiff">,
                   "whose value is votes, prefix_votes, sum or norm_sum">]>;

def SnapKV_SelectOp : SnapKV_Op<"select",
    [Pure, InferTypeOpAdaptorWithIsCompatible,
     AllElementTypesMatch<["queries", "keys", "values"]>,
     DeclareOpInterfaceMethods<AggregatedOpInterface, ["decomposeOperation"]>]> {
  let summary = "observation-window KV selection (SnapKV)";
  let description = [{
    Selects, per head, which prompt positions of `keys`/`values` to keep.

    * `queries : [B, Hq, W, D]` are the last `W = window` prompt queries (after
      RoPE); `keys`, `values : [B, Hkv, L, D]` are the prompt's keys and values
      (after RoPE, before any GQA repeat). Query head `h` reads kv head
      `h / (Hq / Hkv)`.
    * Votes: each window query `t` (absolute position `L - W + t`) takes a
      softmax over ALL causally visible positions `j <= L - W + t` of
      `scale * <q_t, k_j>` (f32, max-subtracted); the votes of prefix position
      `j < L - W` are the sum of its probabilities over the window queries.
    * `gqa`: `expand` keeps one selection per query head (`Hc = Hq`); `mean` /
      `max` average / take the maximum of the votes of the query heads of a kv
      head (`Hc = Hkv`). Aggregation happens before pooling.
    * `pooling` with odd `kernel` (stride 1, `kernel / 2` each side): `avg`
      divides by `kernel` always (zero padding); `max` takes the maximum of the
      in-range neighbours.
    * `block` (default 1): the prefix is cut into blocks of `block`
      consecutive positions from position 0 (the last one may be shorter);
      every position ranks by the sum of its block's pooled scores, so whole
      blocks are kept (docs/semantics.md). `capacity - window` must be a
      multiple of `block`; only the vote scorings take a block.
    * Top `capacity - window` prefix positions by pooled score are kept, exact
      ties going to the lower position and NaN ranking below every number; the
      `window` positions are always kept.
    * `order`: `position` lists kept positions ascending; `score` lists the
      prefix by descending score (ties: lower position first), then the window.
    * If `L < capacity` nothing is selected: all `L` positions are kept.
    * `scoring` (default `votes`, the above) replaces the ranking, for
      comparisons: `prefix_votes` leaves the window columns out of the softmax
      denominator (as some inference engines do); `recent` keeps `sinks`
      (default 4, or capacity - window if smaller) leading positions and the
      most recent ones (StreamingLLM);
      `random` ranks by a hash of (`seed`, batch, head, position), i.e. a
      uniform random choice that is reproducible from `seed` (default 0).
      Pooling and GQA aggregation only apply to the votes.
    * `scoring sum` / `norm_sum` (accumulated attention, H2O / OpenVINO's
      SUM and NORM_SUM): `queries : [B, Hq, Q, D]` are the last `Q` prompt
      queries, `window <= Q <= L` (`Q` may be dynamic); query `t` sits at
      position `L - Q + t`, and a prefix position's votes are its summed
      probabilities over all `Q` queries; `norm_sum` divides that by the
      number of queries that see it, `min(Q, L - j)`. Pooled and ranked like
      the votes; the window is still the last `window` positions.
    * `scoring keydiff` (KeyDiff, question-agnostic): prefix position `j`
      scores `1 - cos(k_j, a)`, `a` the mean of the unit keys of all `L` rows
      of its kv head (docs/semantics.md); the queries are not read. Pooled
      and ranked like the votes; no `block`; lowered for the CPU only.

    Results: `keys`, `values : [B, Hc, S, D]` (exact copies of the input rows)
    and `indices : [B, Hc, S] x i64`, with `S = min(L, capacity)`. `L` may be
    dynamic; the lowering then checks `L >= window` at run time.

    With the vote scorings the op decomposes (`snapkv-decompose-select`, or
    `AggregatedOpInterface::decomposeOperation`) into its stages:
    `snapkv.score`, `snapkv.top_positions` and two `snapkv.gather`, behind
    an `scf.if` for the short-prompt bypass when `L` is dynamic; `recent`,
    `random` and `keydiff` rank without votes and stay whole.

    Example:

    ```mlir
    %k_out, %v_out, %idx = snapkv.select %q, %k, %v
        window 32 capacity 1024 kernel 5 pooling avg gqa expand order position
        : (tensor<1x32x32x128xf16>, tensor<1x8x?x128xf16>, tensor<1x8x?x128xf16>)
        -> (tensor<1x32x?x128xf16>, tensor<1x32x?x128xf16>, tensor<1x32x?xi64>)
    ```
  }];

  let arguments = (ins
    SnapKV_QKVTensor:$queries,
    SnapKV_QKVTensor:$keys,
    SnapKV_QKVTensor:$values,
    SnapKV_PositiveI64Attr:$window,
    SnapKV_PositiveI64Attr:$capacity,
    DefaultValuedAttr<SnapKV_KernelAttr, "5">:$kernel,
    DefaultValuedAttr<SnapKV_PoolingKindAttr,
                      "::mlir::snapkv::PoolingKind::avg">:$pooling,
    DefaultValuedAttr<SnapKV_GqaPolicyAttr,
                      "::mlir::snapkv::GqaPolicy::expand">:$gqa,
    DefaultValuedAttr<SnapKV_OrderAttr,
                      "::mlir::snapkv::Order::position">:$order,
    OptionalAttr<SnapKV_FiniteF32Attr>:$scale,
    DefaultValuedAttr<SnapKV_ScoringAttr,
                      "::mlir::snapkv::Scoring::votes">:$scoring,
    OptionalAttr<SnapKV_NonNegativeI64Attr>:$sinks,
    OptionalAttr<SnapKV_NonNegativeI64Attr>:$seed,
    DefaultValuedAttr<SnapKV_PositiveI64Attr, "1">:$block
  );
  let results = (outs
    SnapKV_QKVTensor:$selected_keys,
    SnapKV_QKVTensor:$selected_values,
    TensorRankOf<[I64], [3]>:$indices
  );

  let assemblyFormat = [{
    $queries `,` $keys `,` $values
    `window` $window `capacity` $capacity
    (`kernel` $kernel^)? (`pooling` `` $pooling^)? (`gqa` `` $gqa^)?
    (`order` `` $order^)? (`scale` $scale^)? (`scoring` `` $scoring^)?
    (`sinks` $sinks^)? (`seed` $seed^)? (`block` $block^)?
    attr-dict `:` functional-type(operands, results)
  }];

  let builders = [
    // Result types are inferred from the operands and options.
    OpBuilder<(ins "::mlir::Value":$queries, "::mlir::Value":$keys,
                   "::mlir::Value":$values, "int64_t":$window,
                   "int64_t":$capacity, "int64_t":$kernel,
                   "::mlir::snapkv::PoolingKind":$pooling,
                   "::mlir::snapkv::GqaPolicy":$gqa,
                   "::mlir::snapkv::Order":$order,
                   "::mlir::FloatAttr":$scale,
                   CArg<"::mlir::snapkv::Scoring",
                        "::mlir::snapkv::Scoring::votes">:$scoring,
                   CArg<"std::optional<int64_t>", "std::nullopt">:$sinks,
                   CArg<"std::optional<int64_t>", "std::nullopt">:$seed,
                   CArg<"int64_t", "1">:$block)>
  ];

  let extraClassDeclaration = [{
    /// Result types implied by operand types, `capacity` and `gqa`
    /// (`keys`, `values`, `indices`); failure if the operands are not
    /// well-formed ranked tensors of rank 4.
    static ::mlir::FailureOr<::llvm::SmallVector<::mlir::Type, 3>>
    inferResultTypes(::mlir::Type queries, ::mlir::Type keys,
                     int64_t capacity, ::mlir::snapkv::GqaPolicy gqa);

    /// The softmax scale: the `scale` attribute or `1/sqrt(D)`.
    double getEffectiveScale();
    /// Leading positions kept by `scoring recent` (default 4, at most
    /// capacity - window).
    int64_t getEffectiveSinks() {
      return getSinks().value_or(
          std::min<int64_t>(4, getCapacityAttr().getInt() -
                                   getWindowAttr().getInt()));
    }
    /// Seed of `scoring random` (default 0).
    int64_t getEffectiveSeed() { return getSeed().value_or(0); }
  }];

  let hasVerifier = 1;
}

def SnapKV_SelectAdaptiveOp : SnapKV_Op<"select_adaptive",
    [Pure, AllElementTypesMatch<["queries", "keys", "values"]>,
     DeclareOpInterfaceMethods<AggregatedOpInterface,
                                     ["decomposeOperation"]>]> {
  let summary = "SnapKV selection with one budget per layer shared by its "
                "heads (Ada-KV), into a ragged cache";
  let description = [{
    The selection of `snapkv.select` (same operands, votes, GQA aggregation
    and pooling), except that the heads share one budget instead of each
    keeping `capacity - window` prefix positions (Ada-KV, Feng et al. 2024;
    docs/semantics.md, "Budgets"). Per batch element, with `K = capacity -
    window` and `Hc` selection heads:

    * each head first takes its own best `floor` prefix positions
      (`0 <= floor <= K`, default 0: Ada-KV's safeguard);
    * the rest of the budget, `Hc x K` prefix positions in all, goes to the
      best remaining `(head, position)` pairs of all heads together:
      descending pooled score, NaN below every number, exact ties to the lower
      head, then to the lower position;
    * each head keeps its chosen prefix positions ascending, then the `window`
      positions `P .. P + window - 1`.

    Heads therefore keep different numbers of rows, and the results are
    ragged, packed head after head: `keys`, `values : [B, T, D]` and
    `indices : [B, T] x i64` with `T = Hc x min(L, capacity)` (every head's
    rows, its prefix positions then its window), and `offsets :
    [B, Hc + 1] x i64`, where head `h`'s rows are `offsets[b, h] ..
    offsets[b, h + 1] - 1` and `offsets[b, Hc] = T`. The rows are exact copies
    of the input rows; nothing is padded. If `L < capacity` nothing is
    selected: every head keeps all `L` positions. `scoring` is `votes` or
    `prefix_votes`; kept prefix positions are listed ascending (there is no
    `order` clause).

    The op decomposes (`snapkv-decompose-select`, or
    `AggregatedOpInterface::decomposeOperation`) into `snapkv.score`,
    `snapkv.top_positions` (per head for the floor, then over the layer's
    flattened `[Hc x P]` scores, where the flat index orders ties by head
    then position), linalg ops that count and place each head's rows, and
    one `snapkv.gather` each for the keys and values.

    Example:

    ```mlir
    %k_out, %v_out, %idx, %offsets = snapkv.select_adaptive %q, %k, %v
        window 32 capacity 256 floor 16 gqa mean
        : (tensor<1x9x32x64xf32>, tensor<1x3x2000x64xf32>,
           tensor<1x3x2000x64xf32>)
        -> (tensor<1x768x64xf32>, tensor<1x768x64xf32>, tensor<1x768xi64>,
            tensor<1x4xi64>)
    ```
  }];

  let arguments = (ins
    SnapKV_QKVTensor:$queries,
    SnapKV_QKVTensor:$keys,
    SnapKV_QKVTensor:$values,
    SnapKV_PositiveI64Attr:$window,
    SnapKV_PositiveI64Attr:$capacity,
    DefaultValuedAttr<SnapKV_NonNegativeI64Attr, "0">:$floor,
    DefaultValuedAttr<SnapKV_KernelAttr, "5">:$kernel,
    DefaultValuedAttr<SnapKV_PoolingKindAttr,
                      "::mlir::snapkv::PoolingKind::avg">:$pooling,
    DefaultValuedAttr<SnapKV_GqaPolicyAttr,
                      "::mlir::snapkv::GqaPolicy::expand">:$gqa,
    OptionalAttr<SnapKV_FiniteF32Attr>:$scale,
    DefaultValuedAttr<SnapKV_VoteScoringAttr,
                      "::mlir::snapkv::Scoring::votes">:$scoring
  );
  let results = (outs
    TensorRankOf<[F16, BF16, F32], [3]>:$selected_keys,
    TensorRankOf<[F16, BF16, F32], [3]>:$selected_values,
    TensorRankOf<[I64], [2]>:$indices,
    TensorRankOf<[I64], [2]>:$offsets
  );

  let assemblyFormat = [{
    $queries `,` $keys `,` $values
    `window` $window `capacity` $capacity (`floor` $floor^)?
    (`kernel` $kernel^)? (`pooling` `` $pooling^)? (`gqa` `` $gqa^)?
    (`scale` $scale^)? (`scoring` `` $scoring^)?
    attr-dict `:` functional-type(operands, results)
  }];

  let extraClassDeclaration = [{
    /// Result types implied by operand types, `capacity` and `gqa`
    /// (`keys`, `values`, `indices`, `offsets`); failure if the operands
    /// are not ranked tensors of rank 4.
    static ::mlir::FailureOr<::llvm::SmallVector<::mlir::Type, 4>>
    inferResultTypes(::mlir::Type queries, ::mlir::Type keys,
                     int64_t capacity, ::mlir::snapkv::GqaPolicy gqa);
    /// Heads of the selection: Hq for gqa expand, Hkv otherwise.
    int64_t getSelectionHeads();
  }];

  let hasVerifier = 1;
}

def SnapKV_ScoreOp : SnapKV_Op<"score",
    [Pure, DestinationStyleOpInterface,
     AllElementTypesMatch<["queries", "keys"]>,
     AllTypesMatch<["votes_init", "pooled_init", "votes", "pooled"]>,
     DeclareOpInterfaceMethods<TilingInterface,
         ["getIterationDomain", "getLoopIteratorTypes",
          "getTiledImplementation", "getResultTilePosition",
          "generateResultTileValue"]>]> {
  let summary = "observation-window votes and pooled scores (SnapKV)";
  let description = [{
    Computes the ranking that `snapkv.select` uses, without selecting:
    `votes` are the window queries' summed full-causal-softmax probabilities
    of each prefix position after GQA aggregation, and `pooled` are the votes
    after neighbourhood pooling and, with `block B > 1`, summed per block of
    `B` consecutive positions from position 0, each position carrying its
    block's sum (the score top-k ranks). Both are
    `[B, Hc, P] x f32` with `P = L - W` (dynamic when `L` is); `Hc` follows
    `gqa` as for `snapkv.select`. The clauses and the verifier rules are the
    ones of `snapkv.select` that do not involve values or capacity; `scoring`
    is `votes` (the default), `prefix_votes`, `sum` or `norm_sum` (whose
    queries are the last `Q >= window` prompt queries). It is the first stage of a
    decomposed `snapkv.select`, and useful to inspect or visualise a
    selection.

    Destination-passing style: the results are written into `outs` (only
    their shapes matter). The op tiles (`TilingInterface`) over its parallel
    rows `(b, h)`: a tile reads the query heads and the kv head of its rows
    (with `gqa expand` and `G > 1`, a tile of heads is one head, or
    `G`-aligned and a multiple of `G`).

    Example:

    ```mlir
    %votes, %pooled = snapkv.score %q, %k window 2 kernel 3
        outs(%v0, %p0 : tensor<1x1x6xf32>, tensor<1x1x6xf32>)
        : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>)
        -> (tensor<1x1x6xf32>, tensor<1x1x6xf32>)
    ```
  }];

  let arguments = (ins
    SnapKV_QKVTensor:$queries,
    SnapKV_QKVTensor:$keys,
    TensorRankOf<[F32], [3]>:$votes_init,
    TensorRankOf<[F32], [3]>:$pooled_init,
    SnapKV_PositiveI64Attr:$window,
    DefaultValuedAttr<SnapKV_KernelAttr, "5">:$kernel,
    DefaultValuedAttr<SnapKV_PoolingKindAttr,
                      "::mlir::snapkv::PoolingKind::avg">:$pooling,
    DefaultValuedAttr<SnapKV_GqaPolicyAttr,
                      "::mlir::snapkv::GqaPolicy::expand">:$gqa,
    OptionalAttr<SnapKV_FiniteF32Attr>:$scale,
    DefaultValuedAttr<SnapKV_ScoreScoringAttr,
                      "::mlir::snapkv::Scoring::votes">:$scoring,
    DefaultValuedAttr<SnapKV_PositiveI64Attr, "1">:$block
  );
  let results = (outs TensorRankOf<[F32], [3]>:$votes,
                      TensorRankOf<[F32], [3]>:$pooled);

  let assemblyFormat = [{
    $queries `,` $keys `window` $window
    (`kernel` $kernel^)? (`pooling` `` $pooling^)? (`gqa` `` $gqa^)?
    (`scale` $scale^)? (`scoring` `` $scoring^)? (`block` $block^)?
    `outs` `(` $votes_init `,` $pooled_init `:` type($votes_init) `,`
    type($pooled_init) `)`
    attr-dict `:` `(` type($queries) `,` type($keys) `)` `->`
    `(` type($votes) `,` type($pooled) `)`
  }];

  let extraClassDeclaration = [{
    /// The softmax scale: the `scale` attribute or `1/sqrt(D)`.
    double getEffectiveScale();
    ::mlir::MutableOperandRange getDpsInitsMutable() {
      return ::mlir::MutableOperandRange(getOperation(), 2, 2);
    }
    /// The type both results have: [B, Hc, P] x f32.
    static ::mlir::RankedTensorType
    getResultType(::mlir::RankedTensorType queries,
                  ::mlir::RankedTensorType keys, int64_t window,
                  ::mlir::snapkv::GqaPolicy gqa);
  }];

  let hasVerifier = 1;
}

def SnapKV_TopPositionsOp : SnapKV_Op<"top_positions",
    [Pure, DestinationStyleOpInterface, AllTypesMatch<["init", "result"]>,
     DeclareOpInterfaceMethods<TilingInterface,
         ["getIterationDomain", "getLoopIteratorTypes",
          "getTiledImplementation", "getResultTilePosition",
          "generateResultTileValue"]>]> {
  let summary = "per-row top positions by score, then the window (a stage "
                "of snapkv.select)";
  let description = [{
    The selection stage of `snapkv.select`: for every row `(b, h)` of
    `scores : [B, H, P] x f32` (the pooled scores of the `P` prefix
    positions), the `K = capacity - window` positions with the highest
    score, exact ties going to the lower position, NaN ranking below every
    number and `-0` equal to `+0`; then the `window` positions
    `P .. P + window - 1`. `order position` lists the kept prefix positions
    ascending, `order score` by descending score (ties: lower position
    first). The result `[B, H, capacity] x i64` is written into `init`
    (destination-passing style; only its shape matters).

    `P` may be dynamic; it must be at least `K` (the verifier checks a static
    `P`, the lowering a dynamic one at run time). `B` and `H` are static.
    The op tiles (`TilingInterface`) over its parallel rows `(b, h)`;
    `convert-snapkv-to-linalg` lowers it to the threshold search, chunk
    counts and slot search of docs/lowering.md.

    Example:

    ```mlir
    %idx = snapkv.top_positions %pooled window 2 capacity 5
        outs(%init : tensor<1x4x5xi64>) : tensor<1x4x6xf32> -> tensor<1x4x5xi64>
    ```
  }];

  let arguments = (ins
    TensorRankOf<[F32], [3]>:$scores,
    TensorRankOf<[I64], [3]>:$init,
    SnapKV_PositiveI64Attr:$window,
    SnapKV_PositiveI64Attr:$capacity,
    DefaultValuedAttr<SnapKV_OrderAttr,
                      "::mlir::snapkv::Order::position">:$order
  );
  let results = (outs TensorRankOf<[I64], [3]>:$result);

  let assemblyFormat = [{
    $scores `window` $window `capacity` $capacity (`order` `` $order^)?
    `outs` `(` $init `:` type($init) `)`
    attr-dict `:` type($scores) `->` type($result)
  }];

  let extraClassDeclaration = [{
    ::mlir::MutableOperandRange getDpsInitsMutable() {
      return getInitMutable();
    }
  }];

  let hasVerifier = 1;
}

def SnapKV_GatherOp : SnapKV_Op<"gather",
    [Pure, DestinationStyleOpInterface, AllTypesMatch<["init", "result"]>,
     AllElementTypesMatch<["source", "init"]>,
     DeclareOpInterfaceMethods<TilingInterface,
         ["getIterationDomain", "getLoopIteratorTypes",
          "getTiledImplementation", "getResultTilePosition",
          "generateResultTileValue"]>]> {
  let summary = "per-head gather of cache rows (a stage of snapkv.select)";
  let description = [{
    The last stage of `snapkv.select`: `result[b, h, s, :] =
    source[b, h / G, indices[b, h, s], :]` for `source : [B, Hs, L, D]`,
    `indices : [B, Hc, S] x i64` and `result : [B, Hc, S, D]`, where
    `G = Hc / Hs` (1 when each head has its own rows, the GQA group when
    every query head of a kv head keeps its own positions). The rows are
    exact copies. An index outside `[0, L)` is clamped into it, so the op
    never reads outside `source`. `L` and `S` may be dynamic; `B`, the heads
    and `D` are static. Destination-passing style: the result is written
    into `init`.

    The op tiles (`TilingInterface`) over all four dimensions, all parallel;
    with `G > 1` a tile of heads must be one head, all heads, or `G`-aligned
    and a multiple of `G` (so that it reads whole kv heads).

    Example:

    ```mlir
    %k = snapkv.gather %keys[%idx] outs(%init : tensor<1x4x5x8xf32>)
        : tensor<1x2x16x8xf32>, tensor<1x4x5xi64> -> tensor<1x4x5x8xf32>
    ```
  }];

  let arguments = (ins
    TensorRankOf<[AnyType], [4]>:$source,
    TensorRankOf<[I64], [3]>:$indices,
    TensorRankOf<[AnyType], [4]>:$init
  );
  let results = (outs TensorRankOf<[AnyType], [4]>:$result);

  let assemblyFormat = [{
    $source `[` $indices `]` `outs` `(` $init `:` type($init) `)`
    attr-dict `:` type($source) `,` type($indices) `->` type($result)
  }];

  let extraClassDeclaration = [{
    ::mlir::MutableOperandRange getDpsInitsMutable() {
      return getInitMutable();
    }
    /// Heads of `result` per head of `source`.
    int64_t getGroup() {
      return getResult().getType().getDimSize(1) /
             getSource().getType().getDimSize(1);
    }
  }];

  let hasVerifier = 1;
}

def SnapKV_AttentionOp : SnapKV_Op<"attention",
    [Pure, DestinationStyleOpInterface,
     AllElementTypesMatch<["queries", "keys", "values"]>,
     // Two traits: the inferred result type is then read from `queries`
     // (operand 0), not from `init`, whose index the optional offset shifts.
     AllTypesMatch<["queries", "result"]>, AllTypesMatch<["queries", "init"]>,
     DeclareOpInterfaceMethods<TilingInterface,
         ["getIterationDomain", "getLoopIteratorTypes",
          "getTiledImplementation", "getResultTilePosition",
          "generateResultTileValue"]>,
     DeclareOpInterfaceMethods<AggregatedOpInterface,
                               ["decomposeOperation"]>]> {
  let summary = "causal multi-head attention with grouped kv heads";
  let description = [{
    The attention of a decoder layer, as one op: for every batch `b`, query
    head `h` and query row `i`,

    `result[b, h, i] = sum_j p_j * values[b, h / G, j]` with
    `p = softmax_j(scale * <queries[b, h, i], keys[b, h / G, j]>)` over the
    causally visible keys `j <= i + offset` (and `j < Lk`),

    where `queries : [B, Hq, Lq, D]`, `keys`, `values : [B, Hkv, Lk, D]` and
    `G = Hq / Hkv` (the GQA repeat, without copying the keys). `offset` is
    the position of query row 0 among the keys: by default `Lk - Lq`, the
    mask aligned to the last key (a prompt's self-attention has `Lq = Lk`,
    row `i` sees keys `0 .. i`; a decode step has `Lq = 1` and sees every
    key); an `offset` operand (an index) gives it explicitly, such as a
    decode step's position. `scale` defaults to `1/sqrt(D)`. With
    `softcap c` (Gemma 2's logit soft-capping) the scaled logits become
    `c * tanh(x / c)`; with `sliding_window W` row `i` sees only the keys
    `i + offset - W < j` (the last `W` up to its own position, as
    HuggingFace's sliding-window mask). Both are computed by the op's
    decomposition; the hand-written tiled lowering has neither, so
    `convert-snapkv-to-linalg` tiles and decomposes an op that uses them.
    Products and
    the softmax are computed in f32; the result has the queries' type. A row
    that sees no key (`i + offset < 0`) is zero, as with SDPA's guard for
    fully masked rows. With a dynamic key or value length the lowering
    checks at run time that both lengths agree and fit 32-bit positions.

    Destination-passing style: the result is written into `init` (of the
    queries' type; only its shape matters). The op tiles (`TilingInterface`)
    over its parallel loops `(b, h, i)`: a tile is the same op on the tile's
    query rows, the kv heads they read and every key, with the causal offset
    of its first row (with `G > 1`, a tile of heads is one head, or
    `G`-aligned and a multiple of `G`). It decomposes
    (`AggregatedOpInterface::decomposeOperation`) into the online softmax
    over tiles of keys (the `key_tile` of its `snapkv.lowering_config`, else
    64): an `scf.for` over the key tiles whose body is linalg ops over all
    of its rows at once, carrying each row's maximum, sum and accumulator in
    f32, and skipping the rows that see none of a tile's keys; a single
    query row takes every key in one step, with no loop.

    `snapkv-fuse-attention` forms it from the attention torch-mlir imports;
    `convert-snapkv-to-linalg` lowers it to a tiled online softmax
    (FlashAttention's recurrence), so that the `[Lq, Lk]` scores are never
    held beyond one tile of query rows and key positions.

    Example:

    ```mlir
    %o = snapkv.attention %q, %k, %v scale 0.125
        outs(%init : tensor<1x9x?x64xf32>)
        : tensor<1x9x?x64xf32>, tensor<1x3x?x64xf32>, tensor<1x3x?x64xf32>
        -> tensor<1x9x?x64xf32>
    ```
  }];

  let arguments = (ins
    SnapKV_QKVTensor:$queries,
    SnapKV_QKVTensor:$keys,
    SnapKV_QKVTensor:$values,
    Optional<Index>:$offset,
    SnapKV_QKVTensor:$init,
    OptionalAttr<SnapKV_FiniteF32Attr>:$scale,
    OptionalAttr<SnapKV_PositiveF32Attr>:$softcap,
    OptionalAttr<SnapKV_PositiveI64Attr>:$sliding_window
  );
  let results = (outs SnapKV_QKVTensor:$result);

  let assemblyFormat = [{
    $queries `,` $keys `,` $values (`offset` $offset^)? (`scale` $scale^)?
    (`softcap` $softcap^)? (`sliding_window` $sliding_window^)?
    `outs` `(` $init `:` type($init) `)`
    attr-dict `:` type($queries) `,` type($keys) `,` type($values) `->`
    type($result)
  }];

  let extraClassDeclaration = [{
    /// The softmax scale: the `scale` attribute or `1/sqrt(D)`.
    double getEffectiveScale();
    ::mlir::MutableOperandRange getDpsInitsMutable() {
      return getInitMutable();
    }
    /// The online softmax over tiles of `keyTile` keys (what
    /// `decomposeOperation` builds with the op's configured key tile).
    /// `lengthsChecked`: the caller has checked at run time that dynamic key
    /// and value lengths agree (once, outside the loops of a tiled op), so
    /// the decomposition does not. `keySplits`: a tile's key steps in that
    /// many parts run in parallel (an `scf.forall`) and then combined.
    ::mlir::FailureOr<::llvm::SmallVector<::mlir::Value>>
    decompose(::mlir::OpBuilder &b, int64_t keyTile,
              bool lengthsChecked = false, int64_t keySplits = 1);
  }];

  let hasVerifier = 1;
}

def SnapKV_RaggedAttentionOp : SnapKV_Op<"ragged_attention",
    [Pure, AllTypesMatch<["starts", "lengths"]>,
     AllTypesMatch<["queries", "result"]>,
     AllElementTypesMatch<["queries", "keys", "values"]>]> {
  let summary = "a decode step's attention over a ragged cache, each head its "
                "own rows";
  let description = [{
    The attention of one new token over a cache whose heads hold different
    numbers of rows, packed in one buffer (what `snapkv.select_adaptive`
    leaves): for every batch `b` and query head `h`, with cache head
    `c = h / (Hq / Hc)`,

    `result[b, h, 0] = sum_j p_j * values[b, starts[b, c] + j]` with
    `p = softmax_j(scale * <queries[b, h, 0], keys[b, starts[b, c] + j]>)`
    over `j < lengths[b, c]`,

    where `queries : [B, Hq, 1, D]`, `keys`, `values : [B, T, D]` (the packed
    rows; `T` may be dynamic) and `starts`, `lengths : [B, Hc] x i64`. Head
    `c`'s rows need not follow head `c - 1`'s: a buffer with room after each
    head for the rows decoding appends works as well. Every key precedes the
    new token, so nothing is masked. `scale` defaults to `1/sqrt(D)`; products
    and the softmax are f32 and the result has the queries' type. At run time
    the lowering checks that each head has at least one row and that its rows
    lie inside `keys` and `values`.

    `convert-snapkv-to-linalg` lowers it to an `scf.forall` over `(b, c)`,
    each a `snapkv.attention` of the head's `Hq / Hc` query heads over its
    slice of the rows (lowered like any decode step's), so no head reads
    another's rows and nothing is padded.

    Example:

    ```mlir
    %o = snapkv.ragged_attention %q, %k, %v rows(%starts, %lengths)
        : tensor<1x9x1x64xf32>, tensor<1x?x64xf32>, tensor<1x?x64xf32>,
          tensor<1x3xi64> -> tensor<1x9x1x64xf32>
    ```
  }];

  let arguments = (ins
    SnapKV_QKVTensor:$queries,
    TensorRankOf<[F16, BF16, F32], [3]>:$keys,
    TensorRankOf<[F16, BF16, F32], [3]>:$values,
    TensorRankOf<[I64], [2]>:$starts,
    TensorRankOf<[I64], [2]>:$lengths,
    OptionalAttr<SnapKV_FiniteF32Attr>:$scale
  );
  let results = (outs SnapKV_QKVTensor:$result);

  let assemblyFormat = [{
    $queries `,` $keys `,` $values `rows` `(` $starts `,` $lengths `)`
    (`scale` $scale^)? attr-dict `:` type($queries) `,` type($keys) `,`
    type($values) `,` type($starts) `->` type($result)
  }];

  let extraClassDeclaration = [{
    /// The softmax scale: the `scale` attribute or `1/sqrt(D)`.
    double getEffectiveScale();
  }];

  let hasVerifier = 1;
}

def SnapKV_SdpaTensor : TensorRankOf<[F16, BF16, F32], [3]>;

def SnapKV_SdpaOp : SnapKV_Op<"sdpa",
    [Pure, DestinationStyleOpInterface,
     AllElementTypesMatch<["queries", "keys", "values", "init"]>]> {
  let summary = "torch's scaled_dot_product_attention as imported";
  let description = [{
    `torch.ops.aten.scaled_dot_product_attention` kept as one op by the
    export (python/snapkv/frontend/export.py): torch-mlir lowers it to
    `tm_tensor.attention`, which the export re-creates as this op, so that
    the attention reaches our passes without being decomposed. For every
    batch-head `n` and query row `i`:

    `result[n, i] = sum_j p_j * values[n, j]` with
    `p = softmax_j(scale * <queries[n, i], keys[n, j]>)` over the keys `j`
    with `mask[n, i, j]` true (every key without a mask),

    where `queries : [N, Lq, D]`, `keys : [N, Lk, D]`, `values : [N, Lk, Dv]`
    and `N` is batch times heads (the importer collapses them, after the
    model's own GQA repeat). `scale` defaults to `1/sqrt(D)`, as in torch.

    `snapkv-fuse-attention` turns it into `snapkv.attention` where the mask
    is causal (the model rewrite reads it the same way, AttentionMatcher.h);
    `convert-snapkv-to-linalg` lowers what is left to linalg exactly as
    defined above (Q.K^T, masked softmax, P.V).

    ```mlir
    %o = snapkv.sdpa %q, %k, %v mask %m scale 0.125 outs(%init : tensor<9x?x64xf32>)
        : tensor<9x?x64xf32>, tensor<9x?x64xf32>, tensor<9x?x64xf32>,
          tensor<9x?x?xi1> -> tensor<9x?x64xf32>
    ```
  }];

  let arguments = (ins
    SnapKV_SdpaTensor:$queries,
    SnapKV_SdpaTensor:$keys,
    SnapKV_SdpaTensor:$values,
    Optional<TensorRankOf<[I1], [3]>>:$mask,
    SnapKV_SdpaTensor:$init,
    OptionalAttr<F64Attr>:$scale
  );
  let results = (outs SnapKV_SdpaTensor:$result);

  let assemblyFormat = [{
    $queries `,` $keys `,` $values (`mask` $mask^)? (`scale` $scale^)?
    `outs` `(` $init `:` type($init) `)` attr-dict `:` type($queries) `,`
    type($keys) `,` type($values) (`,` type($mask)^)? `->` type($result)
  }];

  let extraClassDeclaration = [{
    /// The softmax scale: the `scale` attribute or `1/sqrt(D)`.
    double getEffectiveScale();
    ::mlir::MutableOperandRange getDpsInitsMutable() {
      return getInitMutable();
    }
  }];

  let hasVerifier = 1;
}

#endif // SNAPKV_DIALECT_SNAPKV_IR_SNAPKVOPS_TD
