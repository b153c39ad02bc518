// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=cpu --snapkv-tile-and-fuse -canonicalize -cse --split-input-file | FileCheck %s

// tiling=cpu with keep-logits (the default): the scoring runs one (batch,
// query head) at a time, B x Hq = 2 x 4 rows in order, and the loop carries
// the votes and one head's kept logits ([1, 1, n, T, 1, W]: W x L floats,
// never G heads' worth). Row i is batch i / Hq, query head i % Hq, which reads
// kv head (i % Hq) / G. With gqa mean the votes start at 0 and each head adds
// its votes / G into its kv head's row, in head order (what the aggregation of
// the G heads computes in the untiled form).
// CHECK-LABEL: func.func @mean
// CHECK-DAG: %[[G:.*]] = arith.constant 2.000000e+00 : f32
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[INIT:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.*}} : tensor<2x2x36xf32>)
// CHECK: scf.for %[[I:.*]] = %c0 to %c8 step %c1 iter_args(%[[VOTES:.*]] = %[[INIT]], %{{.*}} = %{{.*}}) -> (tensor<2x2x36xf32>, tensor<1x1x1x40x1x4xf32>)
// CHECK: %[[B:.*]] = arith.divui %[[I]], %c4 : index
// CHECK: %[[H:.*]] = arith.remui %[[I]], %c4 : index
// CHECK: %[[KV:.*]] = arith.divui %[[H]], %c2 : index
// CHECK: %[[ROW:.*]] = tensor.extract_slice %[[VOTES]][%[[B]], %[[KV]], 0] [1, 1, 36]
// CHECK: %[[FOLD:.*]] = linalg.generic {{.*}} outs(%[[ROW]] : tensor<1x1x36xf32>)
// CHECK: %[[SHARE:.*]] = arith.divf %{{.*}}, %[[G]] : f32
// CHECK: arith.addf %{{.*}}, %[[SHARE]] : f32
// CHECK: tensor.insert_slice %[[FOLD]] into %[[VOTES]][%[[B]], %[[KV]], 0] [1, 1, 36]
// CHECK: scf.yield %{{.*}}, %{{.*}} : tensor<2x2x36xf32>, tensor<1x1x1x40x1x4xf32>
func.func @mean(%q: tensor<2x4x4x8xf32>, %k: tensor<2x2x40x8xf32>, %v: tensor<2x2x40x8xf32>)
    -> (tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 4 capacity 16 gqa mean
      : (tensor<2x4x4x8xf32>, tensor<2x2x40x8xf32>, tensor<2x2x40x8xf32>)
      -> (tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16xi64>)
  return %a, %b, %c : tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16xi64>
}

// -----

// gqa max: the votes start at -inf and each head's votes are folded in with
// maximumf.
// CHECK-LABEL: func.func @max
// CHECK-DAG: %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK: %[[INIT:.*]] = linalg.fill ins(%[[NEGINF]] : f32) outs(%{{.*}} : tensor<2x2x36xf32>)
// CHECK: scf.for %[[I:.*]] = %c0 to %c8 step %c1 iter_args(%[[VOTES:.*]] = %[[INIT]], %{{.*}} = %{{.*}}) -> (tensor<2x2x36xf32>, tensor<1x1x1x40x1x4xf32>)
// CHECK: %[[ROW:.*]] = tensor.extract_slice %[[VOTES]]
// CHECK: %[[FOLD:.*]] = linalg.generic {{.*}} outs(%[[ROW]] : tensor<1x1x36xf32>)
// CHECK-NEXT: ^bb0(%[[IN:.*]]: f32, %[[OUT:.*]]: f32):
// CHECK-NEXT: arith.maximumf %[[OUT]], %[[IN]] : f32
// CHECK: tensor.insert_slice %[[FOLD]] into %[[VOTES]]
func.func @max(%q: tensor<2x4x4x8xf32>, %k: tensor<2x2x40x8xf32>, %v: tensor<2x2x40x8xf32>)
    -> (tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 4 capacity 16 gqa max
      : (tensor<2x4x4x8xf32>, tensor<2x2x40x8xf32>, tensor<2x2x40x8xf32>)
      -> (tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16xi64>)
  return %a, %b, %c : tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16xi64>
}

// -----

// gqa expand: each head's votes go to its own row [b, h], nothing is folded.
// CHECK-LABEL: func.func @expand
// CHECK: scf.for %[[I:.*]] = %c0 to %c8 step %c1 iter_args(%[[VOTES:.*]] = %{{.*}}, %{{.*}} = %{{.*}}) -> (tensor<2x4x36xf32>, tensor<1x1x1x40x1x4xf32>)
// CHECK: %[[B:.*]] = arith.divui %[[I]], %c4 : index
// CHECK: %[[H:.*]] = arith.remui %[[I]], %c4 : index
// CHECK-NOT: tensor.extract_slice %[[VOTES]]
// CHECK: tensor.insert_slice %{{.*}} into %[[VOTES]][%[[B]], %[[H]], 0] [1, 1, 36]
func.func @expand(%q: tensor<2x4x4x8xf32>, %k: tensor<2x2x40x8xf32>, %v: tensor<2x2x40x8xf32>)
    -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 4 capacity 16
      : (tensor<2x4x4x8xf32>, tensor<2x2x40x8xf32>, tensor<2x2x40x8xf32>)
      -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16xi64>)
  return %a, %b, %c : tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16xi64>
}
