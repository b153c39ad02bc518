// RUN: snapkv-opt %s --pass-pipeline="builtin.module(convert-snapkv-to-linalg{tiling=cpu},canonicalize,cse,func.func(snapkv-vectorize{vector-bits=256},canonicalize,cse,loop-invariant-subset-hoisting,canonicalize))" | FileCheck %s --implicit-check-not=x64x4x32xf32

// The select as --snapkv-cpu-pipeline compiles it (keep-logits, the
// default), before bufferisation: its stage ops tiled over the (batch,
// selection head) rows, 8 query heads with gqa expand, the scoring fused into
// its ranking's loop. In a row's tile the logits of the head are computed once
// per span of key tiles (the whole tiles, then the padded last one) with a
// [2 x 32] FMA accumulator kept in registers across the D loop, then reduced to
// each tile's maximum and exp-sum eight keys at a time (exp on vectors); the
// votes read the kept logits back (exp, no FMA over D). The logits of several
// heads never exist at once (implicit-check-not).
// CHECK-LABEL: func.func @select
// CHECK: scf.forall (%{{.*}}) in (8) shared_outs({{.*}}) -> (tensor<1x8x64xi64>)
// CHECK: scf.for %{{.*}} = %c0 to %c128 step %c1 iter_args(%{{.*}}) -> (vector<2x1x32xf32>)
// CHECK: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<2x1x32xf32>
// CHECK: vector.multi_reduction <maximumf>, {{.*}} : vector<1x1x1x1x8x32xf32> to vector<1x1x1x1x32xf32>
// CHECK: math.exp %{{.*}} : vector<8x32xf32>
// CHECK: vector.multi_reduction <add>
// The padded last tile.
// CHECK: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<2x1x32xf32>
// CHECK: vector.multi_reduction <maximumf>
// CHECK: math.exp %{{.*}} : vector<8x32xf32>
// The votes.
// CHECK-NOT: vector<2x1x32xf32>
// CHECK: math.exp %{{.*}} : vector<32xf32>
// CHECK-NOT: vector<2x1x32xf32>
// CHECK: scf.forall.in_parallel
func.func @select(%q: tensor<1x8x32x128xf32>, %k: tensor<1x2x?x128xf32>, %v: tensor<1x2x?x128xf32>)
    -> (tensor<1x8x?x128xf32>, tensor<1x8x?x128xf32>, tensor<1x8x?xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 32 capacity 64
      : (tensor<1x8x32x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>)
      -> (tensor<1x8x?x128xf32>, tensor<1x8x?x128xf32>, tensor<1x8x?xi64>)
  return %a, %b, %c : tensor<1x8x?x128xf32>, tensor<1x8x?x128xf32>, tensor<1x8x?xi64>
}
