// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-vectorize-linalg))" | FileCheck %s

// Default tiles: innermost loop 16 lanes; static extents that divide need no
// peeling.
// CHECK-LABEL: func.func @elementwise
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c16
// CHECK: vector.transfer_read {{.*}} : tensor<1x16xf32>, vector<1x16xf32>
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<1x16xf32>
// CHECK-NOT: linalg.generic
func.func @elementwise(%a: tensor<4x64xf32>, %b: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %e = tensor.empty() : tensor<4x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<4x64xf32>, tensor<4x64xf32>) outs(%e : tensor<4x64xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x64xf32>
  return %r : tensor<4x64xf32>
}

// -----

// A dynamic extent is peeled: a vectorised main loop over whole tiles and a
// scalar remainder loop.
// CHECK-LABEL: func.func @dynamic
// CHECK: %[[MAIN:.*]] = scf.for %{{.*}} = %c0 to %{{.*}} step %c16
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<1x16xf32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16 iter_args(%{{.*}} = %[[MAIN]])
// CHECK: linalg.generic
// CHECK-SAME: tensor<1x?xf32>
func.func @dynamic(%a: tensor<2x?xf32>) -> tensor<2x?xf32> {
  %c1 = arith.constant 1 : index
  %n = tensor.dim %a, %c1 : tensor<2x?xf32>
  %e = tensor.empty(%n) : tensor<2x?xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<2x?xf32>) outs(%e : tensor<2x?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.mulf %x, %x : f32
    linalg.yield %s : f32
  } -> tensor<2x?xf32>
  return %r : tensor<2x?xf32>
}

// -----

// The snapkv.tile_sizes hint replaces the default tiles and is consumed.
// CHECK-LABEL: func.func @hint
// CHECK: scf.for %{{.*}} = %c0 to %c8 step %c4
// CHECK: vector.transfer_read {{.*}} : tensor<4x32xf32>, vector<4x32xf32>
// CHECK-NOT: snapkv.tile_sizes
func.func @hint(%a: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %e = tensor.empty() : tensor<8x32xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<8x32xf32>) outs(%e : tensor<8x32xf32>) attrs = {snapkv.tile_sizes = array<i64: 4, 32>} {
  ^bb0(%x: f32, %o: f32):
    %s = arith.negf %x : f32
    linalg.yield %s : f32
  } -> tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// -----

// An op the vectoriser cannot handle (a window access d1 + d2) is left as
// it was, untiled.
// CHECK-LABEL: func.func @unsupported
// CHECK-NOT: scf.for
// CHECK: linalg.generic
func.func @unsupported(%a: tensor<36xf32>) -> tensor<32xf32> {
  %w = tensor.empty() : tensor<5xf32>
  %e = tensor.empty() : tensor<32xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, k) -> (i + k)>, affine_map<(i, k) -> (k)>, affine_map<(i, k) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%a, %w : tensor<36xf32>, tensor<5xf32>) outs(%e : tensor<32xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %o, %x : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  return %r : tensor<32xf32>
}

// -----

// Ops on i1 tensors stay scalar (byte-per-element memory, bit-packed i1
// vectors): a vectorised gather of a causal mask read only column 0.
// CHECK-LABEL: func.func @i1_mask
// CHECK-NOT: vector.
// CHECK: linalg.generic
// CHECK: tensor.extract %{{.*}} : tensor<1x1x?x?xi1>
func.func @i1_mask(%mask: tensor<1x1x?x?xi1>, %n: index) -> tensor<1x4x?x?xi1> {
  %e = tensor.empty(%n, %n) : tensor<1x4x?x?xi1>
  %r = linalg.generic {indexing_maps = [affine_map<(a, b, c, d) -> (a, b, c, d)>],
                       iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      outs(%e : tensor<1x4x?x?xi1>) {
  ^bb0(%o: i1):
    %c0 = arith.constant 0 : index
    %i = linalg.index 2 : index
    %j = linalg.index 3 : index
    %x = tensor.extract %mask[%c0, %c0, %i, %j] : tensor<1x1x?x?xi1>
    linalg.yield %x : i1
  } -> tensor<1x4x?x?xi1>
  return %r : tensor<1x4x?x?xi1>
}
