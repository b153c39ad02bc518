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
    steps by one); other ops vectorise their innermost loop and take eight
    steps of a reduction that precedes a parallel innermost loop at once.
    Ops the vectoriser rejects (for example the pooling window with its
    `j + k` access, or bodies that loop) stay scalar. The accumulators of
    the tiled reductions are carried in registers by the upstream
    `loop-invariant-subset-hoisting` pass that the pipeline runs next.
  }];
  let options = [
    Option<"vectorBits", "vector-bits", "int64_t", /*default=*/"0",
           "Vector register width in bits (0: the host's, from its CPU "
           "features)">
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect"
  ];
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

def LowerAsserts : Pass<"snapkv-lower-asserts", "::mlir::ModuleOp"> {
  let summary = "Lower cf.assert to a message on stderr and abort()";
  let description = [{
    The upstream `cf.assert` lowering prints its message to stdout and then
    calls `abort()`, which does not flush stdout: when stdout is a pipe or a
    file the message is lost. This pass rewrites every `cf.assert` (after
    `convert-scf-to-cf`, when regions may hold several blocks) into a
    conditional branch to a block that writes `message + "\n"` to file
    descriptor 2 with `write` and calls `abort`, so a failed run-time check
    always says what failed and exits non-zero.
  }];
  let dependentDialects = [
    "::mlir::cf::ControlFlowDialect",
    "::mlir::LLVM::LLVMDialect"
  ];
}

#endif // SNAPKV_CODEGEN_PASSES_TD
