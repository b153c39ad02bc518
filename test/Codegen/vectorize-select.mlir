// RUN: snapkv-opt %s --pass-pipeline="builtin.module(convert-snapkv-to-linalg{tiling=cpu},snapkv-tile-and-fuse,canonicalize,cse,func.func(snapkv-vectorize{vector-bits=256},canonicalize,cse,loop-invariant-subset-hoisting,canonicalize))" | FileCheck %s --check-prefix=KEEP --implicit-check-not=x64x4x32xf32
// RUN: snapkv-opt %s --pass-pipeline="builtin.module(convert-snapkv-to-linalg{tiling=cpu keep-logits=false},snapkv-tile-and-fuse,canonicalize,cse,func.func(snapkv-vectorize{vector-bits=256},canonicalize,cse,loop-invariant-subset-hoisting,canonicalize))" | FileCheck %s --implicit-check-not=x64x4x32xf32

// The select as --snapkv-cpu-pipeline compiles it (keep-logits, the
// default), before bufferisation: an scf.for over the (batch, query head)
// rows carries the votes and one head's logits per span of key tiles (the
// whole tiles, then the padded last one); the logits of several heads never
// exist at once (implicit-check-not). Each key tile of the head is one
// iteration of an scf.forall that computes the tile's logits once, with a
// [2 x 32] FMA accumulator kept in registers across the D loop, reduces them
// to the tile's maximum and exp-sum, and writes them into the head's logits
// (tile-and-fuse would fuse a second copy for the sum: only one FMA loop per
// tile).
// KEEP-LABEL: func.func @select
// KEEP: scf.for %{{.*}} = %c0 to %c8 step %c1 iter_args({{.*}}) -> (tensor<1x8x?xf32>, tensor<1x1x?x64x1x32xf32>, tensor<1x1x1x64x1x32xf32>)
// KEEP: scf.forall (%{{.*}}) in (%{{.*}}) shared_outs({{.*}}) -> (tensor<1x1x?x1x32xf32>, tensor<1x1x?x1x32xf32>, tensor<1x1x?x64x1x32xf32>)
// KEEP: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<2x1x32xf32>
// KEEP-NOT: vector.fma
// KEEP: math.exp %{{.*}} : vector<8x32xf32>
// KEEP: tensor.parallel_insert_slice %{{.*}} into %{{.*}} : tensor<1x1x1x64x1x32xf32> into tensor<1x1x?x64x1x32xf32>
// The padded last tile (one iteration, no loop left).
// KEEP: vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<2x1x32xf32>
// KEEP-NOT: vector.fma
// KEEP: math.exp %{{.*}} : vector<8x32xf32>
// The votes read the kept logits back: exp, no FMA over D.
// KEEP: scf.forall (%{{.*}}) in (%{{.*}}) shared_outs({{.*}}) -> (tensor<1x1x1x?x64xf32>)
// KEEP-NOT: vector<2x1x32xf32>
// KEEP: math.exp %{{.*}} : vector<32xf32>
// KEEP-NOT: vector<2x1x32xf32>
// KEEP: math.exp %{{.*}} : vector<32xf32>
// KEEP: scf.yield %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x8x?xf32>, tensor<1x1x?x64x1x32xf32>, tensor<1x1x1x64x1x32xf32>

// With keep-logits=false:
// Each key tile (kv head, tile, query head of the group) is one iteration of
// an scf.forall; inside it the tile's logits ([64 keys x 32 window rows])
// are computed with a [2 x 32] FMA accumulator kept in registers across the
// D loop, then reduced to the tile's maximum and exp-sum eight keys at a
// time (exp on vectors). The full [.., 64, 4, 32] logits tensor of all tiles
// and query heads never exists (the second RUN line's implicit-check-not).
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
