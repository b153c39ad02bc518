#ifndef SNAPKV_DIALECT_SNAPKV_IR_SNAPKVDIALECT_TD
#define SNAPKV_DIALECT_SNAPKV_IR_SNAPKVDIALECT_TD

include "mlir/IR/OpBase.td"

def SnapKV_Dialect : Dialect {
  let name = "snapkv";
  let cppNamespace = "::mlir::snapkv";
  let summary = "SnapKV observation-window KV-cache selection";
  let description = [{
    The `snapkv` dialect expresses SnapKV prompt KV-cache compression: the last
    `window` prompt queries vote, through their full causal softmax, for earlier
    positions; the votes are pooled over neighbouring positions and each head
    keeps its top-scoring prefix positions plus the whole observation window.
    Keys and values are gathered with the same indices.
  }];
  // What the decomposition of snapkv.select and the tiling of its stage ops
  // create.
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::cf::ControlFlowDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let useDefaultAttributePrinterParser = 1;
  // snapkv.tile, snapkv.fuse, snapkv.refusal, snapkv.exposed_scores.
  let hasOperationAttrVerify = 1;
}

#endif // SNAPKV_DIALECT_SNAPKV_IR_SNAPKVDIALECT_TD
