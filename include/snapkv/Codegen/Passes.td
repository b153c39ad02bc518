#ifndef SNAPKV_CODEGEN_PASSES_TD
#define SNAPKV_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

def Vectorize : Pass<"snapkv-vectorize", "::mlir::func::FuncOp"> {
  let summary = "Tile linalg ops on tensors into register tiles and "
                "vectorise them with the upstream vectoriser";
  let description = [{
    CPU code generation step of `--snapkv-cpu-pipeline`, run on tensors
    before bufferisation. Every linalg op is tiled with `scf.for`
    (TilingInterface) into a register-sized tile and the tile is vectorised
    with `linalg::vectorize` (masked where a size is dynamic, so remainders
    run the same vector code). Contractions get an accumulator tile of
    `rows x vector` (the innermost parallel loop is the vector, the parallel
    loop before it gives as many rows as fit in the registers, the reduction
    steps by one). When the rows are dynamic (the tokens of a projection)
    the tile is two vectors wide and as many rows tall as the registers
    allow, and the loop over the rows is peeled: full tiles are static, the
    last few rows are taken one at a time. A single row (a decode step's
    vector x matrix) takes its reduction loop outside the loop over the
    vector's tiles, so that the matrix is read in address order. The vector
    x Q8_0 matrix product of `snapkv-quantize-weights` (one row) sums each
    block's 32 products before its scale: the block's rows of int8 values
    are widened and multiply-added, in address order, into a row of block
    sums (chunks of up to 2,048 columns, in the L1 cache), then one FMA per
    vector adds the sums times the block's scales to the result. Other ops vectorise their innermost loop and take eight
    steps of a reduction that precedes a parallel innermost loop at once.
    Ops the vectoriser rejects (for example the pooling window with its
    `j + k` access, or bodies that loop) stay scalar. The accumulators of
    the tiled reductions are carried in registers by the upstream
    `loop-invariant-subset-hoisting` pass that the pipeline runs next.

    The vector register width is `vector-bits` when given; otherwise the
    target the IR describes, upstream's DLTI target description on the
    function or an enclosing op (`max_vector_op_width` of the "CPU" device):

    ```mlir
    module attributes {dlti.target_system_spec = #dlti.target_system_spec<
        "CPU" = #dlti.target_device_spec<"max_vector_op_width" = 512 : i64>>}
    ```

    and only without either the width of the machine that runs the pass
    (AVX-512: 512, AVX/AVX2: 256, else 128), which is what a module
    compiled for the machine it runs on (the Python runner) wants.

    Contractions of bf16 operands into an f32 accumulator (`--dtype bf16`'s
    projections: `linalg.matmul ins(bf16, bf16) outs(f32)`) whose right-hand
    operand is read along the vector in rows (`[..., K, N]`) use a
    microkernel, `microkernel`:

    * `avx512bf16`: the register tile takes two reduction steps at once and
      each pair of `B` rows is interleaved in registers (one shuffle per 16
      columns) into the pairs `x86vector.avx512.dot` (`vdpbf16ps`) multiplies
      with a broadcast pair of `A`, adding into the f32 accumulators: one
      instruction per two multiply-adds of 16 columns, no widening of the
      operands to f32. An `A` laid out `[..., K, M]` (attention's bf16
      probabilities, query rows innermost) has each row's pair interleaved
      from two of its rows first. An odd or ragged remainder of the reduction (a block
      of it whose size is only known at run time) is peeled and takes the
      fallback, as does a vector x matrix product (one row: a decode step's
      projections reuse no interleaved pair across rows, and the
      interleaving cost what the dot products saved). The LLVM dialect
      conversion must enable x86vector
      (`convert-vector-to-llvm{enable-x86vector}`), and the code runs only
      on a CPU with AVX512_BF16 (`vdpbf16ps` rounds to nearest even and
      flushes denormals, so its bits differ from the fallback's).
    * `none`: the fallback: operands widened to f32 and multiplied with
      FMAs, one reduction step at a time (every other type always takes it).
    * `auto` (the default): `avx512bf16` if the machine running the pass has
      AVX512_BF16 (the runner compiles with `-march=native`), else `none`.

    The lowering strategy's choice on an op, `snapkv.microkernel =
    #snapkv.microkernel<none|avx512bf16|amx>` (written on bf16 contractions
    by `snapkv-configure-lowering` from its `cpu-features`), overrides the
    option for that op; `amx` takes the `avx512bf16` kernel (no AMX tiles
    yet; CPUs with AMX-BF16 have AVX512_BF16). In `--snapkv-cpu-pipeline`
    the option follows the pipeline's `cpu-features` too (`host`: `auto`).

    The int8 x int8 block product of snapkv-quantize-weights'
    `activations=i8` (after snapkv-parallelize) sums each block's 32 integer
    products per column in i32 and adds the sums, times the two scales, to
    the result once per block: one row in chunks of up to 65,536 columns
    whose sums stay in the caches (the weights read in address order),
    several rows (a prompt's) in strips of up to 64 columns and tiles of 4
    rows whose 16 i32 sums stay in registers over a block (each weight read
    shared by the 4 rows), the other rows one at a time. With `int8-microkernel`
    `avx512vnni` (or `snapkv.microkernel = #snapkv.microkernel<avx512vnni>`
    on the op, snapkv-configure-lowering's choice from AVX512_VNNI; 512-bit
    vectors) the weights, packed by 4 rows (`[K / 4, N, 4]`: 16 columns x 4
    rows are 64 contiguous bytes, the matrix read in address order), are
    offset to unsigned (`xor 0x80`) and multiply-added with the broadcast 4
    activations by `vpdpbusd` (an
    `llvm.inline_asm` without side effects: `llvm.call_intrinsic` has
    unknown memory effects, which the buffer deallocation after this pass
    rejects), and 128 x the block's sum of
    activations is subtracted from its sums; else (`none`) each i32 lane's 4
    bytes are sign-extended by shifts and multiplied in i32: the same
    integers.
  }];
  let options = [
    Option<"vectorBits", "vector-bits", "int64_t", /*default=*/"0",
           "Vector register width in bits (0: the module's target, else the "
           "host's)">,
    Option<"microkernel", "microkernel", "std::string", /*default=*/"\"auto\"",
           "Microkernel of bf16 x bf16 -> f32 contractions: auto (the "
           "host's), avx512bf16 (vdpbf16ps) or none (widen to f32)">,
    Option<"int8Microkernel", "int8-microkernel", "std::string",
           /*default=*/"\"auto\"",
           "Microkernel of the int8 x int8 block products (activations=i8): "
           "auto (the host's), avx512vnni (vpdpbusd) or none (widened i32 "
           "multiplies)">
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect",
    "::mlir::x86vector::X86VectorDialect"
  ];
}

def TileAndFuse : Pass<"snapkv-tile-and-fuse"> {
  let summary = "Tile each op marked #snapkv.tile and fuse its group's "
                "producers into the tile";
  let description = [{
    Applies the tiling that `convert-snapkv-to-linalg{tiling=gpu}` records
    in the IR for the GPU kernels (docs/lowering.md; the GPU pipeline runs
    it, the CPU tiles the stage ops through `TilingInterface` and records
    nothing): the root of each group carries
    `snapkv.tile = #snapkv.tile<group = N, sizes = [...], mapping = ...>`,
    the producers to fuse into its tile `snapkv.fuse = array<i64: N, ...>`.
    Groups are tiled consumers first (highest group first) with upstream's
    `tileConsumerAndFuseProducersUsingSCF` into one `scf.forall` (`mapping =
    forall`), or one mapped to `#gpu.block<x/y/z>`, the innermost tiled loop
    on x (`mapping = gpu_blocks`). A fused producer that is also used outside
    the group is yielded by the loop (computed once, in its tile). The
    attributes are removed. A root that is not tileable or works on buffers,
    sizes that do not match its loops or that tile a reduction loop (a forall
    would race on the accumulator), or two roots of one group are errors.
  }];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def FuseElementwise : Pass<"snapkv-fuse-elementwise", "::mlir::func::FuncOp"> {
  let summary = "Fuse the elementwise chains of ops whose work grows with the "
                "prompt length";
  let description = [{
    CPU step of `--snapkv-cpu-pipeline`, on tensors before
    `snapkv-parallelize`. Applies the upstream elementwise fusion patterns
    (`linalg::populateElementwiseOpsFusionPatterns`) to a producer and a
    consumer that both have a dynamic loop (their work grows with the prompt
    length: a prefill's norms, rotary embeddings and activations, a
    decomposed softmax) and sit directly in the function body, when the
    producer has no other use and the consumer reads it through a
    permutation (a broadcast producer, such as a norm's per-token statistic
    read for every feature, would be recomputed for each element it is
    broadcast to). Fewer intermediates are written, read and faulted in.
    Upstream's `linalg-fuse-elementwise-ops` fuses every chain (and
    propagates reshapes): it made a decode step of a small model 1.7x
    slower; a decode step's static-shaped ops are left alone here.
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def PackWeights : Pass<"snapkv-pack-weights", "::mlir::func::FuncOp"> {
  let summary = "Pack the weights of wide prefill matmuls into contiguous "
                "column panels";
  let description = [{
    CPU code generation step of `--snapkv-cpu-pipeline`, run on tensors
    before `snapkv-parallelize`. A `linalg.matmul` of f32 whose right-hand
    operand is a static `[K, N]` matrix with `N >= min-columns` and `N` a
    multiple of `panel`, and whose left-hand operand has more than one row (a
    prefill's projection; a decode step's vector x matrix product reads each
    weight once and is left alone), reads that matrix in panels of `panel`
    columns: a register tile steps down K rows `N x 4` bytes apart, another
    page at every step for Llama-3-8B's widths. The weight is copied into
    `[N / panel, K, panel]` (each panel contiguous) and the product becomes a
    `linalg.generic` over `(N / panel, M, panel, K)` that writes the result
    through a reshape of its `[M, N]` init: the panels are the batch loop
    that `snapkv-parallelize` gives to the threads. The rewriting is
    upstream's (`linalg::pack`, `packTranspose`, `interchangeGenericOp`,
    `lowerPack`; the result's pack and unpack, whole panels of its columns,
    become `tensor.expand_shape` / `collapse_shape`); this pass picks the
    matmuls. The copy costs one pass over the weight per call. The
    sum over K is taken in the same order, so every result bit is the
    unpacked product's.
  }];
  let options = [
    Option<"panel", "panel", "int64_t", /*default=*/"64",
           "Columns per packed panel (the register tile's width)">,
    Option<"minColumns", "min-columns", "int64_t", /*default=*/"2048",
           "Pack only weights at least this wide">
  ];
  let dependentDialects = [
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def Parallelize : Pass<"snapkv-parallelize", "::mlir::func::FuncOp"> {
  let summary = "Split the linalg ops of a function body into parallel "
                "tiles (scf.forall), contractions into cache blocks";
  let description = [{
    CPU code generation step of `--snapkv-cpu-pipeline`, run on tensors
    before `snapkv-vectorize`. Every linalg op directly in the function body
    (not one already inside a loop, such as the tiles of a lowered
    `snapkv.select`, nor one whose body does more than read, such as a
    gather with a run-time bounds check: a check that reports to the caller
    must return from a function body) is tiled with the upstream `scf::tileUsingSCF` into an
    `scf.forall`, which the pipeline turns into an OpenMP parallel loop:

    * a contraction whose innermost parallel loop has a static extent (the
      vector of its register tile) is split over its batch loop if it has
      one (the heads of an attention matmul), otherwise into blocks of
      `columns` of that loop (the output features of a projection; halved,
      down to 64, until there are at least four blocks, then lowered to a
      multiple of 32 that divides the loop if it does not, so that every
      block has the same static size), and its rows `row-block` at a time
      (threads get many equal pieces: 192 columns are only three blocks of
      64; and a block's partial sums stay in the caches between passes over
      its reduction). A batch loop's producers that are transposes
      (`snapkv-pack-weights`' weight panels) are fused into it, so that each
      thread packs the panels it multiplies. Its
      innermost reduction is then tiled by `reduction-block` with `scf.for`,
      so that the part of the right-hand operand a thread works on stays in
      its caches while all rows pass over it. The blocks run in order and
      each adds to the partial sums of the last: the summation order, and so
      every result bit, is that of the untiled op;
    * a contraction of one row (a decode step's vector x matrix product,
      which reads each element of the matrix once) is split along its static
      reduction instead, into `reduction-parts` parts (fewer if that does not
      divide it into parts of at least 32 steps): an `scf.forall` over the
      parts, each a contiguous block of the matrix's rows summed into its own
      zeroed row of a `[parts, ...]` tensor, then a `linalg.generic` that
      adds the parts to the init in part order. Each thread streams
      contiguous blocks of the matrix (column blocks read a piece of every
      row). The sum is grouped by parts, so its bits differ from the
      untiled op's, but they do not depend on the number of threads.
      Upstream's partial-reduction tiling puts the parts innermost, where
      each part's row is strided (test/Codegen/partial-reduction-upstream.mlir);
    * any other op with a dynamic loop (its work grows with the prompt
      length: a prefill's norms, rotary embeddings, activations and
      projections too narrow for column blocks, a decode step's attention
      over the cache) is split along its outermost parallel loop with more
      than one iteration into at most `chunks` pieces. With the prompt's
      attention fused into `snapkv.attention`, these ops were a third of a
      SmolLM2 prefill on one core. Ops with static shapes (a decode step's
      projections and norms) stay whole: a fork and join would cost more
      than they do.

    The loops given to threads are parallel loops or the fixed parts of a
    one-row reduction, so results do not depend on the number of threads.
  }];
  let options = [
    Option<"chunks", "chunks", "int64_t", /*default=*/"16",
           "Pieces an op other than a contraction is split into, at most">,
    Option<"columns", "columns", "int64_t", /*default=*/"1024",
           "Columns of a contraction per parallel tile (halved, down to "
           "64, until there are at least four tiles)">,
    Option<"reductionBlock", "reduction-block", "int64_t", /*default=*/"256",
           "Reduction steps of a contraction per pass over its rows">,
    Option<"reductionParts", "reduction-parts", "int64_t", /*default=*/"8",
           "Parallel parts of a one-row contraction's reduction, at most "
           "(0 or 1: split its columns instead)">,
    Option<"rowBlock", "row-block", "int64_t", /*default=*/"256",
           "Rows of a contraction per parallel tile (0: whole columns of "
           "rows)">
  ];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def FuseParallelLoops : Pass<"snapkv-fuse-parallel-loops",
                              "::mlir::func::FuncOp"> {
  let summary = "Fuse independent sibling scf.forall loops over the same "
                "iterations into one";
  let description = [{
    CPU code generation step of `--snapkv-cpu-pipeline`, run on tensors after
    `snapkv-parallelize`. Each `scf.forall` becomes one OpenMP parallel
    region: a fork and a join, and the other threads idle while the code
    between two regions runs on one. A forall is moved up to the previous
    forall of its block and fused with it (upstream's
    `fuseIndependentSiblingForallLoops`; each iteration runs the first
    loop's body, then the second's) when:

    * the two have the same bounds, steps and mapping;
    * neither writes memory (their results are tensors);
    * the later one uses no value computed by the earlier one or by the ops
      between, except by effect-free ops that need nothing else from there
      (its `tensor.empty` outputs and their fills), which move up with it;
    * no op between them has memory effects.

    A decode step's Q, K and V products (each split into the same 8 parts of
    its reduction by `snapkv-parallelize`) become one loop, and so do its
    gate and up products: 5 parallel regions per SmolLM2 decode layer
    instead of 8. Every value is computed by the same ops in the same order
    as before, so results are bit-identical and do not depend on the number
    of threads. Upstream's `scf-parallel-loop-fusion` fuses only adjacent
    `scf.parallel` loops on buffers, and the transform dialect's
    `loop.fuse_sibling` needs the loops named by a script.
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect"];
}

def OptimizeMath : Pass<"snapkv-optimize-math", "::mlir::func::FuncOp"> {
  let summary = "Polynomial f32 exp that stays in vector registers";
  let description = [{
    Run after vectorisation, before lowering to LLVM: LLVM scalarises
    `llvm.exp` on vectors into one `expf` call per lane, so `math.exp` is
    replaced by the upstream polynomial approximation (within a few ulp of
    libm over the whole f32 range, with underflow to 0 and overflow to inf),
    which stays in vector registers. Upstream MLIR has the patterns but no
    pass that applies them to `exp` alone.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def ExpandStridedCopies : Pass<"snapkv-expand-strided-copies",
                                "::mlir::func::FuncOp"> {
  let summary = "Turn memref.copy between non-contiguous buffers into "
                "linalg.copy";
  let description = [{
    Run after bufferisation, before `convert-linalg-to-loops`. The LLVM
    lowering of `memref.copy` calls the runtime's `memrefCopy`, which copies
    a buffer that is not contiguous (a slice of a larger one) one element at
    a time, with a `memcpy` call per element: the select's per-head votes
    written into its `[B, H, P]` result spent 4-6% of the score's CPU time
    there (L = 16384). As a `linalg.copy` the copy becomes a loop nest whose
    innermost, contiguous loop LLVM vectorises. Copies between contiguous buffers stay
    `memref.copy` (one `memcpy`). Upstream MLIR has no such pass.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def ScheduleParallelLoops : Pass<"snapkv-schedule-parallel-loops",
                                  "::mlir::func::FuncOp"> {
  let summary = "Give OpenMP worksharing loops without reductions a "
                "schedule other than static";
  let description = [{
    Run after `convert-scf-to-openmp`, which emits `omp.wsloop` without a
    schedule (static: each thread takes an equal, fixed share of the
    iterations). The select's tile loops run many equal iterations (1024
    key tiles x query heads per kv head at L = 16384), but a thread that is
    slowed (another process, a page fault) makes the other wait at the end
    of each loop: with the static schedule, OpenMP's wait was 11% of the
    score's CPU time on 2 threads. `guided` (the default) hands out shrinking
    chunks on demand. Iterations write disjoint results, so any schedule
    gives the same bits; loops with a reduction clause keep their schedule
    (the order in which partial results combine would follow the threads).

    A loop of at most `static-trip-count` iterations known at compile time
    keeps the static schedule: a few large, equal iterations (a decode
    step's vector x matrix product split into 8 parts, a projection's column
    blocks) gain nothing from handing them out on demand and lose the
    dispatch. Measured 2026-12-05 (2-core Xeon, `bench_gemv.py`): the 8-part
    products read 15-18 GB/s (65 % of the read bandwidth) guided and 22-26
    GB/s (92-95 %) static.
  }];
  let options = [
    Option<"staticTripCount", "static-trip-count", "int64_t",
           /*default=*/"64",
           "Loops with at most this many iterations (constant bounds) keep "
           "the static schedule (0: none)">,
    Option<"kind", "kind", "::mlir::omp::ClauseScheduleKind",
           /*default=*/"::mlir::omp::ClauseScheduleKind::Guided",
           "The schedule: static, dynamic or guided",
           [{::llvm::cl::values(
             clEnumValN(::mlir::omp::ClauseScheduleKind::Static, "static",
                        "equal shares, fixed in advance (OpenMP's default)"),
             clEnumValN(::mlir::omp::ClauseScheduleKind::Dynamic, "dynamic",
                        "one iteration at a time, on demand"),
             clEnumValN(::mlir::omp::ClauseScheduleKind::Guided, "guided",
                        "shrinking chunks, on demand"))}]>
  ];
  let dependentDialects = ["::mlir::omp::OpenMPDialect"];
}

def ByteBoolVectors : Pass<"snapkv-byte-bool-vectors"> {
  let summary = "Read and write i1 vectors of one-byte-per-element buffers "
                "through i8 vectors";
  let description = [{
    Run on the LLVM dialect, after the vector and memref conversions. A
    buffer of i1 holds one byte per element, but LLVM stores a `<N x i1>`
    vector bit-packed (llvm/llvm-project#49286), so a vector load of such a
    buffer reads the wrong bits. Every `llvm.load`, `llvm.store`,
    `llvm.intr.masked.load` and `llvm.intr.masked.store` of an i1 vector
    becomes one of `<N x i8>` with `llvm.trunc` after the load or
    `llvm.zext` before the store (gathers and scatters read each element
    through its own pointer and are right as they are).
  }];
}

def LowerAsserts : Pass<"snapkv-lower-asserts", "::mlir::ModuleOp"> {
  let summary = "Lower cf.assert to abort() with a message on stderr, or to "
                "an error the caller can read";
  let description = [{
    Run after `convert-scf-to-cf` (when a check may sit in a block of its
    own) and before the conversion to the LLVM dialect. Two modes:

    * `mode=abort` (default, for programs run by `mlir-runner`): every
      `cf.assert` becomes a conditional branch to a block that writes
      `message + "\n"` to file descriptor 2 with `write` and calls `abort`.
      (The upstream lowering prints to stdout, which `abort` does not
      flush: through a pipe or into a file the message would be lost.)
    * `mode=report` (for libraries called by a host, such as the Python
      runner): a failed check never ends the process. It stores a pointer
      to its NUL-terminated message in the module's private global
      `@snapkv_error_slot` and returns from its function at once; results
      are placeholders (memref descriptors of null pointers, zero scalars)
      that must not be read. A call to a function that can fail (one with
      a check, or one that calls such a function) is followed by a test of
      the slot, so the caller returns too and nothing reads a placeholder.
      Every public function clears the slot on entry, and the pass adds an
      exported `llvm.func @snapkv_last_error() -> !llvm.ptr` that returns
      the message of the check that failed during the last call of a
      public function, or null if that call succeeded. The slot is one per
      module instance (not per thread): a host that calls from several
      threads must serialise the call and the read of the slot. Buffers
      allocated before the failing check are not freed. A `memref.alloc`
      directly in a function body is checked too: if `malloc` returns null
      the message is `out of memory: @<function> could not allocate a
      <memref type>`.

    In report mode every check and every call of a function that can fail
    must sit directly in a `func.func` body; otherwise the pass fails with
    an error at that location. `@snapkv_error_slot` and
    `@snapkv_last_error` must not exist yet.
  }];
  let options = [
    Option<"mode", "mode", "::mlir::snapkv::AssertMode",
           /*default=*/"::mlir::snapkv::AssertMode::abort",
           "What a failed check does: abort or report",
           [{::llvm::cl::values(
             clEnumValN(::mlir::snapkv::AssertMode::abort, "abort",
                        "message on stderr, then abort()"),
             clEnumValN(::mlir::snapkv::AssertMode::report, "report",
                        "message for the caller (@snapkv_last_error), "
                        "then return"))}]>
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::cf::ControlFlowDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::ub::UBDialect"
  ];
}

def GPUDistribute : Pass<"snapkv-gpu-distribute", "::mlir::func::FuncOp"> {
  let summary = "Distribute the ops of each GPU block loop over the block's "
                "threads (tensors)";
  let description = [{
    Runs on tensors after `convert-snapkv-to-linalg{tiling=gpu}`. Inside
    every `scf.forall` mapped to `#gpu.block<...>` (one kernel), every
    TilingInterface op is tiled into an `scf.forall` mapped to
    `#gpu.thread<linear_dim_*>` with the upstream `scf::tileUsingSCF`:

    * ops with enough parallel work (or only a short reduction) have their
      parallel loops split over the threads, the innermost loop over
      consecutive threads (coalesced accesses), each thread reducing its
      outputs' whole reduction itself, in order;
    * an op whose parallel extent is small but whose reduction is long (the
      counts of the top-k threshold search over the prefix) becomes a
      partial reduction (`PartialReductionOuterParallel`): each thread
      reduces a contiguous chunk into its slot of a per-block array, and the
      merge (`linalg.reduce` over the threads, in thread order) is
      distributed like any other op. Results are therefore deterministic.

    `tensor.pad` is first rewritten into a fill and an insert, and every
    `tensor.insert_slice` in a block into a `linalg.copy` into the slice, so
    that all data movement inside a block is done by the threads.

    Consecutive thread loops are phases of the block: mapping them to
    threads puts a barrier after each (`--snapkv-gpu-pipeline`); run as
    loops on the CPU (`--snapkv-cpu-pipeline` after this pass), they run one
    after the other, which is what the barriers guarantee: that is how the
    kernels are tested without a GPU.
  }];
  let options = [
    Option<"threads", "threads", "int64_t", /*default=*/"128",
           "Threads per block">,
    Option<"tensorCores", "tensor-cores", "bool", /*default=*/"false",
           "Compute f16 and bf16 contractions (the logits) with "
           "warp-level m16n8k16 MMA">
  ];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def GPUMmaSync : Pass<"snapkv-gpu-mma-sync", "::mlir::func::FuncOp"> {
  let summary = "Lower the warps' f16/bf16 vector.contracts to mma.sync";
  let description = [{
    Runs after `snapkv-gpu-launch` on the warp-level contractions that
    `snapkv-gpu-distribute{tensor-cores}` produced (m16n8k16, f16 or bf16
    operands, f32 accumulators): upstream's
    `populatePrepareVectorToMMAPatterns` and
    `convertVectorToNVVMCompatibleMMASync`, applied to the vector ops of
    each block that holds such contractions (moved into an
    `scf.execute_region` for the rewrite, then inlined again). The upstream
    pass `convert-vector-to-gpu{use-nvgpu=true}` applies them to the whole
    function, where it also takes scalar elementwise ops (an `arith.muli`
    on indices) for MMA operands and fails.

    Before the rewrite, reads and writes of shared scratch (views of the
    launch's dynamic shared memory, which `snapkv-gpu-launch` casts to
    generic pointers) are pointed at the workgroup-space views, so that
    upstream loads the operands with `ldmatrix` and the accumulators with
    shared-memory loads. Upstream has no bf16 form (no bf16 fragments, and
    `nvgpu.mma.sync` has no bf16 lowering to NVVM): bf16 operands are read
    through f16 views of the same bytes, distributed by upstream as f16
    (the PTX ISA gives all 16-bit types one fragment layout), and each
    resulting `nvgpu.mma.sync` becomes the bf16 `nvvm.mma.sync` on the same
    registers. A bf16 operand outside shared memory is an error.
    `test/Codegen/gpu-mma-sync.mlir` shows each case.
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::NVVM::NVVMDialect",
    "::mlir::nvgpu::NVGPUDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def GPULaunch : Pass<"snapkv-gpu-launch", "::mlir::func::FuncOp"> {
  let summary = "Turn each GPU block loop (bufferized) into a gpu.launch";
  let description = [{
    Runs after bufferisation on the output of `snapkv-gpu-distribute`. Each
    `scf.forall` mapped to `#gpu.block<...>` becomes one `gpu.launch` whose
    grid is the loop's trip counts (dynamic counts included; the loop's
    `x`, `y`, `z` mapping names the grid dimension) and whose block size is
    the largest thread loop inside. The block's scratch buffers (the
    `memref.alloc`s inside the loop) are placed, in program order, in one
    dynamic shared memory region while `shared-memory-bytes` allows (static
    sizes only), and otherwise in a global buffer that the host allocates
    around the launch with one slice per block; scratch inside a thread loop
    becomes private memory. The thread loops are then mapped to thread ids by
    the upstream `mapNestedForallToThreadsImpl`, which guards loops with
    fewer iterations than threads and puts a `gpu.barrier` after each loop.
    A write outside the thread loops (which every thread would run) is an
    error.
  }];
  let options = [
    Option<"sharedMemoryBytes", "shared-memory-bytes", "int64_t",
           /*default=*/"98304",
           "Shared memory per block for scratch buffers, in bytes">
  ];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect"
  ];
}

def GPUDeviceBuffers : Pass<"snapkv-gpu-device-buffers",
                            "::mlir::func::FuncOp"> {
  let summary = "Give the kernels (gpu.launch) device buffers; keep host "
                "memory at the boundaries";
  let description = [{
    Runs after `snapkv-gpu-launch`, on buffers. Every host allocation that a
    kernel uses (directly or through views) becomes a device allocation
    (`gpu.alloc`, freed with `gpu.dealloc` at the end of its block); host
    code that reads such a buffer (returns, yields, copies, calls) reads a
    host copy (`gpu.memcpy`) made after the last kernel that uses it, so
    callers and host code only see host memory. Every other buffer a kernel reads
    (function arguments, constants) is copied to the device once, right
    after it is defined, and the kernels read the copy. A kernel that
    writes a buffer the host owns, or host code that reads a device buffer
    otherwise, is reported as an error. Run `gpu-async-region` afterwards
    so that the copies and allocations lower with `gpu-to-llvm`.
  }];
  let dependentDialects = [
    "::mlir::gpu::GPUDialect",
    "::mlir::memref::MemRefDialect"
  ];
}

#endif // SNAPKV_CODEGEN_PASSES_TD
