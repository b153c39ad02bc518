// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-vectorize{vector-bits=256},canonicalize,cse,loop-invariant-subset-hoisting,canonicalize))" | FileCheck %s --implicit-check-not=linalg.generic

// One key tile's logits (64 keys x 32 window rows, D = 128), as the scoring
// tiles contain them: a [2 keys x 32 rows] accumulator (8 AVX2 registers)
// carried across the D loop, one broadcast key element times a row vector
// per FMA.
// CHECK-LABEL: func.func @logits
// CHECK: scf.for %[[J:.*]] = %c0 to %c64 step %c2
// CHECK: %[[INIT:.*]] = vector.transfer_read {{.*}} : tensor<2x1x32xf32>, vector<2x1x32xf32>
// CHECK: %[[ACC:.*]] = scf.for %{{.*}} = %c0 to %c128 step %c1 iter_args(%[[A:.*]] = %[[INIT]]) -> (vector<2x1x32xf32>)
// CHECK-NOT: vector.transfer_write
// CHECK: vector.fma %{{.*}}, %{{.*}}, %[[A]] : vector<2x1x32xf32>
// CHECK: scf.yield
// CHECK: vector.transfer_write %[[ACC]]
func.func @logits(%qt: tensor<128x1x32xf32>, %k: tensor<64x128xf32>, %init: tensor<64x1x32xf32>) -> tensor<64x1x32xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(j, g, w, d) -> (d, g, w)>, affine_map<(j, g, w, d) -> (j, d)>, affine_map<(j, g, w, d) -> (j, g, w)>],
      iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%qt, %k : tensor<128x1x32xf32>, tensor<64x128xf32>) outs(%init : tensor<64x1x32xf32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %m = arith.mulf %a, %b fastmath<contract> : f32
    %s = arith.addf %acc, %m fastmath<contract> : f32
    linalg.yield %s : f32
  } -> tensor<64x1x32xf32>
  return %r : tensor<64x1x32xf32>
}

// -----

// A tile statistic (reduction over the tile's keys, rows as the vector):
// eight keys per step, the running maximum in registers.
// CHECK-LABEL: func.func @rowmax
// CHECK: %[[INIT:.*]] = vector.transfer_read {{.*}} : tensor<32xf32>, vector<32xf32>
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c8 iter_args(%[[A:.*]] = %[[INIT]]) -> (vector<32xf32>)
// CHECK: vector.multi_reduction <maximumf>, %{{.*}}, %[[A]] [0] : vector<8x32xf32> to vector<32xf32>
func.func @rowmax(%x: tensor<64x32xf32>, %init: tensor<32xf32>) -> tensor<32xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(j, w) -> (j, w)>, affine_map<(j, w) -> (w)>],
      iterator_types = ["reduction", "parallel"]}
      ins(%x : tensor<64x32xf32>) outs(%init : tensor<32xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %m = arith.maximumf %acc, %a : f32
    linalg.yield %m : f32
  } -> tensor<32xf32>
  return %r : tensor<32xf32>
}

// -----

// A dynamic innermost size is left to the later lowering to loops (no masks,
// no scalar remainder of a vector loop).
// CHECK-LABEL: func.func @dynamic
// CHECK: linalg.generic
// CHECK-NOT: vector.
func.func @dynamic(%x: tensor<?xi32>, %init: tensor<i32>) -> tensor<i32> {
  %r = linalg.generic {indexing_maps = [affine_map<(j) -> (j)>, affine_map<(j) -> ()>],
      iterator_types = ["reduction"]}
      ins(%x : tensor<?xi32>) outs(%init : tensor<i32>) {
  ^bb0(%a: i32, %acc: i32):
    %m = arith.addi %acc, %a : i32
    linalg.yield %m : i32
  } -> tensor<i32>
  return %r : tensor<i32>
}
