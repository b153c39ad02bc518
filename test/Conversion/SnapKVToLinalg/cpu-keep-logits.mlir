// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=cpu -canonicalize -cse --split-input-file | FileCheck %s

// tiling=cpu with keep-logits (the default): the select as its stage ops, the
// scoring tiled over its (batch, selection head) rows, B x Hc = 2 x 2 with gqa
// mean. In a row's tile the scoring runs one query head at a time, the G = 2
// query heads of the row's kv head in order, and the loop carries the row's
// votes and one head's kept logits ([1, 1, n, T, 1, W]: W x L floats, never G
// heads' worth). With gqa mean the votes start at 0 and each head adds its
// votes / G into the row, in head order (what the aggregation of the G heads
// computes in the untiled form).
// CHECK-LABEL: func.func @mean
// CHECK-DAG: %[[G:.*]] = arith.constant 2.000000e+00 : f32
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (2, 2) shared_outs
// CHECK: %[[INIT:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.*}} : tensor<1x1x36xf32>)
// CHECK: scf.for %{{.*}} = %c0 to %c2 step %c1 iter_args(%[[VOTES:.*]] = %[[INIT]], %{{.*}} = %{{.*}}) -> (tensor<1x1x36xf32>, tensor<1x1x1x40x1x4xf32>)
// CHECK: %[[ROW:.*]] = tensor.extract_slice %[[VOTES]]
// CHECK: %[[FOLD:.*]] = linalg.generic {{.*}} outs(%[[ROW]] : tensor<1x1x36xf32>)
// CHECK: %[[SHARE:.*]] = arith.divf %{{.*}}, %[[G]] : f32
// CHECK: arith.addf %{{.*}}, %[[SHARE]] : f32
// CHECK: tensor.insert_slice %[[FOLD]] into %[[VOTES]]
// CHECK: scf.yield %{{.*}}, %{{.*}} : tensor<1x1x36xf32>, tensor<1x1x1x40x1x4xf32>
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
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (2, 2) shared_outs
// CHECK: %[[INIT:.*]] = linalg.fill ins(%[[NEGINF]] : f32) outs(%{{.*}} : tensor<1x1x36xf32>)
// CHECK: scf.for %{{.*}} = %c0 to %c2 step %c1 iter_args(%[[VOTES:.*]] = %[[INIT]], %{{.*}} = %{{.*}}) -> (tensor<1x1x36xf32>, tensor<1x1x1x40x1x4xf32>)
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

// gqa expand: a row is one query head, whose votes are the row's: no loop over
// heads, nothing folded; the head's logits are kept for its votes.
// CHECK-LABEL: func.func @expand
// CHECK: scf.forall (%{{.*}}, %{{.*}}) in (2, 4) shared_outs
// CHECK-NOT: scf.for
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x1x1x40x1x4xf32>)
// CHECK-NOT: scf.for
// CHECK: tensor.collapse_shape %{{.*}} {{\[}}[0], [1, 2], [3, 4]] : tensor<1x1x1x1x40xf32> into tensor<1x1x40xf32>
func.func @expand(%q: tensor<2x4x4x8xf32>, %k: tensor<2x2x40x8xf32>, %v: tensor<2x2x40x8xf32>)
    -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 4 capacity 16
      : (tensor<2x4x4x8xf32>, tensor<2x2x40x8xf32>, tensor<2x2x40x8xf32>)
      -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16xi64>)
  return %a, %b, %c : tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16xi64>
}
