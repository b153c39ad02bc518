// RUN: snapkv-opt %s --split-input-file --convert-snapkv-to-linalg="tiling=cpu query-tile=4 key-tile=8" --canonicalize --cse | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --convert-snapkv-to-linalg="tiling=gpu" -verify-diagnostics -o /dev/null

// snapkv.attention tiled through TilingInterface (an scf.forall over query
// heads and tiles of 4 rows; the unit batch drops out) and each tile
// decomposed into static steps: its rows padded to 4 and transposed once
// ([16, 4]), an scf.for over the visible key tiles carrying the row maximum,
// the row sum and the [4, D] accumulator, with static [8, 4] logits (rows
// innermost: the reductions over keys run across vectors) from [8, 16] key
// and value tiles read in place; the lengths checked once, before the
// parallel loop. Nothing [L, L] is built.
// CHECK-LABEL: func.func @attention
// CHECK-NOT: tensor<?x?xf32>
// CHECK: cf.assert {{.*}} "snapkv.attention: length of 'values' differs from 'keys'"
// CHECK: cf.assert {{.*}} "snapkv.attention: more keys than 32-bit positions allow"
// CHECK-NOT: cf.assert
// CHECK: scf.forall (%{{.*}}, %{{.*}}) = (0, 0) to (4, %{{.*}}) step (1, 4)
// CHECK:   } : tensor<1x1x?x16xf32> to tensor<1x1x4x16xf32>
// CHECK:   linalg.generic {{.*}} ins(%{{.*}} : tensor<4x16xf32>) outs(%{{.*}} : tensor<16x4xf32>)
// CHECK:   scf.for {{.*}} -> (tensor<4xf32>, tensor<4xf32>, tensor<4x16xf32>)
// CHECK:     tensor.extract_slice {{.*}} : tensor<?x16xf32> to tensor<8x16xf32>
// CHECK:     tensor.extract_slice {{.*}} : tensor<?x16xf32> to tensor<8x16xf32>
// CHECK:     linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<8x16xf32>, tensor<16x4xf32>) outs(%{{.*}} : tensor<8x4xf32>)
// CHECK:     linalg.generic {{.*}} iterator_types = ["reduction", "parallel"]} ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<8x4xf32>, tensor<8xi32>, tensor<4xi32>) outs(%{{.*}} : tensor<4xf32>)
// CHECK:     math.exp
// CHECK:     linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<8x4xf32>, tensor<8x16xf32>) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK:     scf.yield
// CHECK:   arith.divf
// CHECK:   tensor.parallel_insert_slice
func.func @attention(%q: tensor<1x4x?x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>) -> tensor<1x4x?x16xf32> {
  // expected-error @+1 {{'snapkv.attention' op has no GPU lowering (target=gpu); it is lowered for the CPU only}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x?x16xf32>) : tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x?x16xf32>
  return %o : tensor<1x4x?x16xf32>
}

// -----

// f16 operands: products in f32 (extf), the result truncated back.
// CHECK-LABEL: func.func @half
// CHECK: arith.extf
// CHECK: arith.truncf
// CHECK: return %{{.*}} : tensor<1x2x8x16xf16>
func.func @half(%q: tensor<1x2x8x16xf16>, %k: tensor<1x1x8x16xf16>, %v: tensor<1x1x8x16xf16>) -> tensor<1x2x8x16xf16> {
  // expected-error @+1 {{has no GPU lowering}}
  %o = snapkv.attention %q, %k, %v scale 0.5 outs(%q : tensor<1x2x8x16xf16>) : tensor<1x2x8x16xf16>, tensor<1x1x8x16xf16>, tensor<1x1x8x16xf16> -> tensor<1x2x8x16xf16>
  return %o : tensor<1x2x8x16xf16>
}

// -----

// bf16 operands: the logits and the softmax statistics in f32; the
// probabilities also rounded to bf16 (one generic writes both), so that
// P x V is a bf16 contraction into the f32 accumulator (vdpbf16ps in
// snapkv-vectorize); the sum of the f32 ones.
// CHECK-LABEL: func.func @bf16
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<8x16xbf16>, tensor<16x4xbf16>) outs(%{{.*}} : tensor<8x4xf32>)
// CHECK: %[[P:.*]]:2 = linalg.generic {{.*}} outs(%{{.*}}, %{{.*}} : tensor<8x4xf32>, tensor<8x4xbf16>)
// CHECK:   math.exp
// CHECK:   arith.truncf %{{.*}} : f32 to bf16
// CHECK: linalg.generic {{.*}} ins(%[[P]]#0 : tensor<8x4xf32>) outs(%{{.*}} : tensor<4xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[P]]#1, %{{.*}} : tensor<8x4xbf16>, tensor<8x16xbf16>) outs(%{{.*}} : tensor<4x16xf32>)
func.func @bf16(%q: tensor<1x4x?x16xbf16>, %k: tensor<1x2x?x16xbf16>, %v: tensor<1x2x?x16xbf16>) -> tensor<1x4x?x16xbf16> {
  // expected-error @+1 {{has no GPU lowering}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x?x16xbf16>) : tensor<1x4x?x16xbf16>, tensor<1x2x?x16xbf16>, tensor<1x2x?x16xbf16> -> tensor<1x4x?x16xbf16>
  return %o : tensor<1x4x?x16xbf16>
}

