// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-vectorize-linalg))" > %t
// RUN: FileCheck %s < %t
// RUN: FileCheck %s --check-prefix=ABSENT < %t
// ABSENT-NOT lines hold for a whole function: between its label and its return.

// The pass works on buffers (after bufferisation). Default tiles: innermost
// loop 16 lanes; static extents that divide need no peeling.
// CHECK-LABEL: func.func @elementwise
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c16
// CHECK: vector.transfer_read {{.*}} : memref<4x64xf32>, vector<1x16xf32>
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<1x16xf32>
// ABSENT-LABEL: func.func @elementwise
// ABSENT-NOT: linalg.generic
// ABSENT: return
func.func @elementwise(%a: memref<4x64xf32>, %b: memref<4x64xf32>, %o: memref<4x64xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : memref<4x64xf32>, memref<4x64xf32>) outs(%o : memref<4x64xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A dynamic extent is peeled: a vectorised main loop over whole tiles and a
// scalar remainder loop on a dynamic slice.
// CHECK-LABEL: func.func @dynamic
// CHECK: scf.for %{{.*}} = %c0 to %{{.*}} step %c16
// CHECK: arith.mulf %{{.*}}, %{{.*}} : vector<1x16xf32>
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c16
// CHECK: linalg.generic
// CHECK-SAME: memref<1x?xf32
func.func @dynamic(%a: memref<2x?xf32>, %o: memref<2x?xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<2x?xf32>) outs(%o : memref<2x?xf32>) {
  ^bb0(%x: f32, %z: f32):
    %s = arith.mulf %x, %x : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// The snapkv.tile_sizes hint replaces the default tiles and is consumed.
// CHECK-LABEL: func.func @hint
// CHECK: scf.for %{{.*}} = %c0 to %c8 step %c4
// CHECK: vector.transfer_read {{.*}} : memref<8x32xf32>, vector<4x32xf32>
// ABSENT-LABEL: func.func @hint
// ABSENT-NOT: {{linalg.generic|snapkv.tile_sizes}}
// ABSENT: return
func.func @hint(%a: memref<8x32xf32>, %o: memref<8x32xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                  iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<8x32xf32>) outs(%o : memref<8x32xf32>) attrs = {snapkv.tile_sizes = array<i64: 4, 32>} {
  ^bb0(%x: f32, %z: f32):
    %s = arith.negf %x : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A reduction tiled by 1 along its (innermost) reduction loop keeps its
// accumulator in a vector carried by the loop: one read before, one write
// after, instead of a load and a store per step.
// CHECK-LABEL: func.func @accumulate
// CHECK: %[[ACC:.*]] = vector.transfer_read %[[OUT:.*]][%{{.*}}], %{{.*}} {{.*}} : memref<64xf32>, vector<16xf32>
// CHECK: %[[SUM:.*]] = scf.for %{{.*}} = %c0 to %c8 step %c1 iter_args(%[[A:.*]] = %[[ACC]]) -> (vector<16xf32>)
// CHECK-NOT: vector.transfer_write
// CHECK: arith.addf %[[A]], %{{.*}} : vector<16xf32>
// CHECK-NOT: vector.transfer_write
// CHECK: scf.yield
// CHECK: vector.transfer_write %[[SUM]], %[[OUT]][
func.func @accumulate(%a: memref<8x64xf32>) -> memref<64xf32> {
  %o = memref.alloc() : memref<64xf32>
  linalg.generic {indexing_maps = [affine_map<(j, k) -> (k, j)>, affine_map<(j, k) -> (j)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%a : memref<8x64xf32>) outs(%o : memref<64xf32>) attrs = {snapkv.tile_sizes = array<i64: 16, 1>} {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %acc, %x : f32
    linalg.yield %s : f32
  }
  return %o : memref<64xf32>
}

// -----

// An op the vectoriser cannot handle (a window access d1 + d2) is left as
// it was, untiled.
// CHECK-LABEL: func.func @unsupported
// CHECK: linalg.generic
// ABSENT-LABEL: func.func @unsupported
// ABSENT-NOT: {{scf.for|vector\.}}
// ABSENT: return
func.func @unsupported(%a: memref<36xf32>, %w: memref<5xf32>, %o: memref<32xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, k) -> (i + k)>, affine_map<(i, k) -> (k)>, affine_map<(i, k) -> (i)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%a, %w : memref<36xf32>, memref<5xf32>) outs(%o : memref<32xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %s = arith.addf %z, %x : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Ops on i1 buffers stay scalar (byte-per-element memory, bit-packed i1
// vectors): a vectorised gather of a causal mask read only column 0.
// CHECK-LABEL: func.func @i1_mask
// CHECK: linalg.generic
// CHECK: memref.load %{{.*}} : memref<1x1x?x?xi1>
// ABSENT-LABEL: func.func @i1_mask
// ABSENT-NOT: vector.
// ABSENT: return
func.func @i1_mask(%mask: memref<1x1x?x?xi1>, %o: memref<1x4x?x?xi1>) {
  linalg.generic {indexing_maps = [affine_map<(a, b, c, d) -> (a, b, c, d)>],
                  iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      outs(%o : memref<1x4x?x?xi1>) {
  ^bb0(%z: i1):
    %c0 = arith.constant 0 : index
    %i = linalg.index 2 : index
    %j = linalg.index 3 : index
    %x = memref.load %mask[%c0, %c0, %i, %j] : memref<1x1x?x?xi1>
    linalg.yield %x : i1
  }
  return
}

// -----

// The accumulator stays in memory when the loop also reads its allocation
// (here through views that fold away onto the same buffer): hoisting would
// make that read see stale values.
// CHECK-LABEL: func.func @aliased_accumulator
// CHECK: scf.for %{{.*}} = %c0 to %c8 step %c1 {
// CHECK: vector.transfer_read %[[ALLOC:[a-z0-9_]+]][
// CHECK: vector.transfer_write %{{.*}}, %[[ALLOC]][
// CHECK: }
func.func @aliased_accumulator() -> memref<9x64xf32> {
  %buf = memref.alloc() : memref<9x64xf32>
  %flat = memref.collapse_shape %buf [[0, 1]] : memref<9x64xf32> into memref<576xf32>
  %in = memref.expand_shape %flat [[0, 1]] output_shape [9, 64] : memref<576xf32> into memref<9x64xf32>
  %rows = memref.subview %in[0, 0] [8, 64] [1, 1] : memref<9x64xf32> to memref<8x64xf32, strided<[64, 1]>>
  %out = memref.subview %buf[8, 0] [1, 64] [1, 1] : memref<9x64xf32> to memref<64xf32, strided<[1], offset: 512>>
  linalg.generic {indexing_maps = [affine_map<(j, k) -> (k, j)>, affine_map<(j, k) -> (j)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%rows : memref<8x64xf32, strided<[64, 1]>>) outs(%out : memref<64xf32, strided<[1], offset: 512>>)
      attrs = {snapkv.tile_sizes = array<i64: 16, 1>} {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %acc, %x : f32
    linalg.yield %s : f32
  }
  return %buf : memref<9x64xf32>
}
