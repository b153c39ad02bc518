// The stage ops of a decomposed select are tiled through their TilingInterface,
// with the sizes of their #snapkv.lowering_config (no groups recorded). The ranking is
// one scf.forall over the (batch, head) rows with the score it ranks fused in,
// each gather one more; each tile is one row's op, lowered whole inside the
// loop (key tiles of key_tile keys, chunks of chunk positions). The run-time
// checks of the dynamic prompt come first, once, outside the loops.
// RUN: snapkv-opt %s --snapkv-decompose-select --convert-snapkv-to-linalg --canonicalize --cse | FileCheck %s --implicit-check-not=snapkv.tile --implicit-check-not=snapkv.fuse --implicit-check-not="= snapkv."
// The CPU pipeline does this (its IR after the conversion).
// RUN: snapkv-opt %s --snapkv-cpu-pipeline="cpu-features=avx512f" --mlir-print-ir-after=convert-snapkv-to-linalg -o /dev/null 2>&1 | FileCheck %s --check-prefix=PIPELINE

// CHECK-LABEL: func.func @select
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x2x4xf32>, %[[K:.*]]: tensor<1x2x?x4xf32>, %[[V:.*]]: tensor<1x2x?x4xf32>)
// CHECK: %[[L:.*]] = tensor.dim %[[K]], %c2
// The bypass of a short prompt (L < C): each gather one loop over the rows.
// CHECK: scf.if
// CHECK: cf.assert %{{.*}}, "snapkv.gather: 'source' has no rows to gather"
// CHECK: scf.forall (%{{.*}}) in (4) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x4x?x4xf32>)
// CHECK: } else {
// CHECK: cf.assert %{{.*}}, "snapkv.score: prompt length (keys dim 2) is shorter than window 2"
// CHECK: cf.assert %{{.*}}, "snapkv.score: prompt length (keys dim 2) must be below 2^31 - 1"
// CHECK: cf.assert %{{.*}}, "snapkv.top_positions: 'scores' holds fewer prefix positions than capacity - window (4)"
// The ranking's loop over the 4 query heads (the unit batch loop folded);
// in each iteration the head's queries and its kv head's keys (query head h
// reads kv head h / 2), the head's scores in key tiles of 8 keys, then its
// ranking in chunks of 16 positions.
// CHECK: %[[IDX:.*]] = scf.forall (%[[H:.*]]) in (4) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x4x6xi64>)
// CHECK-NOT: cf.assert
// CHECK: %[[KV:.*]] = affine.apply #{{.*}}()[%[[H]]]
// CHECK: tensor.extract_slice %[[Q]][0, %[[H]], 0, 0] [1, 1, 2, 4]
// CHECK: tensor.extract_slice %[[K]][0, %[[KV]], 0, 0] [1, 1, %[[L]], 4]
// CHECK-NOT: cf.assert
// CHECK: } -> tensor<1x1x?x8x1x2xf32>
// CHECK-NOT: cf.assert
// CHECK: tensor.expand_shape {{.*}} into tensor<1x1x?x16xi32>
// CHECK-NOT: cf.assert
// CHECK: tensor.parallel_insert_slice %{{.*}} into %{{.*}}[0, %[[H]], 0] [1, 1, 6]
// The gathers, one loop over the rows each, reading the ranking's indices.
// CHECK: cf.assert %{{.*}}, "snapkv.gather: 'source' has no rows to gather"
// CHECK: scf.forall (%[[G:.*]]) in (4) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x4x6x4xf32>)
// CHECK-NOT: cf.assert
// CHECK: tensor.extract_slice %[[IDX]][0, %[[G]], 0] [1, 1, 6]
// CHECK: cf.assert %{{.*}}, "snapkv.gather: 'source' has no rows to gather"
// CHECK: scf.forall (%{{.*}}) in (4) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x4x6x4xf32>)
// CHECK-NOT: cf.assert
// CHECK: return

// PIPELINE-LABEL: func.func @select
// PIPELINE-NOT: snapkv.tile
// PIPELINE: scf.forall (%{{.*}}, %{{.*}}) in (1, 4) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x4x6xi64>)
// PIPELINE: } -> tensor<1x1x?x8x1x2xf32>
// PIPELINE: tensor<1x1x?x16xi32>
// PIPELINE: scf.forall (%{{.*}}, %{{.*}}) in (1, 4) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x4x6x4xf32>)
// PIPELINE: scf.forall (%{{.*}}, %{{.*}}) in (1, 4) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x4x6x4xf32>)
func.func @select(%q: tensor<1x4x2x4xf32>, %k: tensor<1x2x?x4xf32>, %v: tensor<1x2x?x4xf32>)
    -> (tensor<1x4x?x4xf32>, tensor<1x4x?x4xf32>, tensor<1x4x?xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 6
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 8,
         query_tile = 32, chunk = 16, keep_logits = true>}
      : (tensor<1x4x2x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>)
      -> (tensor<1x4x?x4xf32>, tensor<1x4x?x4xf32>, tensor<1x4x?xi64>)
  return %a, %b, %c : tensor<1x4x?x4xf32>, tensor<1x4x?x4xf32>, tensor<1x4x?xi64>
}
