// RUN: snapkv-opt %s --inline --symbol-dce | FileCheck %s

// snapkv ops may be inlined (the dialect's inliner interface): a per-layer
// function that holds a select and a score, called twice, ends up in its
// caller, so the layers of a rewritten model can be inlined into @prefill.
// CHECK-LABEL: func.func @prefill
// CHECK-NOT: call @layer
// CHECK-COUNT-2: snapkv.select %{{.*}} window 2 capacity 5 kernel 3
// CHECK-NOT: call @layer
// CHECK: return
// CHECK-NOT: func.func private @layer
func.func private @layer(%q: tensor<1x2x2x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>)
    -> (tensor<1x2x?x8xf32>, tensor<1x2x?xf32>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3
      : (tensor<1x2x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?xi64>)
  %s1_c2 = arith.constant 2 : index
  %s1_w = arith.constant 2 : index
  %s1_l = tensor.dim %k, %s1_c2 : tensor<1x2x?x8xf32>
  %s1_p = arith.subi %s1_l, %s1_w : index
  %s1_votes = tensor.empty(%s1_p) : tensor<1x2x?xf32>
  %s1_pooled = tensor.empty(%s1_p) : tensor<1x2x?xf32>
  %votes, %pooled = snapkv.score %q, %k window 2 kernel 3
      outs(%s1_votes, %s1_pooled : tensor<1x2x?xf32>, tensor<1x2x?xf32>)
      : (tensor<1x2x2x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x2x?xf32>, tensor<1x2x?xf32>)
  return %ko, %pooled : tensor<1x2x?x8xf32>, tensor<1x2x?xf32>
}

func.func @prefill(%q: tensor<1x2x2x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>)
    -> (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) {
  %a:2 = call @layer(%q, %k, %v) : (tensor<1x2x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x2x?x8xf32>, tensor<1x2x?xf32>)
  %b:2 = call @layer(%q, %a#0, %v) : (tensor<1x2x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x2x?x8xf32>, tensor<1x2x?xf32>)
  return %a#0, %b#0 : tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>
}
