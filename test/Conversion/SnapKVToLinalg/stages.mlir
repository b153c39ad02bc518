// The stage ops of a decomposed select lower on their own to the linalg ops
// the whole select lowers to (docs/lowering.md), writing into their inits.
// RUN: snapkv-opt %s --split-input-file --convert-snapkv-to-linalg --canonicalize --cse | FileCheck %s --implicit-check-not="= snapkv."
// RUN: snapkv-opt %s --split-input-file --convert-snapkv-to-linalg=tiling=cpu | FileCheck %s --check-prefix=CPU
// RUN: snapkv-opt %s --split-input-file --convert-snapkv-to-linalg=tiling=gpu --snapkv-tile-and-fuse -canonicalize | FileCheck %s --check-prefix=GPU

// top_positions over a dynamic prefix: the run-time checks, the chunk
// padding (ranked below every position), the order keys, the 32-step
// threshold search, the slot search, score order, then the window written
// into the op's init.
// CHECK-LABEL: func.func @top_positions
// CHECK-SAME: (%[[S:.*]]: tensor<1x2x?xf32>, %[[I:.*]]: tensor<1x2x5xi64>)
// CHECK: cf.assert %{{.*}}, "snapkv.top_positions: 'scores' holds fewer prefix positions than capacity - window (3)"
// CHECK: cf.assert %{{.*}}, "snapkv.top_positions: prompt length (prefix + window) must be below 2^31 - 1"
// CHECK: %[[PADDED:.*]] = tensor.pad %[[S]] low[0, 0, 0] high[0, 0, %{{.*}}]
// CHECK: %[[KEYS:.*]] = linalg.generic {{.*}} ins(%[[PADDED]] : tensor<1x2x?xf32>) outs(%{{.*}} : tensor<1x2x?xi32>)
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// CHECK: scf.for %{{.*}} = %{{.*}} to %c32
// CHECK: tensor.expand_shape %[[KEYS]] {{.*}} into tensor<1x2x?x128xi32>
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x2x3xi64>, tensor<1x2x3xi32>)
// CHECK: %[[RESULT:.*]] = linalg.generic {{.*}} outs(%[[I]] : tensor<1x2x5xi64>)
// CHECK: return %[[RESULT]]
// With tiling=cpu the op is tiled through its TilingInterface: one scf.forall over its
// (batch, head) rows, each iteration the row's op lowered whole (no groups recorded).
// CPU-LABEL: func.func @top_positions
// CPU-NOT: snapkv.tile
// CPU: scf.forall (%{{.*}}, %{{.*}}) in (1, 2) shared_outs
// CPU-NOT: snapkv.tile
// CPU: return
// With tiling=gpu the checks run on the host, then one block per (batch, head) row, each
// the row's ranking (the 32-step threshold search inside the block).
// GPU-LABEL: func.func @top_positions
// GPU: cf.assert %{{.*}}, "snapkv.top_positions: 'scores' holds fewer prefix positions than capacity - window (3)"
// GPU-NOT: linalg.
// GPU: scf.forall (%{{.*}}, %{{.*}}) in (1, 2) shared_outs
// GPU: tensor.pad
// GPU: scf.for %{{.*}} = %{{.*}} to %c32
// GPU: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: return
func.func @top_positions(%s: tensor<1x2x?xf32>, %i: tensor<1x2x5xi64>) -> tensor<1x2x5xi64> {
  %t = snapkv.top_positions %s window 2 capacity 5 order score
      outs(%i : tensor<1x2x5xi64>) : tensor<1x2x?xf32> -> tensor<1x2x5xi64>
  return %t : tensor<1x2x5xi64>
}

// -----