// -----

// A decode step (one static row per head, D a multiple of 16): a tile per
// kv head of its 2 query heads (an scf.for over the kv heads), so each key
// and value tile is read once for both; its key steps run in 4 parts in
// parallel (FlashDecoding: a fixed number, whatever the threads), the logits
// as dot products along D in 16-lane partial sums; the parts' maxima, sums
// and accumulators combined after the scf.forall.
// CHECK-LABEL: func.func @decode
// CHECK: scf.for %{{.*}} = %c0 to %c4 step %c2
// CHECK:   scf.forall (%{{.*}}) in (4) {{.*}} -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2x32xf32>)
// CHECK:     scf.for
// CHECK:       linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<8x2x16xf32>, tensor<2x2x16xf32>) outs(%{{.*}} : tensor<8x2x16xf32>)
// CHECK:   linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%{{.*}} : tensor<4x2xf32>)
// CHECK:     arith.maximumf
// CHECK:   linalg.generic {{.*}} ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<4x2xf32>, tensor<4x2xf32>, tensor<2xf32>)
// CHECK:     math.exp
// CHECK:   linalg.generic {{.*}} ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<4x2x32xf32>, tensor<4x2xf32>, tensor<2xf32>)
// CHECK:     math.exp
func.func @decode(%q: tensor<1x4x1x32xf32>, %k: tensor<1x2x?x32xf32>, %v: tensor<1x2x?x32xf32>, %pos: index) -> tensor<1x4x1x32xf32> {
  // expected-error @+1 {{has no GPU lowering}}
  %o = snapkv.attention %q, %k, %v offset %pos outs(%q : tensor<1x4x1x32xf32>) : tensor<1x4x1x32xf32>, tensor<1x2x?x32xf32>, tensor<1x2x?x32xf32> -> tensor<1x4x1x32xf32>
  return %o : tensor<1x4x1x32xf32>
}

// -----

// A ragged cache: per (batch, cache head) the head's rows checked against the
// cache and sliced, then a snapkv.attention of its query heads over them
// (decomposed as a decode step's tile), written into the result.
// CHECK-LABEL: func.func @ragged
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x1x8xf32>, %[[K:.*]]: tensor<2x?x8xf32>, %[[V:.*]]: tensor<2x?x8xf32>, %[[S:.*]]: tensor<2x2xi64>, %[[L:.*]]: tensor<2x2xi64>)
// CHECK: scf.for %[[B:[a-z0-9]+]] =
// CHECK: scf.for %[[H:[a-z0-9]+]] =
// CHECK: tensor.extract %[[S]][%[[B]], %[[H]]]
// CHECK: tensor.extract %[[L]][%[[B]], %[[H]]]
// CHECK: cf.assert %{{.*}}, "snapkv.ragged_attention: a head has no rows"
// CHECK: cf.assert %{{.*}}, "snapkv.ragged_attention: a head's rows start before row 0"
// CHECK: cf.assert %{{.*}}, "snapkv.ragged_attention: a head's rows end past the cache"
// CHECK: tensor.extract_slice %[[K]][%[[B]], %{{.*}}, 0] [1, %{{.*}}, 8] [1, 1, 1]
// CHECK: tensor.extract_slice %[[V]][%[[B]], %{{.*}}, 0] [1, %{{.*}}, 8] [1, 1, 1]
// CHECK: tensor.extract_slice %[[Q]][%[[B]], %{{.*}}, 0, 0] [1, 2, 1, 8] [1, 1, 1, 1]
// CHECK: scf.forall
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[%[[B]], %{{.*}}, 0, 0] [1, 2, 1, 8] [1, 1, 1, 1]
// expected-error @+2 {{'snapkv.ragged_attention' op has no GPU lowering (target=gpu); it is lowered for the CPU only}}
func.func @ragged(%q: tensor<2x4x1x8xf32>, %k: tensor<2x?x8xf32>, %v: tensor<2x?x8xf32>, %s: tensor<2x2xi64>, %l: tensor<2x2xi64>) -> tensor<2x4x1x8xf32> {
  %o = snapkv.ragged_attention %q, %k, %v rows(%s, %l) : tensor<2x4x1x8xf32>, tensor<2x?x8xf32>, tensor<2x?x8xf32>, tensor<2x2xi64> -> tensor<2x4x1x8xf32>
  return %o : tensor<2x4x1x8xf32>
}
