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

// A dynamic innermost size of an op that is not a contraction is left to the
// later lowering to loops (no masks, no scalar remainder of a vector loop).
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

// -----

// A contraction whose vector dimension is dynamic (Q x K^T over a dynamic
// prompt length): tiled by the vector width, the full tiles vectorised, the
// last, partial tile peeled off as a scalar remainder loop.
// CHECK-LABEL: func.func @dynamic_vector_dim
// CHECK: %[[FULL:.*]] = affine.apply
// CHECK: scf.for %{{.*}} = %c0 to %[[FULL]] step %c32
// CHECK: vector.fma {{.*}} : vector<32xf32>
// CHECK: scf.for %{{.*}} = %[[FULL]] to %{{.*}} step %c32
// CHECK-NOT: vector.
// CHECK: linalg.batch_matmul {{.*}} -> tensor<1x1x?xf32>
func.func @dynamic_vector_dim(%a: tensor<4x?x16xf32>, %b: tensor<4x16x?xf32>, %init: tensor<4x?x?xf32>) -> tensor<4x?x?xf32> {
  %r = linalg.batch_matmul ins(%a, %b : tensor<4x?x16xf32>, tensor<4x16x?xf32>) outs(%init : tensor<4x?x?xf32>) -> tensor<4x?x?xf32>
  return %r : tensor<4x?x?xf32>
}

// -----

// A dynamic reduction after a static vector dimension (P x V over a dynamic
// prompt length) steps by one; the vector dimension is still vectorised.
// CHECK-LABEL: func.func @dynamic_reduction
// CHECK: scf.for %{{.*}} = %c0 to %{{.*}} step %c1
// CHECK: vector.fma {{.*}} : vector<16xf32>
// CHECK-NOT: linalg.batch_matmul
func.func @dynamic_reduction(%p: tensor<4x?x?xf32>, %v: tensor<4x?x16xf32>, %init: tensor<4x?x16xf32>) -> tensor<4x?x16xf32> {
  %r = linalg.batch_matmul ins(%p, %v : tensor<4x?x?xf32>, tensor<4x?x16xf32>) outs(%init : tensor<4x?x16xf32>) -> tensor<4x?x16xf32>
  return %r : tensor<4x?x16xf32>
}

// -----

// A projection over a dynamic number of rows (tokens) with a static vector
// dimension: a [6 rows x 16] accumulator (12 AVX2 registers) carried across
// the reduction, the rows' loop peeled so the full tiles are static; the
// last rows (fewer than 6) are taken one at a time, still vectorised.
// Each step reads the tile's column of x as [6x1] and its row of w as [1x16]
// and broadcasts them (one load and splat per row once lowered), with no
// transposes: the contraction lowering's [6x16x1] operands are folded away.
// CHECK-LABEL: func.func @dynamic_rows
// CHECK: %[[FULL:.*]] = affine.apply
// CHECK: scf.for %{{.*}} = %c0 to %[[FULL]] step %c6
// CHECK: scf.for %{{.*}} = %c0 to %c32 step %c16
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c1 iter_args(%[[ACC:.*]] = %{{.*}}) -> (vector<6x16xf32>)
// CHECK-NOT: vector.transpose
// CHECK: %[[COL:.*]] = vector.transfer_read %{{.*}}[%c0, %c0], %{{.*}} {in_bounds = [true, true]} : tensor<6x1xf32>, vector<6x1xf32>
// CHECK: %[[A:.*]] = vector.broadcast %[[COL]] : vector<6x1xf32> to vector<6x16xf32>
// CHECK: %[[ROW:.*]] = vector.transfer_read %{{.*}}[%c0, %c0], %{{.*}} {in_bounds = [true, true]} : tensor<1x16xf32>, vector<1x16xf32>
// CHECK: %[[B:.*]] = vector.broadcast %[[ROW]] : vector<1x16xf32> to vector<6x16xf32>
// CHECK-NOT: vector.transpose
// CHECK: vector.fma %[[A]], %[[B]], %[[ACC]] : vector<6x16xf32>
// CHECK: scf.for %{{.*}} = %[[FULL]] to %{{.*}} step %c6
// CHECK: vector.fma {{.*}} : vector<16xf32>
// CHECK-NOT: linalg.matmul
func.func @dynamic_rows(%x: tensor<?x64xf32>, %w: tensor<64x32xf32>, %init: tensor<?x32xf32>) -> tensor<?x32xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x32xf32>) outs(%init : tensor<?x32xf32>) -> tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}

