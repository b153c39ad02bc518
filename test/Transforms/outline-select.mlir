// RUN: snapkv-opt %s --snapkv-outline-select --split-input-file | FileCheck %s

// A select that shares its function with other code moves into a private
// function of its own, called where it was; so does a score.
// CHECK-LABEL: func.func @layer
// CHECK: %[[K:.*]] = arith.addf
// CHECK: %[[R:.*]]:3 = call @layer_select(%arg0, %[[K]], %arg2)
// CHECK: %[[S:.*]]:2 = call @layer_score(%arg0, %[[K]], %{{.*}}, %{{.*}})
// CHECK: return %[[R]]#0, %[[R]]#2, %[[S]]#1
// CHECK-LABEL: func.func private @layer_select
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x2x8xf32>, %[[KK:.*]]: tensor<1x2x?x8xf32>, %[[V:.*]]: tensor<1x2x?x8xf32>)
// CHECK-NEXT: %[[SK:.*]], %[[SV:.*]], %[[SI:.*]] = snapkv.select %[[Q]], %[[KK]], %[[V]] window 2 capacity 4 kernel 3
// CHECK-NEXT: return %[[SK]], %[[SV]], %[[SI]]
// CHECK-LABEL: func.func private @layer_score
// CHECK-NEXT: snapkv.score
// CHECK-NEXT: return
func.func @layer(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>)
    -> (tensor<1x4x?x8xf32>, tensor<1x4x?xi64>, tensor<1x4x?xf32>) {
  %k2 = arith.addf %k, %k : tensor<1x2x?x8xf32>
  %ks, %vs, %idx = snapkv.select %q, %k2, %v window 2 capacity 4 kernel 3
      : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?xi64>)
  %s1_c2 = arith.constant 2 : index
  %s1_w = arith.constant 2 : index
  %s1_l = tensor.dim %k2, %s1_c2 : tensor<1x2x?x8xf32>
  %s1_p = arith.subi %s1_l, %s1_w : index
  %s1_votes = tensor.empty(%s1_p) : tensor<1x4x?xf32>
  %s1_pooled = tensor.empty(%s1_p) : tensor<1x4x?xf32>
  %votes, %pooled = snapkv.score %q, %k2 window 2
      outs(%s1_votes, %s1_pooled : tensor<1x4x?xf32>, tensor<1x4x?xf32>)
      : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x4x?xf32>, tensor<1x4x?xf32>)
  return %ks, %idx, %pooled : tensor<1x4x?x8xf32>, tensor<1x4x?xi64>, tensor<1x4x?xf32>
}

// -----

// Alone in its function (beside the return), a select stays; so does one in
// a loop (a failing run-time check must return from a function body), and a
// taken name is not reused.
// CHECK-LABEL: func.func @alone
// CHECK-NEXT: snapkv.select
// CHECK-LABEL: func.func @looped
// CHECK: scf.for
// CHECK: snapkv.select
// CHECK-LABEL: func.func private @busy_select()
// CHECK-LABEL: func.func @busy
// CHECK: call @busy_select_0(
// CHECK-LABEL: func.func private @busy_select_0(
// CHECK-NEXT: snapkv.select
func.func @alone(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>)
    -> (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?xi64>) {
  %ks, %vs, %idx = snapkv.select %q, %k, %v window 2 capacity 4
      : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?xi64>)
  return %ks, %vs, %idx : tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?xi64>
}

func.func @looped(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>,
                  %init: tensor<1x4x4xi64>, %n: index) -> tensor<1x4x4xi64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> tensor<1x4x4xi64> {
    %ks, %vs, %idx = snapkv.select %q, %k, %v window 2 capacity 4
        : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
        -> (tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x4x4xi64>)
    scf.yield %idx : tensor<1x4x4xi64>
  }
  return %r : tensor<1x4x4xi64>
}

func.func private @busy_select()

func.func @busy(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>)
    -> tensor<1x4x?xi64> {
  %k2 = arith.addf %k, %k : tensor<1x2x?x8xf32>
  %ks, %vs, %idx = snapkv.select %q, %k2, %v window 2 capacity 4
      : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?xi64>)
  return %idx : tensor<1x4x?xi64>
}
