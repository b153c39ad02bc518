// snapkv.attention through its interfaces, one op at a time (in the style of
// IREE's tiling tests): TilingInterface tiles it over (batch, query head,
// query row) with upstream's transform.structured.tile_using_for /
// tile_using_forall, a tile being the same op on the tile's queries, the kv
// heads they read, every key and the tile's causal offset; then
// transform.structured.decompose_interface (AggregatedOpInterface) turns
// each tile into its online softmax over key tiles.
// RUN: snapkv-opt %s --split-input-file --transform-interpreter --canonicalize --cse -verify-diagnostics | FileCheck %s

// One query head and 4 query rows per tile, GQA 4 / 2: query head h reads kv
// head h / 2; row tile i starts at key offset (Lk - Lq) + i = i. The tile
// keeps the op's configuration.
// CHECK: #[[KV:.*]] = affine_map<()[s0] -> (s0 floordiv 2)>
// CHECK-LABEL: func.func @tile_rows
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x8x16xf32>, %[[K:.*]]: tensor<1x2x8x16xf32>, %[[V:.*]]: tensor<1x2x8x16xf32>, %[[I:.*]]: tensor<1x4x8x16xf32>)
// CHECK: scf.for %[[H:.*]] = %c0 to %c4 step %c1 iter_args(%[[O1:.*]] = %[[I]])
// CHECK:   scf.for %[[R:.*]] = %c0 to %c8 step %c4 iter_args(%[[O2:.*]] = %[[O1]])
// CHECK:     %[[H2:.*]] = affine.apply #[[KV]]()[%[[H]]]
// CHECK:     %[[QS:.*]] = tensor.extract_slice %[[Q]][0, %[[H]], %[[R]], 0] [1, 1, 4, 16] [1, 1, 1, 1] : tensor<1x4x8x16xf32> to tensor<1x1x4x16xf32>
// CHECK:     %[[KS:.*]] = tensor.extract_slice %[[K]][0, %[[H2]], 0, 0] [1, 1, 8, 16] [1, 1, 1, 1] : tensor<1x2x8x16xf32> to tensor<1x1x8x16xf32>
// CHECK:     %[[VS:.*]] = tensor.extract_slice %[[V]][0, %[[H2]], 0, 0] [1, 1, 8, 16] [1, 1, 1, 1] : tensor<1x2x8x16xf32> to tensor<1x1x8x16xf32>
// CHECK:     %[[OS:.*]] = tensor.extract_slice %[[O2]][0, %[[H]], %[[R]], 0] [1, 1, 4, 16] [1, 1, 1, 1]
// CHECK:     %[[T:.*]] = snapkv.attention %[[QS]], %[[KS]], %[[VS]] offset %[[R]] scale 2.500000e-01 outs(%[[OS]] : tensor<1x1x4x16xf32>) {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 4, query_tile = 4, chunk = 0, keep_logits = false>} : tensor<1x1x4x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32> -> tensor<1x1x4x16xf32>
// CHECK:     tensor.insert_slice %[[T]] into %[[O2]][0, %[[H]], %[[R]], 0] [1, 1, 4, 16] [1, 1, 1, 1]
func.func @tile_rows(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>, %init: tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %o = snapkv.attention %q, %k, %v scale 0.25 outs(%init : tensor<1x4x8x16xf32>)
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 4, query_tile = 4, chunk = 0, keep_logits = false>}
      : tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32> -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["snapkv.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loops:2 = transform.structured.tile_using_for %op tile_sizes [0, 1, 4] : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// Tiled with scf.forall over (head, tile of 3 rows) of a dynamic prompt
// length (the last tile shorter) at an explicit offset, then decomposed: a
// tile's rows are bounded (3), so its queries are zero-padded to 3 rows and
// transposed once to [D, 3], and each step is static-shaped: an scf.for over
// tiles of 4 keys (its configuration's key tile) read in place, the logits
// a [4, 3] tile, with f32 statistics for bf16 operands; keys shorter than
// one tile are zero-padded to one (the scf.if's else). The result is
// narrowed into the tile of the output.
// CHECK-DAG: #[[ROW0:.*]] = affine_map<(d0) -> (d0 * 3)>
// CHECK-DAG: #[[ROWS:.*]] = affine_map<(d0)[s0] -> (d0 * -3 + s0, 3)>
// CHECK-DAG: #[[OFF:.*]] = affine_map<(d0)[s0] -> (d0 * 3 + s0)>
// CHECK-LABEL: func.func @tile_and_decompose
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x?x8xbf16>, %[[K:.*]]: tensor<1x1x?x8xbf16>, %[[V:.*]]: tensor<1x1x?x8xbf16>, %[[POS:.*]]: index, %[[I:.*]]: tensor<1x2x?x8xbf16>)
// CHECK-NOT: snapkv.attention
// CHECK: scf.forall (%[[H:.*]], %[[T:.*]]) in (2, %{{.*}}) shared_outs(%[[O:.*]] = %[[I]])
// CHECK:   %[[R:.*]] = affine.apply #[[ROW0]](%[[T]])
// CHECK:   %[[N:.*]] = affine.min #[[ROWS]](%[[T]])
// CHECK:   tensor.extract_slice %[[Q]][0, %[[H]], %[[R]], 0] [1, 1, %[[N]], 8]
// CHECK:   affine.apply #[[OFF]](%[[T]])[%[[POS]]]
// CHECK:   tensor.pad
// CHECK:   } : tensor<1x1x?x8xbf16> to tensor<1x1x3x8xbf16>
// CHECK:   linalg.generic {{.*}} ins(%{{.*}} : tensor<3x8xbf16>) outs(%{{.*}} : tensor<8x3xbf16>)
// CHECK:   scf.if
// CHECK:     scf.for %{{.*}} = %c0 to %{{.*}} step %c1 iter_args({{.*}}) -> (tensor<3xf32>, tensor<3xf32>, tensor<3x8xf32>)
// CHECK:       tensor.extract_slice %{{.*}} [4, 8] [1, 1] : tensor<?x8xbf16> to tensor<4x8xbf16>
// CHECK:       linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<4x8xbf16>, tensor<8x3xbf16>) outs(%{{.*}} : tensor<4x3xf32>)
// CHECK:         arith.extf {{.*}} : bf16 to f32
// CHECK:         arith.extf {{.*}} : bf16 to f32
// CHECK:       math.exp
// CHECK:       scf.yield
// CHECK:   } else {
// CHECK:     tensor.pad
// CHECK:     } : tensor<?x8xbf16> to tensor<4x8xbf16>
// CHECK:   arith.truncf {{.*}} : f32 to bf16
// CHECK:   tensor.parallel_insert_slice %{{.*}} into %[[O]][0, %[[H]], %[[R]], 0] [1, 1, %[[N]], 8]
func.func @tile_and_decompose(%q: tensor<1x2x?x8xbf16>, %k: tensor<1x1x?x8xbf16>, %v: tensor<1x1x?x8xbf16>, %pos: index, %init: tensor<1x2x?x8xbf16>) -> tensor<1x2x?x8xbf16> {
  %o = snapkv.attention %q, %k, %v offset %pos outs(%init : tensor<1x2x?x8xbf16>)
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 4, query_tile = 3, chunk = 0, keep_logits = false>}
      : tensor<1x2x?x8xbf16>, tensor<1x1x?x8xbf16>, tensor<1x1x?x8xbf16> -> tensor<1x2x?x8xbf16>
  return %o : tensor<1x2x?x8xbf16>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["snapkv.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [1, 1, 3] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %decomposed = transform.structured.decompose_interface %tiled : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}

// -----

// A tile of two query heads of a GQA group of 2 reads its one kv head.
// CHECK-LABEL: func.func @tile_group
// CHECK: scf.forall (%[[H:.*]]) in (2)
// CHECK:   snapkv.attention {{.*}} outs(%{{.*}} : tensor<1x2x5x8xf32>) : tensor<1x2x5x8xf32>, tensor<1x1x5x8xf32>, tensor<1x1x5x8xf32> -> tensor<1x2x5x8xf32>
func.func @tile_group(%q: tensor<1x4x5x8xf32>, %k: tensor<1x2x5x8xf32>, %v: tensor<1x2x5x8xf32>) -> tensor<1x4x5x8xf32> {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x5x8xf32>)
      : tensor<1x4x5x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x8xf32> -> tensor<1x4x5x8xf32>
  return %o : tensor<1x4x5x8xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["snapkv.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [0, 2] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// A tile of 3 query heads would straddle two kv heads of groups of 2: the
// op refuses to tile (upstream's message spells "faild").
func.func @tile_straddles_group(%q: tensor<1x6x5x8xf32>, %k: tensor<1x3x5x8xf32>, %v: tensor<1x3x5x8xf32>) -> tensor<1x6x5x8xf32> {
  // expected-error @+3 {{faild to tile operation}}
  // expected-error @+2 {{failed to generate tiling loops}}
  // expected-note @+1 {{when applied to this op}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x6x5x8xf32>)
      : tensor<1x6x5x8xf32>, tensor<1x3x5x8xf32>, tensor<1x3x5x8xf32> -> tensor<1x6x5x8xf32>
  return %o : tensor<1x6x5x8xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["snapkv.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    // expected-error @+1 {{transform.structured.tile_using_forall failed to apply}}
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [0, 3] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// Fused into the loop of a tiled consumer (generateResultTileValue): the
// consumer's tile of whole output rows is computed by an attention on that
// tile's query rows, with the tile's causal offset.
// CHECK-LABEL: func.func @fuse_into_consumer
// CHECK: scf.forall (%[[H:.*]], %[[T:.*]]) in (2, 2)
// CHECK:   %[[R:.*]] = affine.apply #{{.*}}(%[[T]])
// CHECK:   %[[A:.*]] = snapkv.attention %{{.*}}, %{{.*}}, %{{.*}} offset %[[R]] outs(%{{.*}} : tensor<1x1x4x16xf32>)
// CHECK:   linalg.generic {{.*}} ins(%[[A]] : tensor<1x1x4x16xf32>)
// CHECK:   arith.negf
func.func @fuse_into_consumer(%q: tensor<1x2x8x16xf32>, %k: tensor<1x1x8x16xf32>, %v: tensor<1x1x8x16xf32>, %init: tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32> {
  %o = snapkv.attention %q, %k, %v outs(%init : tensor<1x2x8x16xf32>)
      : tensor<1x2x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32> -> tensor<1x2x8x16xf32>
  %e = tensor.empty() : tensor<1x2x8x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(b, h, i, d) -> (b, h, i, d)>, affine_map<(b, h, i, d) -> (b, h, i, d)>],
      iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%o : tensor<1x2x8x16xf32>) outs(%e : tensor<1x2x8x16xf32>) {
  ^bb0(%x: f32, %y: f32):
    %n = arith.negf %x : f32
    linalg.yield %n : f32
  } -> tensor<1x2x8x16xf32>
  return %r : tensor<1x2x8x16xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %g = transform.structured.match ops{["linalg.generic"]} in %root : (!transform.any_op) -> !transform.any_op
    %a = transform.structured.match ops{["snapkv.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %forall = transform.structured.tile_using_forall %g tile_sizes [1, 1, 4, 0] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %fused, %new = transform.structured.fuse_into_containing_op %a into %forall : (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// Soft-capping and a sliding window: the tiles keep them, and the
// decomposition hides the keys at or before each row's position - W (its
// window start, a vector over the rows next to its limit) and caps the
// scaled logits (c * tanh(x / c)).
// CHECK-LABEL: func.func @softcap_window
// CHECK: scf.forall
// CHECK:   linalg.generic
// CHECK:     %[[POS:.*]] = arith.addi {{.*}} : i32
// CHECK:     arith.minsi %[[POS]]
// CHECK:   linalg.generic
// CHECK:     %[[P2:.*]] = arith.addi {{.*}} : i32
// CHECK:     arith.subi %[[P2]], %c3_i32
// CHECK:   scf.for
// CHECK:     linalg.generic
// CHECK:       %[[COL:.*]] = arith.addi %{{.*}}, %{{.*}} : i32
// CHECK:       arith.cmpi sge, %[[COL]]
// CHECK:       arith.cmpi sle, %[[COL]]
// CHECK:       arith.cmpi sgt, %[[COL]]
// CHECK:       %[[X:.*]] = arith.mulf %{{.*}}, %cst
// CHECK:       %[[Y:.*]] = arith.divf %[[X]], %[[C:.*]] : f32
// CHECK:       %[[T:.*]] = math.tanh %[[Y]]
// CHECK:       arith.mulf %[[T]], %[[C]]
func.func @softcap_window(%q: tensor<1x2x?x8xf32>, %k: tensor<1x1x?x8xf32>, %v: tensor<1x1x?x8xf32>) -> tensor<1x2x?x8xf32> {
  %o = snapkv.attention %q, %k, %v softcap 30.0 sliding_window 3 outs(%q : tensor<1x2x?x8xf32>)
      : tensor<1x2x?x8xf32>, tensor<1x1x?x8xf32>, tensor<1x1x?x8xf32> -> tensor<1x2x?x8xf32>
  return %o : tensor<1x2x?x8xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["snapkv.attention"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [1, 1, 4] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %decomposed = transform.structured.decompose_interface %tiled : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
