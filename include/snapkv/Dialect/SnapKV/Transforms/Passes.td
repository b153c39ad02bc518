#ifndef SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_TD
#define SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def OutlineSelect : Pass<"snapkv-outline-select", "::mlir::ModuleOp"> {
  let summary = "Move each snapkv.select or snapkv.score that shares its "
                "function with other code into a private function of its own";
  let description = [{
    First step of `--snapkv-cpu-pipeline`. A select in a model's layer
    function is lowered to about as much code as the rest of the layer;
    in a function of its own, the passes that run on one function at a time
    and the parallel compile of the split module work on the layer and on
    the select on different cores (the tiny model's snapkv-opt time drops by
    a fifth). Each `snapkv.select` / `snapkv.score` directly in the body of
    a `func.func` that holds other ops besides it and the `return` becomes a
    `func.call` of a new private function `@<function>_<op>` (renamed if the
    name is taken) holding only the op; ops in loops or other regions stay
    (a failing run-time check must return from a function body in report
    mode), and so does an op that is already alone in its function.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

def DecomposeSelect : Pass<"snapkv-decompose-select"> {
  let summary = "Split each snapkv.select into its stage ops: score, "
                "top_positions, gather";
  let description = [{
    Replaces every `snapkv.select` that ranks by votes (`scoring votes` or
    `prefix_votes`) with the chain of destination-style stage ops it is made
    of (`SelectOp::decomposeOperation`, which
    `transform.structured.decompose_interface` calls too):

    * `snapkv.score`: the window's votes and the pooled scores `[B, Hc, P]`;
    * `snapkv.top_positions`: per row, the top `capacity - window` prefix
      positions by pooled score, in the op's `order`, then the window;
    * `snapkv.gather`, once for the keys and once for the values.

    A static prompt shorter than `capacity` becomes the bypass (every
    position, gathered); a dynamic one gets the whole op's run-time checks
    and an `scf.if` between the two. `top_positions` and `gather` implement
    `TilingInterface` over their parallel dimensions, and
    `convert-snapkv-to-linalg` lowers each stage to the same linalg ops it
    emits for the whole select (indices and rows are bit-identical).
    `scoring recent` and `random` rank without scores and stay whole.
    `snapkv.select_adaptive` decomposes the same way, with a second,
    flattened `snapkv.top_positions` that shares the budget among the heads
    (see its description); with `adaptive=false` it is left to
    `convert-snapkv-to-linalg`, which decomposes it itself and, with
    `tiling=gpu`, lays the parts between the stage ops out as kernels. The
    CPU pipeline runs this pass after `snapkv-outline-select` (and
    `convert-snapkv-to-linalg` decomposes any select with a CPU
    configuration left); the GPU pipeline with `decompose-select=true`
    runs it with `adaptive=false` (its default lowers a select whole, a
    layout that fuses pooling, selection and gather into one block per
    row). A select's `snapkv.lowering_config` goes to its stage ops.
  }];
  let options = [
    Option<"adaptive", "adaptive", "bool", /*default=*/"true",
           "Also split snapkv.select_adaptive">,
  ];
}

def ReportCache : Pass<"snapkv-report-cache", "::mlir::ModuleOp"> {
  let summary = "Print the persistent K/V cache ledger of every snapkv.select "
                "(and snapkv.select_adaptive)";
  let description = [{
    Treats each `snapkv.select` in the module as one layer's prompt cache
    (and each `snapkv.select_adaptive`, whose heads keep different numbers of
    positions but `Hc * min(L, C)` in all: the same bytes, with `kept` their
    mean) and prints, for a prompt of `prompt-length` tokens followed by `generated`
    decoded tokens, the bytes of persistent K/V per layer and in total
    (`docs/semantics.md`, the memory ledger):

    * native full cache: `2 * B * Hkv * (L + g) * D * e`;
    * compacted: `2 * B * Hc * (min(L, C) + g) * D * e`, with `Hc = Hq` for
      `gqa expand` and `Hkv` for `mean` / `max`;

    `e` is the byte size of the element type. A module rewritten with
    `kv-dtype=i8` (`snapkv.kv_cache`) holds `D + 4` bytes per compacted row
    instead of `D * e` (int8 values and an f32 scale): the compacted and
    decode-peak bytes count that, and each layer's JSON `row_bytes` says
    which. Weights, workspaces and
    temporary attention tensors are not counted. The module is not changed.

    A select in a function that is called (`func.call`) counts once per run:
    a layer function that the model's entry points call N times is N layers.
    Entry points are the functions nothing refers to; a function used other
    than by `func.call`, or called recursively, is an error.

    `format=table` (the default) prints a table for people. `format=json`
    prints one JSON object for programs:

    ```
    {
      "prompt_length": L, "generated": g,
      "layers": [{"layer": 0, "gqa": "expand", "B": 1, "Hkv": 8, "Hc": 32,
                  "D": 128, "e": 2, "row_bytes": 256, "kept": 1024,
                  "full": ..., "compacted": ...},
                 ...],
      "total": {"layers": N, "full": ..., "compacted": ..., "ratio": ...}
    }
    ```

    Byte counts are JSON integers (unsigned 64-bit); `ratio` is
    compacted / full, `null` when the full cache is empty. Any other format is
    an error of the option parser.
  }];
  let options = [
    Option<"promptLength", "prompt-length", "int64_t", /*default=*/"0",
           "Prompt length L (required, > 0)">,
    Option<"generated", "generated", "int64_t", /*default=*/"0",
           "Decoded tokens g whose K/V have been appended">,
    Option<"format", "format", "::mlir::snapkv::ReportFormat",
           /*default=*/"::mlir::snapkv::ReportFormat::table", "Output format",
           [{::llvm::cl::values(
             clEnumValN(::mlir::snapkv::ReportFormat::table, "table",
                        "a table for people (the default)"),
             clEnumValN(::mlir::snapkv::ReportFormat::json, "json",
                        "one JSON object: prompt_length, generated, layers, "
                        "total"))}]>
  ];
}

def DescribeModule : Pass<"snapkv-describe-module", "::mlir::ModuleOp"> {
  let summary = "Print the module's functions, weights, calls and selects as "
                "JSON";
  let description = [{
    The contract between the compiler and the programs around it (the
    Python runner, `snapkv` CLI, evaluation): one JSON object on standard
    output, the module unchanged (run it with `-o /dev/null`):

    ```
    {
      "version": 1,
      "attributes": {"snapkv.refusal": {"reason": ..., ...}, ...},
      "functions": [{
        "name": "prefill", "visibility": "public", "external": false,
        "arguments": [{"type": T, "weight": "model.norm.weight" | null,
                       "transposed": false}, ...],
        "results": [T, ...],
        "attributes": {"snapkv.exposed_scores": [...], ...},
        "callees": ["prefill_layer", ...],
        "selects": [{"op": "snapkv.select", "window": 32, "capacity": 1024,
                     "kernel": 5,
                     "pooling": "avg", "gqa": "expand", "order": "position",
                     "scoring": "votes", "scale": 0.125 | null,
                     "sinks": null, "seed": null,
                     "properties": "{capacity = 1024 : i64, ...}",
                     "operands": [T, T, T], "results": [T, T, T]}, ...],
        "tensor_types": [T, ...],
        "glue": null | [{"op": "call", "callee": "f", "operands": [0, 1],
                         "results": [2, 3]},
                        {"op": "cast", "operands": [2], "results": [4],
                         "type": T},
                        {"op": "return", "operands": [4, 3]} ]
      }, ...]
    }
    ```

    A weight argument of `snapkv-quantize-weights` adds `"quantized":
    "q8_0"` (its int8 values) or `"q8_0_scales"` (their scales).
    `T` is `{"text": "tensor<1x?x64xf32>", "shape": [1, null, 64],
    "element": "f32"}`; `shape` and `element` are present for ranked
    tensors and for memrefs of the identity layout, which add `"memref":
    true` (buffers the caller passes and the function may write, as
    `snapkv-append-in-place` makes the caches). `attributes` holds the attributes in the `snapkv.`
    namespace (builtin attributes as JSON values, others as their MLIR
    text). `callees` are the functions called anywhere in the body, in
    order of first call; `selects` every `snapkv.select` and
    `snapkv.select_adaptive` in the body (nested regions included) in order,
    `op` saying which (an adaptive one adds `floor`; its `order` is
    `position`, its `sinks` and `seed` null); `tensor_types` every distinct tensor
    type of a value the body defines. `glue` is the body as steps when it
    holds only `func.call`, `tensor.cast` and `func.return` (values are
    numbered: the arguments 0..n-1, then each result as it is defined), else
    null. `properties` is the select's properties as MLIR text, for writing
    the op again in generic form.
  }];
}

def DropGlue : Pass<"snapkv-drop-glue", "::mlir::ModuleOp"> {
  let summary = "Erase entry points that only call, and make what they call "
                "public";
  let description = [{
    Erases each function named in `functions`, which must hold one block of
    `func.call`, `tensor.cast` and `func.return` only, and makes every
    function they call public (declarations stay private). The Python runner runs such an entry point
    itself, step by step from `snapkv-describe-module`'s `glue`, calling the
    compiled callees' C interfaces: fewer compiled functions then take every
    weight (hundreds of memref descriptors, slow for clang). The runner
    erases only the entry points it calls once per prompt; a decode step stays
    compiled (one call per token, not one per layer). A name that is not a
    function, or a function that does more, is an error.
  }];
  let options = [
    ListOption<"functions", "functions", "std::string",
               "Entry points to erase (each only calls, casts and returns)">
  ];
}

def FuseAttention : Pass<"snapkv-fuse-attention", "::mlir::func::FuncOp"> {
  let summary = "Replace imported causal attention with snapkv.attention";
  let description = [{
    Finds the attention torch-mlir imports for a Llama-family layer (the
    matcher of `snapkv-compress-kv-cache`, docs/model-ir.md: Q x K^T, the
    constant scale, the additive causal mask, the softmax with or without
    SDPA's fully-masked-row guard, the GQA repeat and P x V), or the SDPA the
    export kept as one `snapkv.sdpa` (its mask condition read the same way),
    and replaces it with one `snapkv.attention` on the queries and the keys
    and values before the repeat, when that op computes exactly the same
    attention:

    * a prompt's self-attention: the mask compares one arange of positions
      with itself (row `i` sees keys `0 .. i`, `snapkv.attention`'s
      alignment when `Lq = Lk`). A sliding window is accepted only when it
      covers the whole static prompt;
    * a decode step's one query over the cache with the new row appended,
      when the mask compares the keys' positions with the length of that
      cache before the append (`tensor.dim` of the cache, or its static
      length): every key is visible;
    * a decode step whose mask compares the keys' positions with another
      value: another cache's length or a function argument (the `position`
      input), plus a constant. That value becomes the op's `offset`, so that
      keys past it stay hidden whatever the caller passes;
    * a decode step without a mask (as `snapkv-compress-kv-cache` leaves
      it): every key is visible;
    * a prompt chunk over a cache (chunked prefill): the mask compares the
      keys' positions with `s + row`, `s` a cache's length (HuggingFace's
      `cache_position`) or an integer argument, plus a constant; `s` plus
      the constant becomes the op's `offset`.

    A sliding window (narrower than a static prompt, dynamic, or in a decode
    step), softcapping or anything else the matcher does not recognise is
    left as it is. The scores, mask, softmax and repeat copies become dead
    and are erased. One difference remains for inputs the importer accepts
    only by broadcasting: a decode mask built from a different, empty cache
    (a one-position mask broadcast over every key) shows every key, where
    the offset shows the first.

    The result is the same attention in another summation order
    (FlashAttention's online softmax in f32): logits agree with the
    unfused module to rounding. `--snapkv-cpu-pipeline` runs it first
    unless `fuse-attention=false`, so that the original and the SnapKV
    rewritten module are compiled alike.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::snapkv::SnapKVDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let statistics = [
    Statistic<"numFused", "fused-attentions", "Attentions replaced by snapkv.attention">
  ];
}

def AppendInPlace : Pass<"snapkv-append-in-place", "::mlir::ModuleOp"> {
  let summary = "Make a decode step write its new cache row into buffers the "
                "caller owns";
  let description = [{
    A decode step imported from PyTorch appends one row to each cache
    (`tensor.concat dim(d) %cache, %row`) and returns the longer tensor, so
    the compiled step allocates and copies every cache on every step. This
    pass changes the function named `func` so that the caller owns the
    caches:

    * each cache argument becomes a memref of the same shape (a buffer with
      room for more rows along `d`), and one argument `rows : tensor<1xi64>`
      is added after the last argument that is not a weight
      (`snapkv.weight`): how many rows of every buffer are valid;
    * the new row is written in place at row `rows`
      (`tensor.insert_slice` into `bufferization.to_tensor restrict writable`
      of the buffer, `bufferization.materialize_in_destination` back), what
      read the concatenation reads the first `rows + 1` rows
      (`tensor.extract_slice`), and what read the old cache's length reads
      `rows`;
    * the appended caches are no longer results; the caller finds them in
      its buffers, `rows + 1` rows long;
    * run-time checks (`cf.assert`): `rows >= 0` and `rows` below every
      buffer's capacity.

    A cache argument qualifies when its only uses are one such concatenation
    (with one static row along `d`, its result returned once) and
    `tensor.dim`; any other read of the old cache would need its rows after
    the write, and the function is left unchanged. `func` may also be an
    entry point that passes its cache arguments straight to functions that
    append (one per layer, as `snapkv export --hf` writes them) and returns
    their appended caches: those functions are rewritten, called only from
    there, and the entry point gets the `rows` argument too. Every rewritten
    function records the new convention in `snapkv.append_in_place = {rows =
    <argument>, buffers = [<arguments>], dim = d}` (what the Python runner
    reads through `snapkv-describe-module`). Anything else leaves the module
    unchanged with a warning that says why.

    `layout=pool` makes a batched decode step (one sequence per batch row:
    `@decode_batch` of `snapkv export --hf --batch N`) advance sequences of
    different lengths at once: each (keys,
    values) pair of caches `[B, Hc, T, D]` becomes one pool `memref<1x?xD>`
    shared by all batch rows, in which head `c` of batch row `b` is a
    segment of `capacities[b, c]` rows from `starts[b, c]` on with
    `lengths[b, c]` valid (any order; the caller keeps segments disjoint).
    The rows argument is `tensor<P x 3 x B x Hc x i64>` (per pair: starts,
    lengths, capacities), the new row goes at `starts + lengths`, checked
    against the segment's capacity and the pool's end, and each attention
    over the caches (a `snapkv.attention` of one query row without offset:
    run `snapkv-fuse-attention` first) becomes, batch row by batch row, a
    `snapkv.ragged_attention` over that row's segments. An entry point
    calling one function per layer gets one rows argument per call
    (`rows` in the attribute is then the list of them, and `layout =
    "pool"`), which it passes through.

    Run it after `snapkv-fuse-attention` (the fusion recognises the
    concatenation, not the slices). The buffers are written by the
    compiled code: one-shot bufferization (`bufferize-function-boundaries`)
    writes them in place and copies nothing.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::cf::ControlFlowDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"funcName", "func", "std::string", /*default=*/"\"decode\"",
           "The decode step (or the entry point calling one per layer)">,
    Option<"layout", "layout", "std::string", /*default=*/"\"uniform\"",
           "uniform (one row count per buffer) or pool (a batched decode: "
           "one pool per cache, a segment per sequence and head)">
  ];
}

def ExposeScores : Pass<"snapkv-expose-scores", "::mlir::ModuleOp"> {
  let summary = "Return what each snapkv.select ranks by as extra function "
                "results";
  let description = [{
    For inspection and plots (`snapkv visualize`): in each function named by
    `functions` (default: every function with a body that holds a
    `snapkv.select`), a `snapkv.score` with the same queries, keys and
    clauses is added next to every `snapkv.select`, and the function
    returns, after its own results and for each select in order, five more:
    the select's queries, its keys, its indices, and the score's votes and
    pooled scores (`[B, Hc, L - W] x f32`). The function gets the attribute
    `snapkv.exposed_scores`, an array with one string per select listing its
    clauses (`"window=8 capacity=16 kernel=5 pooling=avg gqa=expand
    order=position"`, plus `scale=<float>` when the select has one).

    A function to change must end in a single `func.return` and, by default,
    must not be called in the module (its callers would no longer match);
    otherwise the pass fails with an error at the function and changes
    nothing. With `through-callers`, a called function is changed too: every
    `func.call` of it gets the new results, and its caller returns them after
    its own results, call by call, and gets `snapkv.exposed_scores` for them
    (a model whose entry point only calls one function per layer thus exposes
    every layer's scores while each layer stays its own function, which the
    runner compiles once). The callers must end in a single `func.return`, be
    uncalled themselves and not be changed for their own selects. A named
    function that does not exist or holds no select is an error as well.
  }];
  let dependentDialects = ["::mlir::snapkv::SnapKVDialect"];
  let options = [
    ListOption<"functions", "functions", "std::string",
               "Functions to change (default: every one with a select)">,
    Option<"throughCallers", "through-callers", "bool", "false",
           "Also change called functions, passing their new results out "
           "through their callers' returns">
  ];
}

def CompressKVCache : Pass<"snapkv-compress-kv-cache", "::mlir::ModuleOp"> {
  let summary = "Make prefill cache SnapKV-compacted K/V and decode attend "
                "over it with logical positions";
  let description = [{
    Rewrites a model module imported by torch-mlir (`docs/model-rewrite.md`;
    `docs/model-ir.md` shows the IR it expects) that holds a prefill function
    (token ids in; logits and per-layer K/V out) and a decode function (one
    token, its logical position and per-layer K/V in; logits and updated K/V
    out).

    * **Prefill.** Every attention is recognised, eager or SDPA (Q.K^T batch
      matmul, a constant scale after it or split over Q and K, additive
      causal mask, softmax with or without SDPA's fully-masked-row guard,
      P.V batch matmul, GQA repeat); a sliding-window mask only where the
      window provably covers the prompt, logit softcapping never. The K/V
      that attention reads and the function returns are replaced, in the
      results only, by the outputs of a `snapkv.select` whose queries are the
      last `window` rows of that attention's post-RoPE Q and whose `scale` is
      the attention's effective f32 scale. Prefill's own attention still
      uses the full K/V. The results take the compacted shape
      `[B, Hc, min(L, capacity), D]`.
    * **Decode.** With `gqa=expand` the cache arguments take `Hq` heads: the
      new token's K/V are repeated to `Hq` heads before the append and the
      attention no longer repeats the cache. With `mean`/`max` the head
      count is unchanged. The causal mask, which the importer derives from
      the physical cache length, is rebuilt for logical positions: one new
      token at logical position `L + g` sees every cached key (all kept keys
      precede it), so the mask add is removed after the pass has proven that
      the mask is `key <= query` with the query at the cache length or at the
      position argument. RoPE must take its position from a function
      argument that is not a cache; if it is derived from a cache's length,
      the module is refused.
    * The i-th cache argument of decode must correspond to the i-th cache
      result of prefill (same layer, same result positions), as the exporter
      produces them.
    * `prefill-func` / `decode-func` may name functions that the model's entry
      points call (one function per layer, called once per layer, as
      `snapkv export --hf` writes them). Their new signatures are carried to
      every `func.call`: a changed result may only be returned by the caller,
      a changed operand must be an argument of the caller used only as such
      operands, and the caller's own signature changes with them (so it must
      not be used itself).

    The pass analyses both functions completely before it changes anything.
    Whatever it does not recognise with certainty leaves every function
    unchanged with a warning that names the function and the reason, and
    records the reason in the module attribute `snapkv.refusal`
    (`{reason = "<code>", function, message[, layer]}`; the codes are listed
    in docs/model-rewrite.md); `strict=true` makes that an error, and
    snapkv-opt then exits with status 3. Decode is optional (`decode-func=""`
    rewrites prefill only).

    The defaults are `gqa=mean kernel=15`, not the published method's
    `gqa=expand kernel=5` (which is still `snapkv.select`'s own default):
    on SmolLM2-135M-Instruct's real-text tasks (docs/eval.md, "The
    defaults") kernel 15 found as many pass keys as the full cache down to
    C = L/16 in every measured cell but one, where kernel 5 found 4 of 190,
    and `mean` was as accurate as
    `expand` while holding `Hkv` instead of `Hq` cache heads.

    `scoring` other than `votes` builds the same compacted model with a
    comparison ranking of the select (`snapkv.select`'s `scoring` clause):
    `prefix_votes`, `recent` with `sinks`, or `random` with `seed` (layer `l`
    draws with `seed + l`, so layers differ).

    `budget=adaptive` (Ada-KV) makes the cache ragged, so both functions take
    another form (docs/model-ir.md, "Ragged caches"):

    * prefill's K/V results are `snapkv.select_adaptive`'s packed rows
      `[B, Hc x min(L, C), D]` (head by head, `floor` positions per head at
      least), each layer's values followed by a new result, its offsets
      `[B, Hc + 1]`;
    * decode's attention is fused (`snapkv-fuse-attention`) and decode then
      writes in place as `snapkv-append-in-place` does, in the ragged layout:
      each layer's caches become buffers `[B, R, D]` the caller owns, one
      argument `rows : [P, 2, B, Hc] x i64` holds each layer's head starts and
      lengths, the new token's row goes to every head at `start + length`
      (run-time checks: nothing negative, room before the next head's start
      or the buffer's end), and the attention is a
      `snapkv.ragged_attention` over each head's rows plus the new one. The
      caches are no longer results.

    `chunk=N` (chunked prefill, docs/semantics.md "Chunked prefill") also
    rewrites `extend-func`, a function that feeds a prompt chunk through the
    layers over the caches so far (the chunk's hidden states or ids, its
    first logical position and per-layer K/V in; each layer's
    `concat(cache, chunk K/V)` returned, as decode returns its append; a
    causal mask whose query rows sit at `cache length + row`; RoPE from the
    position argument). Its K/V results become a `snapkv.select` over that
    concatenation with the chunk's last `window` queries, exactly as
    prefill's: the physical mask stays right over a compacted cache (every
    cached key precedes the chunk). The module gets
    `snapkv.chunked_prefill = {chunk = N, window = W, function =
    "<extend-func>"}` for
    the runner, which feeds the first chunk to prefill and the others to the
    extend entry point. `chunk` must be at least `window`; `gqa=expand` and
    per-layer or per-head budgets are not available with it.

    `decode-interval=K` (decode-time compression) rewrites the same extend
    function and records `snapkv.decode_compression = {interval = K, window
    = W, capacity = C, function}`: every K generated tokens, a runner whose
    caches hold more than C rows feeds the last W generated tokens through
    the extend entry point again, over the caches without their rows (the
    same tokens at the same positions over the same earlier rows: their K/V
    and queries again), and keeps what the select keeps, C rows with those W
    tokens as the window. `decode-capacity=M` compacts to M rows instead
    (M > W): the select of the extend function keeps M, or, with `chunk`
    too, that of a copy of the extend call chain (each function renamed
    `<name>_decode`), since chunks still compact to C. The attribute's
    `capacity` is then M, `function` the copy, and `entry` names the public
    function of the chain the runner calls.

    `kv-dtype=i8` keeps the cache in 8 bits (docs/model-rewrite.md, "An
    8-bit cache"): each cached row (one token of one head) becomes `D + 4`
    i8, the values `clamp(roundeven(x / s), -127, 127)` with the row's
    symmetric scale `s = absmax / 127` (f32) in the last four bytes
    (little-endian). The select still votes with prefill's unquantized K/V
    and keeps `min(L, C)` rows, which are then quantized; decode quantizes
    the new row, appends it to the packed cache and reads the cache back as
    `q * s` where its attention read the cache. Cache arguments and results
    take the type `[B, Hc, T, D + 4] x i8`, and the module records
    `snapkv.kv_cache = {dtype = "i8", scale = "f32"}` (snapkv-report-cache
    counts `D + 4` bytes a row). Not available with `chunk`,
    `decode-interval` or `budget=adaptive`.

    A packed cache has no functional append, so `budget=adaptive` needs a
    decode that `snapkv-append-in-place` could rewrite (caches of dynamic
    length, read only by their append and run-time checks); otherwise the
    module is left unchanged (reason `ragged-decode`).
  }];
  let dependentDialects = [
    "::mlir::snapkv::SnapKVDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::cf::ControlFlowDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"window", "window", "int64_t", /*default=*/"32",
           "Observation window W (the last W prompt queries vote)">,
    Option<"capacity", "capacity", "int64_t", /*default=*/"1024",
           "Kept prompt positions per head C, window included (C > W)">,
    Option<"kernelSize", "kernel", "int64_t", /*default=*/"15",
           "Pooling kernel size (odd, >= 1), the select's `kernel`">,
    Option<"budget", "budget", "::mlir::snapkv::BudgetPolicy",
           /*default=*/"::mlir::snapkv::BudgetPolicy::uniform",
           "How the capacity is spread over the layers",
           [{::llvm::cl::values(
             clEnumValN(::mlir::snapkv::BudgetPolicy::uniform, "uniform",
                        "every layer keeps `capacity`"),
             clEnumValN(::mlir::snapkv::BudgetPolicy::pyramid, "pyramid",
                        "PyramidKV: more in lower layers, fewer in upper ones, "
                        "capacity - window prefix positions on average"),
             clEnumValN(::mlir::snapkv::BudgetPolicy::inverted_pyramid,
                        "inverted-pyramid",
                        "the pyramid's capacities the other way up: fewer in "
                        "lower layers, more in upper ones"),
             clEnumValN(::mlir::snapkv::BudgetPolicy::adaptive, "adaptive",
                        "Ada-KV: a layer's heads share Hc x (capacity - "
                        "window) prefix positions (snapkv.select_adaptive); "
                        "the cache is ragged"))}]>,
    Option<"pyramidBeta", "pyramid-beta", "int64_t", /*default=*/"20",
           "budget=pyramid: the top layer keeps (capacity - window) / beta "
           "prefix positions (at least 1), the bottom one twice the average "
           "less that (inverted-pyramid: the other way up)">,
    Option<"floor", "floor", "int64_t", /*default=*/"0",
           "budget=adaptive: prefix positions every head keeps at least "
           "(Ada-KV's safeguard, 0 .. capacity - window)">,
    Option<"pooling", "pooling", "::mlir::snapkv::PoolingKind",
           /*default=*/"::mlir::snapkv::PoolingKind::avg",
           "Pooling of the votes",
           [{::llvm::cl::values(
             clEnumValN(::mlir::snapkv::PoolingKind::avg, "avg",
                        "mean over the kernel, zero padded"),
             clEnumValN(::mlir::snapkv::PoolingKind::max, "max",
                        "maximum over the in-range neighbours"))}]>,
    Option<"gqa", "gqa", "::mlir::snapkv::GqaPolicy",
           /*default=*/"::mlir::snapkv::GqaPolicy::mean",
           "GQA policy of the compacted cache",
           [{::llvm::cl::values(
             clEnumValN(::mlir::snapkv::GqaPolicy::expand, "expand",
                        "one selection per query head (Hq cache heads)"),
             clEnumValN(::mlir::snapkv::GqaPolicy::mean, "mean",
                        "votes averaged over a kv head's query heads (Hkv "
                        "heads)"),
             clEnumValN(::mlir::snapkv::GqaPolicy::max, "max",
                        "votes maximised over a kv head's query heads (Hkv "
                        "heads)"))}]>,
    Option<"order", "order", "::mlir::snapkv::Order",
           /*default=*/"::mlir::snapkv::Order::position",
           "Order of the kept prompt positions",
           [{::llvm::cl::values(
             clEnumValN(::mlir::snapkv::Order::position, "position",
                        "ascending positions"),
             clEnumValN(::mlir::snapkv::Order::score, "score",
                        "the prefix by descending score, then the window"))}]>,
    Option<"scoring", "scoring", "::mlir::snapkv::Scoring",
           /*default=*/"::mlir::snapkv::Scoring::votes",
           "What ranks the prefix",
           [{::llvm::cl::values(
             clEnumValN(::mlir::snapkv::Scoring::votes, "votes",
                        "SnapKV: the window's votes"),
             clEnumValN(::mlir::snapkv::Scoring::prefix_votes, "prefix_votes",
                        "votes under a prefix-only softmax (comparison)"),
             clEnumValN(::mlir::snapkv::Scoring::recent, "recent",
                        "StreamingLLM: sinks and the most recent positions"),
             clEnumValN(::mlir::snapkv::Scoring::random, "random",
                        "a seeded uniform draw (comparison)"),
             clEnumValN(::mlir::snapkv::Scoring::sum, "sum",
                        "accumulated attention: every query of the prompt "
                        "(or chunk) votes (H2O, OpenVINO's SUM)"),
             clEnumValN(::mlir::snapkv::Scoring::norm_sum, "norm_sum",
                        "sum divided by the queries that see the position "
                        "(OpenVINO's NORM_SUM)"),
             clEnumValN(::mlir::snapkv::Scoring::keydiff, "keydiff",
                        "KeyDiff: keys least like their head's mean key "
                        "direction (question-agnostic)"))}]>,
    Option<"sinks", "sinks", "int64_t", /*default=*/"4",
           "scoring=recent: leading positions always kept (default 4, or "
           "capacity - window if smaller)">,
    Option<"seed", "seed", "int64_t", /*default=*/"0",
           "scoring=random: seed of the draw (layer l uses seed + l)">,
    Option<"block", "block", "int64_t", /*default=*/"1",
           "Block-granular selection: the selects keep whole blocks of "
           "`block` prefix positions, ranked by their summed pooled scores "
           "(the select's `block`; capacity - window, and decode-capacity - "
           "window, must be multiples of it; 1: single positions)">,
    Option<"prefillFunc", "prefill-func", "std::string",
           /*default=*/"\"prefill\"", "Name of the prefill function">,
    Option<"decodeFunc", "decode-func", "std::string",
           /*default=*/"\"decode\"",
           "Name of the decode function (empty: rewrite prefill only)">,
    Option<"chunk", "chunk", "int64_t", /*default=*/"0",
           "Chunked prefill: the prompt is fed `chunk` tokens at a time "
           "(at least `window`) and the cache compacted back to `capacity` "
           "after each chunk; needs `extend-func` (0: one-shot prefill)">,
    Option<"decodeInterval", "decode-interval", "int64_t", /*default=*/"0",
           "Decode-time compression: every `decode-interval` generated tokens a "
           "cache of more than `capacity` rows is compacted back to `capacity`, "
           "the last `window` generated tokens voting (through `extend-func`, "
           "run by the runner); 0: off">,
    Option<"decodeCapacity", "decode-capacity", "int64_t", /*default=*/"0",
           "Decode-time compression: the rows a cache is compacted back to "
           "(greater than `window`; 0: `capacity`). With `chunk` and another "
           "value the extend call chain is copied as `<name>_decode`">,
    Option<"staging", "staging", "int64_t", /*default=*/"0",
           "Two-level chunked prefill: the chunks before the last are "
           "compacted to `staging` rows (>= capacity) ranked by "
           "`staging-scoring`, through a copy of the extend call chain "
           "(`<name>_stage`); the last chunk's select keeps `capacity` by the "
           "prompt's last `window` queries. Needs chunk; 0: off">,
    Option<"stagingScoring", "staging-scoring", "::mlir::snapkv::Scoring",
           /*default=*/"::mlir::snapkv::Scoring::sum",
           "staging: what ranks a staged chunk's rows",
           [{::llvm::cl::values(
             clEnumValN(::mlir::snapkv::Scoring::sum, "sum",
                        "accumulated attention of the chunk's queries"),
             clEnumValN(::mlir::snapkv::Scoring::norm_sum, "norm_sum",
                        "sum divided by the queries that see the position"),
             clEnumValN(::mlir::snapkv::Scoring::votes, "votes",
                        "the chunk's last `window` queries' votes"),
             clEnumValN(::mlir::snapkv::Scoring::prefix_votes, "prefix_votes",
                        "votes under a prefix-only softmax"),
             clEnumValN(::mlir::snapkv::Scoring::keydiff, "keydiff",
                        "KeyDiff: the chunk's and staged keys least like "
                        "their head's mean key direction"))}]>,
    Option<"stagingCarry", "staging-carry", "bool", /*default=*/"false",
           "staging with staging-scoring sum or norm_sum: carry each staged "
           "row's accumulated score from chunk to chunk (H2O / OpenVINO): a "
           "row ranks by its carried score plus the new chunk's votes, not by "
           "the chunk's alone. The staged entry point takes and returns one "
           "f32 score per row per cache head after each layer's values">,
    Option<"extendFunc", "extend-func", "std::string",
           /*default=*/"\"extend\"",
           "chunk=N: name of the function that extends the caches by a "
           "prompt chunk (chunk, its first position and the caches in)">,
    Option<"kvDtype", "kv-dtype", "::mlir::snapkv::KVCacheType",
           /*default=*/"::mlir::snapkv::KVCacheType::same",
           "Element type of the compacted K/V cache",
           [{::llvm::cl::values(
             clEnumValN(::mlir::snapkv::KVCacheType::same, "same",
                        "the model's element type"),
             clEnumValN(::mlir::snapkv::KVCacheType::i8, "i8",
                        "int8 rows with a per-token per-head f32 scale "
                        "(absmax / 127), D + 4 bytes a row"))}]>,
    Option<"strict", "strict", "bool", /*default=*/"false",
           "Refusing to rewrite is an error instead of a warning">
  ];
}

def QuantizeWeights : Pass<"snapkv-quantize-weights", "::mlir::ModuleOp"> {
  let summary = "Take a model's projection weights as GGUF Q8_0 or Q4_1 "
                "blocks, dequantized inside the matmuls";
  let description = [{
    Each argument of a public function that is a checkpoint weight taken
    transposed (`snapkv.weight`, `snapkv.transposed`, `tensor<KxNxf32>` or
    `tensor<KxNxbf16>` with K a multiple of 32) and only used as the
    right-hand operand of `linalg.matmul` (of a left-hand operand of its type
    into f32; directly, or through calls to private functions that only do
    that with it, every call passing such a weight) becomes two:
    `tensor<KxNxi8>` (`snapkv.quantized = "q8_0"`) and its scales
    `tensor<(K/32)xNxf32>` (the same `snapkv.weight`, `snapkv.transposed`,
    and `snapkv.quantized = "q8_0_scales"`): the weight is `scale[k / 32, n]
    * value[k, n]`, GGUF Q8_0's blocks of 32 along the reduction. The
    callees' arguments and the calls change with them.

    `format=q4_1` (GGUF Q4_1, the shipped SmolLM2 file's projections) takes
    the weight as `tensor<(K/2)xNxi8>` (`"q4_1"`: per block of 32 rows, 16
    rows of bytes, value j of the block in the low nibble of byte row j and
    value 16 + j in its high nibble, ggml's order), its scales `d` and mins
    `m` (`"q4_1_scales"`, `"q4_1_mins"`, `tensor<(K/32)xNxf32>` each): the
    weight is `q * d + m`, in f32 as gguf-py dequantizes it. A one-row
    product is one `linalg.generic` over (m, k / 32, h, j, n) reading nibble
    h of byte (k / 32, j, n) in its body (Codegen/Q41Contraction.h); a
    prompt's rows dequantize the weight first, as for Q8_0.
    `weight-formats` names weights in another format (SmolLM2's tied
    embedding is Q8_0 beside its Q4_1 projections); a callee's argument
    changes only when every call passes it weights of one format.

    A matmul of one row by such a weight (a decode step's projection, the
    last row's logits) becomes one `linalg.generic` over (m, k / 32, k % 32,
    n) whose body widens the int8 value, multiplies it by its scale (exactly
    the dequantized f32 weight: an f16 scale times an int8 is exact in f32)
    and multiply-adds it (a bf16 activation widened to f32 first): the
    weights are read as one byte each. A matmul of more rows (a prompt)
    dequantizes the weight to the weight's type first (bf16: the product
    rounded), once per call (K x N conversions against the product's M x K
    x N multiply-adds), and keeps the matmul (bf16's takes the bf16
    microkernel). The runner binds the values and scales
    (`snapkv-describe-module` reports `"quantized"` per argument).

    `activations=i8` (llama.cpp's form of a Q8_0 matrix product; it changes
    the numerics, so it is never the default) quantizes the activations
    too, a decode step's row and a prompt's rows alike: per row and block of
    32, the scale `max|x| / 127` (f32) and the values
    `round(x / scale)` (to nearest, halves away from zero; a block of zeros
    has scale 0 and values 0), then one `linalg.generic` over (m, k / 32, k
    % 32 / 4, k % 4, n) of body `out + sitofp(extsi(a) * extsi(q)) *
    (scale_a * scale_q)`: the products are exact integers, and
    snapkv-vectorize sums each block's 32 in i32 before the one multiply by
    the scales (on AVX512_VNNI with `vpdpbusd`). Its weights' values are
    taken packed by 4 rows, `tensor<(K/4)xNx4xi8>` (`snapkv.quantized =
    "q8_0_packed"`; `linalg.pack` of the `[K, N]` values with
    inner_dims_pos = [0] and inner_tiles = [4]: each column's 4 consecutive
    values adjacent, as `vpdpbusd` multiplies them), which the runner binds
    once.
    A `q4_1` weight's one-row product takes the same int8 activations (its
    nibbles unpacked, not packed): body `out + (sitofp(a) * scale_a) * (q * d
    + m)`, which snapkv-vectorize computes as llama.cpp's Q4_1 x Q8_1 does,
    `scale_a * (d * sum q * a + m * sum a)` with the sums in i32 (`vpdpbusd`
    takes the nibbles, unsigned, as they are); a prompt's Q4_1 products
    dequantize.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect", "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"format", "format", "std::string", /*default=*/"\"q8_0\"",
           "The block format the weights are taken in (q8_0 or q4_1)">,
    ListOption<"weightFormats", "weight-formats", "std::string",
               "NAME:FORMAT entries: the weight `snapkv.weight = NAME` in "
               "FORMAT instead of `format` (a GGUF file's tensors in their "
               "own formats)">,
    Option<"activations", "activations", "std::string",
           /*default=*/"\"float\"",
           "The products' activations: float (as given, f32 or bf16) or i8 "
           "(quantized per row and block of 32, int8 x int8 block sums, the "
           "values packed by 4 rows)">
  ];
}

#endif // SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_TD
