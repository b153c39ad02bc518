#ifndef SNAPKV_CONVERSION_PASSES_TD
#define SNAPKV_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConfigureLowering : Pass<"snapkv-configure-lowering"> {
  let summary = "Choose each root op's lowering, tiling and microkernel for a "
                "target, as a #snapkv.lowering_config attribute";
  let description = [{
    The strategy of a target, in one place: every `snapkv.select`, `score`,
    `top_positions`, `gather`, `select_adaptive`, `attention` and
    `ragged_attention` without a `snapkv.lowering_config` gets one chosen
    from its own shapes and element type, the target and the CPU features:

    * `key_tile`: `key-tile` if given, else 64 keys per scoring (and
      attention) tile; a scoring op's is at most its static prompt length
      (what its lowering would tile anyway).
    * `query_tile`: `query-tile` if given, else 32 query rows per attention
      tile.
    * `chunk`: `chunk` if given, else for a static prompt length the power
      of two from 16 to 1024 nearest above sqrt(prefix) (the search over the
      chunk counts against the scan of one chunk), else 0 (the lowering's
      128 for a dynamic length; `select_adaptive`'s stages choose their own).
    * `mapping`: `forall` for `cpu` (the stage ops tiled into `scf.forall`
      loops over their rows, OpenMP in the CPU pipeline), with `keep_logits` as the option says;
      `gpu_blocks` for `gpu`, with `threads` and `tensor_cores` as the
      options say (the block loops carry them to `snapkv-gpu-distribute`).
      `snapkv.attention` and `snapkv.ragged_attention` have no GPU
      lowering: the pass reports them and fails.
    * `microkernel` (CPU): for bf16 operands, `amx` where the CPU has
      `amx-bf16` and `amx-tile`, else `avx512bf16` where it has
      `avx512bf16`, else `none` (f32 FMAs on widened operands); `none` for
      every other element type and for the ops without inner products
      (`top_positions`, `gather`).

    The bf16 contractions of the rest of the module (`linalg.matmul`,
    `batch_matmul` and generic contractions, a model's layers) get the same
    microkernel choice as `snapkv.microkernel`.

    `cpu-features` is the CPU's LLVM feature names, comma-separated (a
    leading `+` is allowed, `-name` removes one): `host` (the default) asks
    the host (`llvm::sys::getHostCPUFeatures`), so a test names them to be
    deterministic. `report=-` prints what was chosen, one JSON object per
    root op and line, on stdout (`report=FILE` writes it to a file):
    `{"op", "function", "element_type", "length" (null: dynamic), "given"
    (the op had its own configuration), "config": {...} or "microkernel"}`,
    and for `cpu` the CPU's vector register width, `"vector_bits"` (512 with
    `avx512f`, 256 with `avx2` or `avx`, else 128), which the IREE route
    (`snapkv.iree_backend`) sizes its dispatches' vectors by.

    A configuration already on an op (set by hand, or by an earlier run for
    another target) is kept, so one op can be tiled differently from the
    rest. `convert-snapkv-to-linalg` then lowers each op as its
    configuration says (and records the GPU kernels' `#snapkv.tile`); both
    pipelines run this pass before it (docs/lowering.md).

    ```mlir
    // snapkv-opt --snapkv-configure-lowering="target=cpu key-tile=128"
    %k, %v, %i = snapkv.select %q, %k0, %v0 window 32 capacity 1024
        {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall,
           key_tile = 128, query_tile = 32, chunk = 64, keep_logits = true>}
        : ...
    ```
  }];
  let options = [
    Option<"target", "target", "::mlir::snapkv::LoweringTarget",
           /*default=*/"::mlir::snapkv::LoweringTarget::cpu",
           "The target whose layout and tiling the ops get",
           [{::llvm::cl::values(
             clEnumValN(::mlir::snapkv::LoweringTarget::cpu, "cpu",
                        "scf.forall groups (OpenMP)"),
             clEnumValN(::mlir::snapkv::LoweringTarget::gpu, "gpu",
                        "the GPU block layout"))}]>,
    Option<"keyTile", "key-tile", "int64_t", /*default=*/"0",
           "Key positions per scoring tile and per attention key tile (0: "
           "chosen per op)">,
    Option<"queryTile", "query-tile", "int64_t", /*default=*/"0",
           "Query rows per snapkv.attention tile (0: chosen per op)">,
    Option<"chunk", "chunk", "int64_t", /*default=*/"0",
           "Prefix positions per compaction chunk (0: chosen per op)">,
    Option<"keepLogits", "keep-logits", "bool", /*default=*/"true",
           "For the CPU: score one (batch, query head) at a time and keep its "
           "logits for the votes">,
    Option<"threads", "threads", "int64_t", /*default=*/"128",
           "For the GPU: threads per block">,
    Option<"tensorCores", "tensor-cores", "bool", /*default=*/"true",
           "For the GPU: 16-bit logits on tensor cores (warp-level MMA)">,
    Option<"cpuFeatures", "cpu-features", "std::string", /*default=*/"\"host\"",
           "The CPU's LLVM feature names, comma-separated (host: the host's)">,
    Option<"report", "report", "std::string", /*default=*/"\"\"",
           "Where to print the choices as JSON lines (-: stdout; empty: "
           "nowhere)">
  ];
  let dependentDialects = ["::mlir::snapkv::SnapKVDialect"];
}

