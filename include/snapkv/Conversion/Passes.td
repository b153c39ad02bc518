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

#endif // SNAPKV_CONVERSION_PASSES_TD
