#ifndef SNAPKV_CONVERSION_PASSES_TD
#define SNAPKV_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertSnapKVToLinalg : Pass<"convert-snapkv-to-linalg"> {
  let summary = "Lower snapkv.select to tensor-level linalg, tensor, arith, "
                "math and scf";
  let description = [{
    Replaces every `snapkv.select` with tensor-level code that implements the
    selection exactly (SPEC section 2): batched `linalg.generic` ops compute the
    logits, causal row statistics (max and sum of the full softmax), the votes,
    GQA aggregation, pooling, order-preserving integer keys of the pooled
    scores and a bitwise radix search for the top-k threshold; `scf.for` loops
    compact the kept positions (ties to the lower position), optionally reorder
    them by score, and `linalg.generic` gathers the key and value rows with the
    same indices. Dynamic prompt lengths get a `cf.assert` that `L >= window`
    and an `scf.if` that bypasses selection when `L < capacity`.
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::cf::ControlFlowDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def ConvertSnapKVToGPU : Pass<"convert-snapkv-to-gpu"> {
  let summary = "Lower snapkv.select to two GPU-mapped parallel loop nests "
                "(votes with fused softmax statistics, select + gather)";
  let description = [{
    Replaces every `snapkv.select` with buffer-level code: the operands are
    copied to device buffers (`gpu.alloc` + `gpu.memcpy`), then two
    `scf.parallel` nests, each already mapped to blocks x threads
    (`#gpu.loop_dim_map`), become one kernel each after
    `convert-parallel-loops-to-gpu`:

    1. votes: one block per (batch, kv head). Its threads first compute the
       row maximum and sum of the full causal softmax for the G * W rows of
       that kv head's query heads; after a `gpu.barrier` they take the prefix
       columns, recompute the logits, turn them into probabilities and sum
       them over the window rows, then apply the GQA policy (one vote per
       query head for `expand`, the mean or maximum over the group
       otherwise);
    2. select: one block per (batch, cache head). Its threads pool the votes
       into order-preserving keys; after a barrier thread 0 finds the top-k
       threshold with a 32-step radix search, compacts the kept positions
       (ties to the lower position), orders them and appends the window;
       after another barrier the threads gather the key and value rows with
       the same indices.

    The logits are recomputed and never stored: no [B, Hq, W, L] tensor is
    written. Every reduction runs in one thread in a fixed order, so there
    are no atomics and the result does not depend on scheduling. Results are
    copied back to host buffers. With `device-buffers=false` all buffers stay
    on the host, each barrier-separated phase becomes a loop over the block's
    threads, and the loops run on the CPU (`--snapkv-cpu-pipeline` lowers
    them), which is how the kernels are tested without a GPU.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::cf::ControlFlowDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"deviceBuffers", "device-buffers", "bool", /*default=*/"true",
           "Place the operands, scratch and results on the device "
           "(false: host buffers, for CPU emulation of the kernels)">
  ];
}

#endif // SNAPKV_CONVERSION_PASSES_TD