def ConvertSnapKVToLinalg : Pass<"convert-snapkv-to-linalg"> {
  let summary = "Lower snapkv.select, snapkv.score and snapkv.attention to "
                "structured tensor-level linalg ops";
  let description = [{
    Replaces every `snapkv.select` and `snapkv.score` with the project's one
    formulation of the selection (docs/lowering.md, docs/semantics.md):
    batched `linalg.generic` ops on tensors, with the prompt axis split into
    tiles of `key-tile` keys for the scoring and chunks of `chunk` positions
    for the compaction. Per key tile: the logits, and the tile's maximum and
    sum of `exp(logit - maximum)` over the causally visible columns; these
    combine into the full softmax denominator (prefix and window columns); a
    second pass recomputes each tile's logits (or reads them back, see
    `keep-logits`) and sums the probabilities over the window rows (the
    votes); then GQA aggregation, pooling,
    order-preserving integer keys, a bitwise search for the top-k threshold,
    per-chunk counts and a per-output-slot search for the kept positions
    (ties to the lower position), the optional score order and the gather of
    the key and value rows with the same indices. Every step whose work grows
    with the prompt length is a structured op (no loop over positions or
    heads outside one), so compilers such as IREE can dispatch it; the only
    loop outside structured ops is the 32-step threshold search.

    A dynamic prompt length gets run-time checks (`cf.assert`: at least the
    window, values as long as keys, below 2^31 - 1) and an `scf.if` between
    the short-prompt bypass (`L < capacity`) and the selection.

    With a `forall` (CPU) configuration a `snapkv.select` or
    `snapkv.select_adaptive` is first split into its stage ops (its
    `AggregatedOpInterface` decomposition, as `snapkv-decompose-select`
    does), and the stage ops are tiled through their `TilingInterface`
    before they are lowered (upstream
    `scf::tileConsumerAndFuseProducersUsingSCF`): each
    `snapkv.top_positions` becomes one `scf.forall` over its (batch, head)
    rows with the `snapkv.score` it ranks fused into the same iteration
    (a score read by anything else is tiled on its own), each `snapkv.gather`
    one more. Each tile is the op of one row, lowered whole inside the loop
    with the configuration's key tile and chunk; with `keep_logits` (the
    default) the scoring of a row runs its query heads one after the other
    and keeps each head's logits between the softmax statistics and the
    votes instead of recomputing them (half the floating-point work, a
    scratch of W x L floats). The run-time checks of dynamic sizes are made
    once before the loop (a check inside a parallel loop could not return
    to the caller with `asserts=report`). An op of one row
    (`snapkv.select_adaptive`'s ranking over all heads and its gathers from
    the flattened rows) would be a loop of one iteration: its gathers are
    tiled by kept slot instead, its ranking is lowered whole. A select the
    stage ops cannot express (the comparison scorings `recent`, `random`
    and `keydiff`) is lowered whole, each of its steps (a linalg op over
    `[B, H, ...]` rows) tiled through `TilingInterface` into an
    `scf.forall` over its (batch, head) rows. No `#snapkv.tile` is recorded
    for the CPU. `tiling=none` (the default) leaves the ops without a configuration
    untiled and unannotated.

    `tiling=gpu` lays the formulation out for GPU blocks: every kernel is one
    group with `mapping = gpu_blocks` (tiled, an `scf.forall` mapped to
    `#gpu.block<...>`, which `--snapkv-gpu-pipeline` turns into one
    `gpu.launch`): (1) tile statistics, one block per (batch,
    kv head, key tile), with the block's key tile and queries staged by
    structured copies fused into the block; (2) row statistics, one block
    per (batch, kv head); (3) votes, one block per (batch, kv head, key
    tile); (4) pooling, selection and gather, one block per (batch, cache
    head), on the row's slices (the short-prompt bypass and the pooling of
    `snapkv.score` likewise). The keys form one span of whole tiles (a
    partial last tile reads zeros, which the causal mask hides), so a select
    has at most four kernels whatever the prompt length. The stage ops get
    blocks of their own: `snapkv.top_positions` one per (batch, head) row
    (the row's ranking), `snapkv.gather` one per (batch, head) row, and the
    linalg ops of `snapkv.select_adaptive`'s decomposition (the floor's
    threshold and ties, the counts, offsets and placement of each head's
    rows) one per batch row, so that nothing of a select runs on the host.

    The groups are written into the IR as the formulation emits them, so an
    op the conversion later folds or erases takes its attributes with it.

    Each op is lowered as its own `snapkv.lowering_config` says (written by
    `snapkv-configure-lowering`, see there): its `mapping` is the layout
    (`forall`: the stage ops tiled through `TilingInterface`; `gpu_blocks`:
    the kernels recorded), its sizes the lowering's. `tiling=cpu|gpu` is a thin alias for
    that pass: the ops without a configuration first get the one
    `snapkv-configure-lowering{target=cpu|gpu cpu-features=}` chooses with
    this pass's `key-tile`, `query-tile`, `chunk` and `keep-logits` (so no
    microkernel), so tile sizes are chosen in one place. With
    `tiling=none` (the default) ops without a configuration are left
    untiled, with this pass's sizes.

    `snapkv.attention` becomes a tiled online softmax (FlashAttention's
    recurrence). With `tiling=cpu` (or a `forall` configuration) it is tiled
    through its `TilingInterface` (an `scf.forall` over batch, query heads
    and tiles of `query-tile` rows; a decode step, one static row per head,
    in tiles of a kv head's group of query heads whose keys run in 4 parts
    in an `scf.forall`) and each tile decomposed into static-shaped steps
    over tiles of `key-tile` keys (docs/lowering.md); a
    `snapkv.ragged_attention`'s per-head ops are decomposed as such tiles.
    Untiled (`tiling=none`, no configuration), one `scf.for` over key tiles
    whose steps are linalg ops over every row that sees the tile (a decode
    step's single static row: one step, no loop), and no `scf.forall`: the
    form a compiler that tiles linalg itself (IREE) takes: the op's own
    decomposition (`AggregatedOpInterface::decomposeOperation`). The
    `[Lq, Lk]` scores are never materialised. It has no GPU lowering yet (nor has
    `snapkv.ragged_attention`): with `tiling=gpu` the pass reports the op
    and fails.
  }];
  let options = [
    Option<"keyTile", "key-tile", "int64_t", /*default=*/"0",
           "Key positions per scoring tile and per attention key tile (0: "
           "64, at most a scoring op's static prompt length)">,
    Option<"queryTile", "query-tile", "int64_t", /*default=*/"0",
           "Query rows per snapkv.attention tile (0: 32)">,
    Option<"chunk", "chunk", "int64_t", /*default=*/"0",
           "Prefix positions per compaction chunk (0: about sqrt(prefix) for "
           "a static prompt length, 128 for a dynamic one)">,
    Option<"tiling", "tiling", "::mlir::snapkv::LoweringTarget",
           /*default=*/"::mlir::snapkv::LoweringTarget::none",
           "Configure the ops without a configuration as "
           "snapkv-configure-lowering's target with these sizes (an alias)",
           [{::llvm::cl::values(
             clEnumValN(::mlir::snapkv::LoweringTarget::none, "none",
                        "the formulation only"),
             clEnumValN(::mlir::snapkv::LoweringTarget::cpu, "cpu",
                        "stage ops tiled into scf.forall loops"),
             clEnumValN(::mlir::snapkv::LoweringTarget::gpu, "gpu",
                        "the GPU block layout"))}]>,
    Option<"keepLogits", "keep-logits", "bool", /*default=*/"true",
           "With tiling=cpu: score one (batch, query head) at a time and "
           "keep its logits for the votes instead of recomputing them">
  ];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::cf::ControlFlowDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::snapkv::SnapKVDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

#endif // SNAPKV_CONVERSION_PASSES_TD
