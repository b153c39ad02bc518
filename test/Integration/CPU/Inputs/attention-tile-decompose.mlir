// The schedule of ../attention_tiled.mlir: the attentions marked `tile`
// tiled through TilingInterface (scf.forall over one head and 3 query rows)
// and each tile decomposed (AggregatedOpInterface); those marked `whole`
// decomposed untiled.
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %tile = transform.structured.match ops{["snapkv.attention"]} attributes{tile} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %tile tile_sizes [1, 1, 3] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %d1 = transform.structured.decompose_interface %tiled : (!transform.any_op) -> !transform.any_op
    %whole = transform.structured.match ops{["snapkv.attention"]} attributes{whole} in %root : (!transform.any_op) -> !transform.any_op
    %d2 = transform.structured.decompose_interface %whole : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
