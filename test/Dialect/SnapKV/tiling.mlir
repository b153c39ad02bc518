// The stage ops tile through TilingInterface, one op at a time, with
// upstream's transform.structured.tile_using_forall (in the style of IREE's
// tiling.mlir): a tile is the same op on slices.
// RUN: snapkv-opt %s --split-input-file --transform-interpreter --canonicalize -verify-diagnostics | FileCheck %s

// top_positions over its rows: one (b, h) row per iteration, the row's whole
// prefix of scores and the row's slots of the result.
// CHECK-LABEL: func.func @top_positions_rows
// CHECK-SAME: (%[[S:.*]]: tensor<2x3x?xf32>, %[[I:.*]]: tensor<2x3x5xi64>)
// CHECK: scf.forall (%[[B:.*]], %[[H:.*]]) in (2, 3) shared_outs(%[[OUT:.*]] = %[[I]])
// CHECK:   %[[P:.*]] = tensor.dim %[[S]], %{{.*}} : tensor<2x3x?xf32>
// CHECK:   %[[SS:.*]] = tensor.extract_slice %[[S]][%[[B]], %[[H]], 0] [1, 1, %[[P]]] [1, 1, 1] : tensor<2x3x?xf32> to tensor<1x1x?xf32>
// CHECK:   %[[SI:.*]] = tensor.extract_slice %[[OUT]][%[[B]], %[[H]], 0] [1, 1, 5] [1, 1, 1] : tensor<2x3x5xi64> to tensor<1x1x5xi64>
// CHECK:   %[[T:.*]] = snapkv.top_positions %[[SS]] window 2 capacity 5 order score outs(%[[SI]] : tensor<1x1x5xi64>) : tensor<1x1x?xf32> -> tensor<1x1x5xi64>
// CHECK:   tensor.parallel_insert_slice %[[T]] into %[[OUT]][%[[B]], %[[H]], 0] [1, 1, 5] [1, 1, 1]
func.func @top_positions_rows(%s: tensor<2x3x?xf32>, %i: tensor<2x3x5xi64>) -> tensor<2x3x5xi64> {
  %t = snapkv.top_positions %s window 2 capacity 5 order score
      outs(%i : tensor<2x3x5xi64>) : tensor<2x3x?xf32> -> tensor<2x3x5xi64>
  return %t : tensor<2x3x5xi64>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["snapkv.top_positions"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [1, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// gather with one source head per result head: the tile's heads, slots and
// row elements of the result, the same heads of the source, all its rows.
// CHECK-LABEL: func.func @gather_tiles
// CHECK-SAME: (%[[SRC:.*]]: tensor<1x2x?x8xf32>, %[[IDX:.*]]: tensor<1x2x6xi64>, %[[INIT:.*]]: tensor<1x2x6x8xf32>)
// CHECK: scf.forall (%[[H:.*]], %[[SI:.*]], %[[DI:.*]]) in (2, 2, 2) shared_outs(%[[OUT:.*]] = %[[INIT]])
// CHECK:   %[[S:.*]] = affine.apply #{{.*}}(%[[SI]])
// CHECK:   %[[D:.*]] = affine.apply #{{.*}}(%[[DI]])
// CHECK:   tensor.extract_slice %[[SRC]][0, %[[H]], 0, %[[D]]] [1, 1, %{{.*}}, 4] [1, 1, 1, 1] : tensor<1x2x?x8xf32> to tensor<1x1x?x4xf32>
// CHECK:   tensor.extract_slice %[[IDX]][0, %[[H]], %[[S]]] [1, 1, 3] [1, 1, 1] : tensor<1x2x6xi64> to tensor<1x1x3xi64>
// CHECK:   tensor.extract_slice %[[OUT]][0, %[[H]], %[[S]], %[[D]]] [1, 1, 3, 4] [1, 1, 1, 1]
// CHECK:   snapkv.gather %{{.*}}[%{{.*}}] outs(%{{.*}} : tensor<1x1x3x4xf32>) : tensor<1x1x?x4xf32>, tensor<1x1x3xi64> -> tensor<1x1x3x4xf32>
func.func @gather_tiles(%src: tensor<1x2x?x8xf32>, %idx: tensor<1x2x6xi64>, %init: tensor<1x2x6x8xf32>) -> tensor<1x2x6x8xf32> {
  %g = snapkv.gather %src[%idx] outs(%init : tensor<1x2x6x8xf32>)
      : tensor<1x2x?x8xf32>, tensor<1x2x6xi64> -> tensor<1x2x6x8xf32>
  return %g : tensor<1x2x6x8xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["snapkv.gather"]} in %root : (!transform.any_op) -> !transform.any_op
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [0, 1, 3, 4] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// gather with a GQA group of 3 result heads per source head: a tile of one
// head reads source head h / 3; a tile of 3 aligned heads reads one source
// head (the tiled op keeps the group).
// CHECK: #[[DIV:.*]] = affine_map<()[s0] -> (s0 floordiv 3)>
// CHECK-LABEL: func.func @gather_group
// CHECK: scf.forall (%[[H:.*]]) in (6)
// CHECK:   %[[KV:.*]] = affine.apply #{{.*}}()[%[[H]]]
// CHECK:   tensor.extract_slice %{{.*}}[0, %[[KV]], 0, 0] [1, 1, 16, 8]
// CHECK:   snapkv.gather {{.*}} : tensor<1x1x16x8xf16>, tensor<1x1x4xi64> -> tensor<1x1x4x8xf16>
// CHECK: scf.forall (%[[KV3:.*]]) in (2)
// CHECK:   tensor.extract_slice %{{.*}}[0, %[[KV3]], 0, 0] [1, 1, 16, 8]
// CHECK:   snapkv.gather {{.*}} : tensor<1x1x16x8xf16>, tensor<1x3x4xi64> -> tensor<1x3x4x8xf16>
func.func @gather_group(%src: tensor<1x2x16x8xf16>, %idx: tensor<1x6x4xi64>, %init: tensor<1x6x4x8xf16>)
    -> (tensor<1x6x4x8xf16>, tensor<1x6x4x8xf16>) {
  %g = snapkv.gather %src[%idx] outs(%init : tensor<1x6x4x8xf16>)
      : tensor<1x2x16x8xf16>, tensor<1x6x4xi64> -> tensor<1x6x4x8xf16>
  %g3 = snapkv.gather %src[%idx] outs(%init : tensor<1x6x4x8xf16>) {three}
      : tensor<1x2x16x8xf16>, tensor<1x6x4xi64> -> tensor<1x6x4x8xf16>
  return %g, %g3 : tensor<1x6x4x8xf16>, tensor<1x6x4x8xf16>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %one = transform.structured.match ops{["snapkv.gather"]} attributes{} in %root : (!transform.any_op) -> !transform.any_op
    %three = transform.structured.match attributes{three} in %root : (!transform.any_op) -> !transform.any_op
    %a, %b = transform.split_handle %one : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %t1, %l1 = transform.structured.tile_using_forall %a tile_sizes [0, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %t3, %l3 = transform.structured.tile_using_forall %three tile_sizes [0, 3] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// A tile of 2 heads would straddle two source heads of a group of 3: the op
// refuses to tile (upstream's message spells "faild").
func.func @gather_straddle(%src: tensor<1x2x16x8xf32>, %idx: tensor<1x6x4xi64>, %init: tensor<1x6x4x8xf32>) -> tensor<1x6x4x8xf32> {
  // expected-error @+3 {{faild to tile operation}}
  // expected-error @+2 {{failed to generate tiling loops}}
  // expected-note @+1 {{when applied to this op}}
  %g = snapkv.gather %src[%idx] outs(%init : tensor<1x6x4x8xf32>)
      : tensor<1x2x16x8xf32>, tensor<1x6x4xi64> -> tensor<1x6x4x8xf32>
  return %g : tensor<1x6x4x8xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %op = transform.structured.match ops{["snapkv.gather"]} in %root : (!transform.any_op) -> !transform.any_op
    // expected-error @+1 {{transform.structured.tile_using_forall failed to apply}}
    %tiled, %loop = transform.structured.tile_using_forall %op tile_sizes [0, 2] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}

// -----

// score over its rows: with gqa expand a row is one query head and reads kv
// head h / 2; with gqa mean a row is one kv head and reads its 2 query
// heads. Each tile is the same scoring on one row.
// CHECK-LABEL: func.func @score_rows
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x2x8xf32>, %[[K:.*]]: tensor<1x2x?x8xf32>
// CHECK: scf.forall (%[[H:.*]]) in (4)
// CHECK:   %[[KV:.*]] = affine.apply #{{.*}}()[%[[H]]]
// CHECK:   tensor.extract_slice %[[Q]][0, %[[H]], 0, 0] [1, 1, 2, 8]
// CHECK:   tensor.extract_slice %[[K]][0, %[[KV]], 0, 0] [1, 1, %{{.*}}, 8]
// CHECK:   snapkv.score {{.*}} window 2 kernel 3 outs({{.*}} : tensor<1x1x?xf32>, tensor<1x1x?xf32>) : (tensor<1x1x2x8xf32>, tensor<1x1x?x8xf32>) -> (tensor<1x1x?xf32>, tensor<1x1x?xf32>)
// CHECK:   tensor.parallel_insert_slice %[[POOLED:.*]] into
// CHECK: scf.forall (%[[G:.*]]) in (2)
// CHECK:   %[[QH:.*]] = affine.apply #{{.*}}()[%[[G]]]
// CHECK:   tensor.extract_slice %[[Q]][0, %[[QH]], 0, 0] [1, 2, 2, 8]
// CHECK:   tensor.extract_slice %[[K]][0, %[[G]], 0, 0] [1, 1, %{{.*}}, 8]
// CHECK:   snapkv.score {{.*}} gqa mean scoring prefix_votes outs({{.*}}) : (tensor<1x2x2x8xf32>, tensor<1x1x?x8xf32>) -> (tensor<1x1x?xf32>, tensor<1x1x?xf32>)
func.func @score_rows(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x?x8xf32>,
                      %ve: tensor<1x4x?xf32>, %pe: tensor<1x4x?xf32>,
                      %vm: tensor<1x2x?xf32>, %pm: tensor<1x2x?xf32>)
    -> (tensor<1x4x?xf32>, tensor<1x2x?xf32>) {
  %v, %p = snapkv.score %q, %k window 2 kernel 3 outs(%ve, %pe : tensor<1x4x?xf32>, tensor<1x4x?xf32>)
      : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x4x?xf32>, tensor<1x4x?xf32>)
  %v2, %p2 = snapkv.score %q, %k window 2 gqa mean scoring prefix_votes outs(%vm, %pm : tensor<1x2x?xf32>, tensor<1x2x?xf32>) {mean}
      : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x2x?xf32>, tensor<1x2x?xf32>)
  return %p, %p2 : tensor<1x4x?xf32>, tensor<1x2x?xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %all = transform.structured.match ops{["snapkv.score"]} in %root : (!transform.any_op) -> !transform.any_op
    %expand, %mean = transform.split_handle %all : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %t1, %l1 = transform.structured.tile_using_forall %expand tile_sizes [0, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    %t2, %l2 = transform.structured.tile_using_forall %mean tile_sizes [0, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)
    transform.yield
  }
}