// -----

// A single row (a decode step's vector x matrix): the reduction loop runs
// outside the loop over the vector's tiles, so the matrix is read row after
// row; the accumulators are read and written in the output each step.
// CHECK-LABEL: func.func @single_row
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c1
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c32
// CHECK: vector.transfer_read {{.*}} : tensor<1x32xf32>, vector<32xf32>
// CHECK: vector.fma {{.*}} : vector<32xf32>
// CHECK: vector.transfer_write
// CHECK-NOT: linalg.matmul
func.func @single_row(%x: tensor<1x64xf32>, %w: tensor<64x64xf32>, %init: tensor<1x64xf32>) -> tensor<1x64xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<1x64xf32>, tensor<64x64xf32>) outs(%init : tensor<1x64xf32>) -> tensor<1x64xf32>
  return %r : tensor<1x64xf32>
}

// -----

// 48 columns with 8-lane vectors: the register tile's vector is 16 wide (a
// power-of-two number of vectors that divides the columns), not 24: a
// 3-vector type leaves LLVM inserts and spills (a static-rows GEMM with
// [8 x 48] tiles ran at 4 % of the FMA peak).
// CHECK-LABEL: func.func @power_of_two_vectors
// CHECK: scf.for %{{.*}} = %c0 to %c48 step %c16
// CHECK: vector.fma {{.*}} : vector<{{[0-9]+}}x16xf32>
// CHECK-NOT: x24xf32>
func.func @power_of_two_vectors(%x: tensor<16x64xf32>, %w: tensor<64x48xf32>, %init: tensor<16x48xf32>) -> tensor<16x48xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<16x64xf32>, tensor<64x48xf32>) outs(%init : tensor<16x48xf32>) -> tensor<16x48xf32>
  return %r : tensor<16x48xf32>
}

// -----

// The cleanup of register-tile reads: a transpose that only moves a unit
// dimension is a shape_cast; one that reorders two real dimensions stays.
// CHECK-LABEL: func.func @transposes
// CHECK: vector.shape_cast %{{.*}} : vector<6x16x1xf32> to vector<1x6x16xf32>
// CHECK: vector.transpose %{{.*}}, [1, 0] : vector<6x16xf32> to vector<16x6xf32>
func.func @transposes(%a: vector<6x16x1xf32>, %b: vector<6x16xf32>) -> (vector<1x6x16xf32>, vector<16x6xf32>) {
  %0 = vector.transpose %a, [2, 0, 1] : vector<6x16x1xf32> to vector<1x6x16xf32>
  %1 = vector.transpose %b, [1, 0] : vector<6x16xf32> to vector<16x6xf32>
  return %0, %1 : vector<1x6x16xf32>, vector<16x6xf32>
}

// -----

// A read whose result loses a unit dimension through a shape_cast becomes a
// read without that dimension only if the dimension is known in bounds: a
// possibly out-of-bounds unit dimension (here column %j of a tensor with a
// dynamic number of columns) yields the padding when it is out of bounds,
// which the narrower read would no longer check.
// CHECK-LABEL: func.func @unit_dims
// CHECK: %[[OOB:.*]] = vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} {in_bounds = [true, false]} : tensor<16x?xf32>, vector<16x1xf32>
// CHECK: %[[IN:.*]] = vector.transfer_read %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} {in_bounds = [true], {{.*}}} : tensor<16x?xf32>, vector<16xf32>
// CHECK: %[[CAST:.*]] = vector.shape_cast %[[OOB]] : vector<16x1xf32> to vector<16xf32>
// CHECK: return %[[IN]], %[[CAST]]
func.func @unit_dims(%t: tensor<16x?xf32>, %j: index) -> (vector<16xf32>, vector<16xf32>) {
  %c0 = arith.constant 0 : index
  %pad = arith.constant 0.0 : f32
  %a = vector.transfer_read %t[%c0, %j], %pad {in_bounds = [true, true]} : tensor<16x?xf32>, vector<16x1xf32>
  %b = vector.transfer_read %t[%c0, %j], %pad {in_bounds = [true, false]} : tensor<16x?xf32>, vector<16x1xf32>
  %sa = vector.shape_cast %a : vector<16x1xf32> to vector<16xf32>
  %sb = vector.shape_cast %b : vector<16x1xf32> to vector<16xf32>
  return %sa, %sb : vector<16xf32>, vector<16xf32>
}