// gather with a group of 2 result heads per source head and dynamic sizes:
// the slot counts are checked to agree, an empty source is refused when
// there are slots, each index is clamped into [0, L), and head h reads
// source head h / 2.
// CHECK-LABEL: func.func @gather
// CHECK-SAME: (%[[SRC:.*]]: tensor<1x2x?x8xf16>, %[[IDX:.*]]: tensor<1x4x?xi64>, %[[INIT:.*]]: tensor<1x4x?x8xf16>)
// CHECK: cf.assert %{{.*}}, "snapkv.gather: 'indices' dim 2 differs from 'init'"
// CHECK: cf.assert %{{.*}}, "snapkv.gather: 'source' has no rows to gather"
// CHECK: %[[ROWS:.*]] = linalg.generic {{.*}} outs(%[[INIT]] : tensor<1x4x?x8xf16>)
// CHECK: %[[H:.*]] = linalg.index 1
// CHECK: %[[KV:.*]] = arith.divui %[[H]], %c2
// CHECK: %[[RAW:.*]] = tensor.extract %[[IDX]]
// CHECK: %[[LOW:.*]] = arith.minsi %[[RAW]], %{{.*}} : i64
// CHECK: %[[POS:.*]] = arith.maxsi %[[LOW]], %{{.*}} : i64
// CHECK: %[[J:.*]] = arith.index_cast %[[POS]] : i64 to index
// CHECK: tensor.extract %[[SRC]][%{{.*}}, %[[KV]], %[[J]], %{{.*}}] : tensor<1x2x?x8xf16>
// CHECK: return %[[ROWS]]
// CPU-LABEL: func.func @gather
// CPU-NOT: snapkv.tile
// CPU: scf.forall (%{{.*}}, %{{.*}}) in (1, 4) shared_outs
// CPU-NOT: snapkv.tile
// CPU: return
// With tiling=gpu, one block per (batch, head) row.
// GPU-LABEL: func.func @gather
// GPU: cf.assert %{{.*}}, "snapkv.gather: 'source' has no rows to gather"
// GPU-NOT: linalg.
// GPU: scf.forall (%{{.*}}, %{{.*}}) in (1, 4) shared_outs
// GPU: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x1x?x8xf16>)
// GPU: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: return
func.func @gather(%src: tensor<1x2x?x8xf16>, %idx: tensor<1x4x?xi64>, %init: tensor<1x4x?x8xf16>)
    -> tensor<1x4x?x8xf16> {
  %g = snapkv.gather %src[%idx] outs(%init : tensor<1x4x?x8xf16>)
      : tensor<1x2x?x8xf16>, tensor<1x4x?xi64> -> tensor<1x4x?x8xf16>
  return %g : tensor<1x4x?x8xf16>
}

// -----

