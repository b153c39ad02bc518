#ifndef SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_TD
#define SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def ReportCache : Pass<"snapkv-report-cache", "::mlir::ModuleOp"> {
  let summary = "Print the persistent K/V cache ledger of every snapkv.select";
  let description = [{
    Treats each `snapkv.select` in the module as one layer's prompt cache and
    prints, for a prompt of `prompt-length` tokens followed by `generated`
    decoded tokens, the bytes of persistent K/V per layer and in total
    (SPEC section 4):

    * native full cache: `2 * B * Hkv * (L + g) * D * e`;
    * compacted: `2 * B * Hc * (min(L, C) + g) * D * e`, with `Hc = Hq` for
      `gqa expand` and `Hkv` for `mean` / `max`;

    `e` is the byte size of the element type. Weights, workspaces and
    temporary attention tensors are not counted. The module is not changed.
  }];
  let options = [
    Option<"promptLength", "prompt-length", "int64_t", /*default=*/"0",
           "Prompt length L (required, > 0)">,
    Option<"generated", "generated", "int64_t", /*default=*/"0",
           "Decoded tokens g whose K/V have been appended">
  ];
}

#endif // SNAPKV_DIALECT_SNAPKV_TRANSFORMS_PASSES_TD
