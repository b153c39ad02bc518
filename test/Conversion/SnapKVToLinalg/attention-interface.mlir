// RUN: snapkv-opt %s --split-input-file --convert-snapkv-to-linalg="tiling=cpu attention-interface=true query-tile=4 key-tile=8" --canonicalize --cse | FileCheck %s

// attention-interface: the op tiled through TilingInterface (an scf.forall
// over query heads and tiles of 4 rows) and each tile decomposed into static
// steps: its rows padded to 4 and transposed once ([16, 4]), [8, 4] logits
// from [8, 16] key tiles read in place; the lengths checked once, before the
// parallel loop.
// CHECK-LABEL: func.func @prefill
// CHECK: cf.assert {{.*}} "snapkv.attention: length of 'values' differs from 'keys'"
// CHECK: cf.assert {{.*}} "snapkv.attention: more keys than 32-bit positions allow"
// CHECK-NOT: cf.assert
// CHECK: scf.forall (%{{.*}}, %{{.*}}) = (0, 0) to (4, %{{.*}}) step (1, 4)
// CHECK:   } : tensor<1x1x?x16xf32> to tensor<1x1x4x16xf32>
// CHECK:   linalg.generic {{.*}} ins(%{{.*}} : tensor<4x16xf32>) outs(%{{.*}} : tensor<16x4xf32>)
// CHECK:   scf.for
// CHECK:     linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<8x16xf32>, tensor<16x4xf32>) outs(%{{.*}} : tensor<8x4xf32>)
func.func @prefill(%q: tensor<1x4x?x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>) -> tensor<1x4x?x16xf32> {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x?x16xf32>)
      : tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x?x16xf32>
  return %o : tensor<1x4x?x16xf32>
}

// -----

// A decode step (one static row per head): a tile per kv head of its 2
// query heads (an scf.for over the kv heads), whose key steps run in 4
// parts in parallel (FlashDecoding: a fixed number, whatever the threads),
// the logits as dot products along D in 16-lane partial sums; the parts'
// maxima, sums and accumulators combined after the scf.forall.
// CHECK-LABEL: func.func @decode
// CHECK: scf.for %{{.*}} = %c0 to %c4 step %c2
// CHECK:   scf.forall (%{{.*}}) in (4) {{.*}} -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2x16xf32>)
// CHECK:     scf.for
// CHECK:       linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<8x1x16xf32>, tensor<2x1x16xf32>) outs(%{{.*}} : tensor<8x2x16xf32>)
// CHECK:   linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%{{.*}} : tensor<4x2xf32>)
// CHECK:     arith.maximumf
// CHECK:   linalg.generic {{.*}} ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<4x2xf32>, tensor<4x2xf32>, tensor<2xf32>)
// CHECK:     math.exp
// CHECK:   linalg.generic {{.*}} ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<4x2x16xf32>, tensor<4x2xf32>, tensor<2xf32>)
// CHECK:     math.exp
func.func @decode(%q: tensor<1x4x1x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>, %pos: index) -> tensor<1x4x1x16xf32> {
  %o = snapkv.attention %q, %k, %v offset %pos outs(%q : tensor<1x4x1x16xf32>)
      : tensor<1x4x1x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x1x16xf32>
  return %o : tensor<1x4x1x16xf32>
}