// select_adaptive lowers through its stage ops, which the same conversion
// then lowers (nothing of the snapkv dialect is left).
// CHECK-LABEL: func.func @adaptive
// CHECK: scf.for %{{.*}} = %{{.*}} to %c32
// CHECK: arith.select %{{.*}}, %cst{{.*}}, %{{.*}} : f32
// CHECK: tensor.collapse_shape %{{.*}} {{\[}}[0], [1, 2]] : tensor<1x2x18xf32> into tensor<1x36xf32>
// CHECK: return %{{.*}}, %{{.*}} : tensor<1x20x8xf32>, tensor<1x3xi64>
// On the CPU the conversion decomposes the select_adaptive and tiles its stage
// ops through TilingInterface (no groups recorded): the scoring and the floor's
// ranking per (batch, head) row; the layer-wide ranking, one row, lowered whole
// (its 32-step threshold search at the top); its two gathers per kept slot.
// CPU-LABEL: func.func @adaptive
// CPU-NOT: snapkv.tile
// CPU: scf.forall (%{{.*}}, %{{.*}}) in (1, 2) shared_outs
// CPU: scf.forall (%{{.*}}, %{{.*}}) in (1, 2) shared_outs
// CPU: scf.for %{{.*}} = %c0 to %c32
// CPU: scf.forall (%{{.*}}, %{{.*}}, %{{.*}}) in (1, 1, 20) shared_outs
// CPU: scf.forall (%{{.*}}, %{{.*}}, %{{.*}}) in (1, 1, 20) shared_outs
// CPU-NOT: snapkv.tile
// CPU: return
// For the GPU, every stage is a kernel (an scf.forall mapped to blocks) and no
// linalg op is left between them for the host: the scoring's four, the
// floor's ranking per (batch, head) row, its threshold, ties and raised
// scores per batch row, the layer-wide ranking, the counts, offsets, each
// row's head and its position per batch row, and the gather per row.
// GPU-LABEL: func.func @adaptive
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1, 2, 1) shared_outs
// GPU: } {mapping = [#gpu.block<z>, #gpu.block<y>, #gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1, 2) shared_outs
// GPU: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1, 2, 1) shared_outs
// GPU: } {mapping = [#gpu.block<z>, #gpu.block<y>, #gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1, 2) shared_outs
// GPU: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1, 2) shared_outs
// GPU: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1) shared_outs
// GPU: } {mapping = [#gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1) shared_outs
// GPU: } {mapping = [#gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1) shared_outs
// GPU: } {mapping = [#gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1, 1) shared_outs
// GPU: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1) shared_outs
// GPU: } {mapping = [#gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1) shared_outs
// GPU: } {mapping = [#gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1) shared_outs
// GPU: } {mapping = [#gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1) shared_outs
// GPU: } {mapping = [#gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall ({{.*}}) in (1, 1) shared_outs
// GPU: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: return
func.func @adaptive(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x20x8xf32>) -> (tensor<1x20x8xf32>, tensor<1x3xi64>) {
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10 floor 3 gqa mean
      : (tensor<1x4x2x8xf32>, tensor<1x2x20x8xf32>, tensor<1x2x20x8xf32>)
      -> (tensor<1x20x8xf32>, tensor<1x20x8xf32>, tensor<1x20xi64>, tensor<1x3xi64>)
  return %a#0, %a#3 : tensor<1x20x8xf32>, tensor<1x3xi64>
}

// -----

// Without a floor the flattened scores are the pooled scores themselves, a
// slice of the chunk-padded ones: for the GPU a kernel copies them (one
// block per batch row) before they are flattened, which the host would do
// otherwise. A dynamic length: the checks on the host, the bypass and the
// selection both as kernels.
// CHECK-LABEL: func.func @adaptive_no_floor
// CHECK: scf.if
// GPU-LABEL: func.func @adaptive_no_floor
// GPU: cf.assert %{{.*}}, "snapkv.select_adaptive: prompt length of 'values' differs from 'keys'"
// GPU: scf.if
// GPU-NOT: linalg.
// GPU: scf.forall (%{{.*}}) in (2) shared_outs
// GPU: } {mapping = [#gpu.block<x>]{{.*}}}
// GPU: } else {
// GPU: scf.forall (%{{.*}}, %{{.*}}) in (2, 4) shared_outs
// GPU: } {mapping = [#gpu.block<y>, #gpu.block<x>]{{.*}}}
// GPU-NOT: linalg.
// GPU: scf.forall (%{{.*}}) in (2) shared_outs
// GPU: linalg.copy ins(%{{.*}} : tensor<1x4x?xf32>)
// GPU: } {mapping = [#gpu.block<x>]{{.*}}}
// GPU: tensor.collapse_shape %{{.*}} {{\[}}[0], [1, 2]] : tensor<2x4x?xf32> into tensor<2x?xf32>
func.func @adaptive_no_floor(%q: tensor<2x4x2x8xf32>, %k: tensor<2x2x?x8xf32>)
    -> (tensor<2x?x8xf32>, tensor<2x5xi64>) {
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10 scoring prefix_votes
      : (tensor<2x4x2x8xf32>, tensor<2x2x?x8xf32>, tensor<2x2x?x8xf32>)
      -> (tensor<2x?x8xf32>, tensor<2x?x8xf32>, tensor<2x?xi64>, tensor<2x5xi64>)
  return %a#0, %a#3 : tensor<2x?x8xf32>, tensor<2x5xi64>
}
