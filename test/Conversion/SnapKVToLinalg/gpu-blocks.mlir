// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=gpu --snapkv-tile-and-fuse -canonicalize --split-input-file | FileCheck %s
// RUN: not snapkv-opt %s --convert-snapkv-to-linalg=tiling=tpu 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: for the --tiling option: Cannot find option named 'tpu'!

// tiling=gpu: the same formulation, laid out as GPU blocks. L = 300 is not a multiple of
// the key tile (64): one span of 5 tiles, the last one partial, staged by a bounded copy.
// Everything is inside one of four scf.forall loops mapped to blocks (one kernel each).

// CHECK-LABEL: func.func @static_expand(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<1x4x4x8xf16>, %[[K:[a-z0-9]+]]: tensor<1x2x300x8xf16>
// No linalg op outside the block loops: nothing runs on the host.
// CHECK-NOT: linalg.
// (1) Tile statistics, one block per (b, kv head, key tile).
// CHECK: scf.forall (%{{.*}}, %[[KV:.*]], %[[N:.*]]) in (1, 2, 5)
// The block's queries, transposed, and its key tile, copied with the row clamped to
// L - 1 and rows past L read as 0 (the causal mask hides them).
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x1x2x8x4xf16>)
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x1x1x64x8xf16>)
// CHECK: %[[ROW:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// CHECK: %[[IN:.*]] = arith.cmpi ule, %[[ROW]], %c299
// CHECK: %[[SAFE:.*]] = arith.minui %[[ROW]], %c299
// CHECK: %[[KEY:.*]] = tensor.extract %[[K]][%{{.*}}, %[[KV]], %[[SAFE]], %{{.*}}]
// CHECK: arith.select %[[IN]], %[[KEY]], %{{.*}} : f16
// The tile's logits (only per block), its maximum and sum.
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x1x1x64x2x4xf32>)
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x1x1x2x4xf32>)
// CHECK: math.exp
// CHECK: } {mapping = [#gpu.block<z>, #gpu.block<y>, #gpu.block<x>]{{.*}}}
// CHECK-NOT: linalg.
// (2) Row statistics over the 5 tiles, one block per (b, kv head).
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (1, 2)
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: arith.divf
// CHECK: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// CHECK-NOT: linalg.
// (3) Votes: the logits again (staged again), one block per (b, kv head, key tile).
// CHECK: scf.forall (%{{.*}}, %{{.*}}, %{{.*}}) in (1, 2, 5)
// CHECK: arith.minui
// CHECK: } {mapping = [#gpu.block<z>, #gpu.block<y>, #gpu.block<x>]{{.*}}}
// CHECK-NOT: linalg.
// (4) Pooling, threshold, compaction, window and gather, one block per (b, query head):
// row-local ops on [1, 1, ...] slices; the 32-step threshold search is inside the block.
// CHECK: scf.forall (%{{.*}}, %[[H:.*]]) in (1, 4)
// CHECK: %[[KVH:.*]] = arith.divui %[[H]], %c2
// CHECK: tensor.extract_slice %[[K]][0, %[[KVH]], 0, 0] [1, 1, 300, 8]
// CHECK: tensor.pad
// CHECK: scf.for %{{.*}} = %c0 to %c32 step %c1
// CHECK: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// CHECK-NOT: scf.forall
// CHECK: return
func.func @static_expand(%q: tensor<1x4x4x8xf16>, %k: tensor<1x2x300x8xf16>, %v: tensor<1x2x300x8xf16>)
    -> (tensor<1x4x20x8xf16>, tensor<1x4x20x8xf16>, tensor<1x4x20xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 20
      : (tensor<1x4x4x8xf16>, tensor<1x2x300x8xf16>, tensor<1x2x300x8xf16>)
      -> (tensor<1x4x20x8xf16>, tensor<1x4x20x8xf16>, tensor<1x4x20xi64>)
  return %ko, %vo, %idx : tensor<1x4x20x8xf16>, tensor<1x4x20x8xf16>, tensor<1x4x20xi64>
}

// -----

// Dynamic L: ceil(L / 64) tiles in one span (a dynamic grid), the bypass (L < C) one block
// loop of its own; the score op's pooling is one block per row.
// CHECK-LABEL: func.func @dynamic_mean(
// CHECK: scf.if
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (1, 2)
// CHECK: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// CHECK: } else {
// CHECK: %[[TILES:.*]] = affine.apply #{{.*}}()[%{{.*}}]
// CHECK: scf.forall (%{{.*}}, %{{.*}}, %{{.*}}) in (1, 2, %[[TILES]])
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (1, 2)
// CHECK: %[[TILES2:.*]] = affine.apply #{{.*}}()[%{{.*}}]
// CHECK: scf.forall (%{{.*}}, %{{.*}}, %{{.*}}) in (1, 2, %[[TILES2]])
// Mean over the G = 2 query heads inside the votes block.
// CHECK: arith.divf %{{.*}}, %cst
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (1, 2)
// CHECK-NOT: scf.forall
// CHECK: scf.yield
func.func @dynamic_mean(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>)
    -> (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 20 gqa mean
      : (tensor<1x4x4x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?xi64>)
  return %ko, %vo, %idx : tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?xi64>
}

// -----

// CHECK-LABEL: func.func @score(
// CHECK-COUNT-3: } {mapping = [#gpu.block
// The pooling, one block per (b, head).
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (1, 2)
// CHECK: tensor.pad
// CHECK: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// CHECK-NOT: scf.forall
func.func @score(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x100x4xf32>)
    -> (tensor<1x2x98xf32>, tensor<1x2x98xf32>) {
  %s1_votes = tensor.empty() : tensor<1x2x98xf32>
  %s1_pooled = tensor.empty() : tensor<1x2x98xf32>
  %votes, %pooled = snapkv.score %q, %k window 2 kernel 3
      outs(%s1_votes, %s1_pooled : tensor<1x2x98xf32>, tensor<1x2x98xf32>)
      : (tensor<1x2x2x4xf32>, tensor<1x2x100x4xf32>) -> (tensor<1x2x98xf32>, tensor<1x2x98xf32>)
  return %votes, %pooled : tensor<1x2x98xf32>, tensor<1x2x98xf32>
}
