// RUN: snapkv-opt %s --pass-pipeline="builtin.module(convert-snapkv-to-linalg{tiling=cpu},canonicalize,cse,func.func(snapkv-vectorize{vector-bits=256},canonicalize,cse,loop-invariant-subset-hoisting,canonicalize))" | FileCheck %s --implicit-check-not=x64x4x32xf32

// The select as --snapkv-cpu-pipeline compiles it, before bufferisation.
// Each key tile (kv head, tile, query head of the group) is one iteration of
// an scf.forall; inside it the tile's logits ([64 keys x 32 window rows])
// are computed with a [2 x 32] FMA accumulator kept in registers across the
// D loop, then reduced to the tile's maximum and exp-sum eight keys at a
// time (exp on vectors). The full [.., 64, 4, 32] logits tensor of all tiles
// and query heads never exists (implicit-check-not above).
// CHECK-LABEL: func.func @select
// CHECK: scf.forall (%{{.*}}, %{{.*}}, %{{.*}}) in (2, %{{.*}}, 4) shared_outs
// CHECK: scf.for %{{.*}} = %c0 to %c128 step %c1 iter_args(%[[ACC:.*]] = %{{.*}}) -> (vector<2x1x32xf32>)
// CHECK: vector.fma %{{.*}}, %{{.*}}, %[[ACC]] : vector<2x1x32xf32>
// CHECK: vector.multi_reduction <maximumf>, {{.*}} : vector<1x1x1x1x8x32xf32> to vector<1x1x1x1x32xf32>
// CHECK: math.exp %{{.*}} : vector<8x32xf32>
// CHECK: vector.multi_reduction <add>
// CHECK: scf.forall.in_parallel
// The votes pass recomputes each tile's logits the same way, also with the
// query heads of a kv head innermost (kv head, tile, query head): the heads
// that reuse a key tile follow each other while it is in the cache.
// CHECK: scf.forall (%{{.*}}, %{{.*}}, %{{.*}}) in (2, %{{.*}}, 4) shared_outs({{.*}}) -> (tensor<1x2x4x?x64xf32>)
// CHECK: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<2x1x32xf32>
// CHECK: math.exp %{{.*}} : vector<32xf32>
func.func @select(%q: tensor<1x8x32x128xf32>, %k: tensor<1x2x?x128xf32>, %v: tensor<1x2x?x128xf32>)
    -> (tensor<1x8x?x128xf32>, tensor<1x8x?x128xf32>, tensor<1x8x?xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 32 capacity 64
      : (tensor<1x8x32x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>)
      -> (tensor<1x8x?x128xf32>, tensor<1x8x?x128xf32>, tensor<1x8x?xi64>)
  return %a, %b, %c : tensor<1x8x?x128xf32>, tensor<1x8x?x128xf32>, tensor<1x8x?xi64>
}
