#ifndef SNAPKV_CODEGEN_PASSES_TD
#define SNAPKV_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

def VectorizeLinalg : Pass<"snapkv-vectorize-linalg", "::mlir::func::FuncOp"> {
  let summary = "Tile tensor-level linalg ops into vector-sized tiles and "
                "vectorise them";
  let description = [{
    CPU code generation step of `--snapkv-cpu-pipeline`. Every linalg op on
    tensors is tiled with `scf.for` so that its innermost loop becomes a tile of
    `vector-width` elements and, when the innermost loop is a reduction, the
    innermost parallel loop a tile of `vector-width / 2`; all other loops get
    tile size 1. The tiles are then vectorised with `linalg::vectorize`
    (masked where the prompt length is dynamic). Ops the vectoriser does not
    support (for example the pooling window with its `d2 + d3` access) are left
    as they are and become scalar loops later.
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

#endif // SNAPKV_CODEGEN_PASSES_TD
