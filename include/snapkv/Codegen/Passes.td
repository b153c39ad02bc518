#ifndef SNAPKV_CODEGEN_PASSES_TD
#define SNAPKV_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

def VectorizeLinalg : Pass<"snapkv-vectorize-linalg", "::mlir::func::FuncOp"> {
  let summary = "Tile linalg ops on buffers into vector-sized tiles and "
                "vectorise them";
  let description = [{
    CPU code generation step of `--snapkv-cpu-pipeline`, run after
    bufferisation (on tensors, bufferisation and subset hoisting would have to
    prove tile slices disjoint with Presburger queries, which took seconds per
    op once the prompt length is dynamic). Every linalg op on buffers is tiled
    with `scf.for` so that its innermost loop becomes a tile of `vector-width`
    elements and, when the innermost loop is a reduction, the innermost
    parallel loop a tile of `vector-width / 2`; all other loops get tile size
    1. An op may carry a `snapkv.tile_sizes` array attribute (set by
    `convert-snapkv-to-linalg` where it knows a better register tile); it
    replaces the default and is removed; likewise `snapkv.tile_interchange`
    orders the tile loops (for cache reuse). Tile loops whose trip count is
    not a multiple of the tile are peeled. The static tiles are then
    vectorised without masks; peeled remainders stay scalar. Finally, a
    vector accumulator that a loop reads and writes at a loop-invariant
    position of an allocation nothing else in the loop touches is carried by
    the loop instead of memory. Ops that read or write i1 buffers stay
    scalar: i1 memory is byte-per-element but i1 vectors are stored
    bit-packed. Ops the vectoriser does not support (for example the pooling
    window with its `d2 + d3` access) are left as they are and become scalar
    loops later.
  }];
  let options = [
    Option<"vectorWidth", "vector-width", "int64_t", /*default=*/"16",
           "Elements per vector along the innermost loop">
  ];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def OptimizeMath : Pass<"snapkv-optimize-math", "::mlir::func::FuncOp"> {
  let summary = "Vector-friendly f32 math: polynomial exp and FMA contraction";
  let description = [{
    Run after vectorisation, before lowering to LLVM:

    * LLVM scalarises `llvm.exp` on vectors into one `expf` call per lane;
      the upstream polynomial approximation of `math.exp` (within a few ulp of
      libm over the whole f32 range, with underflow to 0 and overflow to inf)
      stays in vector registers.
    * `arith.addf(acc, arith.mulf(a, b) fastmath<contract>)` becomes
      `math.fma(a, b, acc)`. The vectoriser turns the accumulation of a
      linalg reduction into a new `arith.addf` that does not inherit the
      multiply's `contract` flag, so LLVM alone would not fuse them.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect",
    "::mlir::vector::VectorDialect"
  ];
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

#endif // SNAPKV_CODEGEN_PASSES_TD
