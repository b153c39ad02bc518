// RUN: snapkv-opt %s --split-input-file --snapkv-expose-scores | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --snapkv-expose-scores=functions=prefill | FileCheck %s --check-prefix=NAMED


// Every select gets a snapkv.score on the same queries and keys with the same
// clauses (capacity and order are not score clauses); the function returns,
// per select, queries, keys, indices, votes, pooled after its own results,
// and records each select's clauses.
// CHECK-LABEL: func.func @prefill
// CHECK-SAME: -> (tensor<1x2x?x2xf32>, tensor<1x2x?x2xf32>, tensor<1x4x2x2xf32>, tensor<1x2x?x2xf32>, tensor<1x2x?xi64>, tensor<1x2x?xf32>, tensor<1x2x?xf32>, tensor<1x4x2x2xf32>, tensor<1x2x6x2xf32>, tensor<1x4x5xi64>, tensor<1x4x4xf32>, tensor<1x4x4xf32>)
// CHECK-SAME: attributes {foo, snapkv.exposed_scores = ["window=2 capacity=4 kernel=3 pooling=max gqa=mean order=score scale=5.000000e-01", "window=2 capacity=5 kernel=5 pooling=avg gqa=expand order=position"]}
// CHECK: %[[K0:.*]], %[[V0:.*]], %[[I0:.*]] = snapkv.select %arg0, %arg1, %arg2
// CHECK: %[[L0:.*]] = tensor.dim %arg1, %{{.*}} : tensor<1x2x?x2xf32>
// CHECK: %[[P0:.*]] = arith.subi %[[L0]], %{{.*}} : index
// CHECK: %[[VI0:.*]] = tensor.empty(%[[P0]]) : tensor<1x2x?xf32>
// CHECK: %[[PI0:.*]] = tensor.empty(%[[P0]]) : tensor<1x2x?xf32>
// CHECK-NEXT: %[[VOTES0:.*]], %[[POOLED0:.*]] = snapkv.score %arg0, %arg1 window 2 kernel 3 pooling max gqa mean scale 5.000000e-01 outs(%[[VI0]], %[[PI0]] : tensor<1x2x?xf32>, tensor<1x2x?xf32>) : (tensor<1x4x2x2xf32>, tensor<1x2x?x2xf32>) -> (tensor<1x2x?xf32>, tensor<1x2x?xf32>)
// CHECK: %{{.*}}, %{{.*}}, %[[I1:.*]] = snapkv.select %arg0, %[[KS:.*]], %[[KS]] window 2 capacity 5 :
// CHECK: %[[VOTES1:.*]], %[[POOLED1:.*]] = snapkv.score %arg0, %[[KS]] window 2 outs(%{{.*}}, %{{.*}} : tensor<1x4x4xf32>, tensor<1x4x4xf32>) : (tensor<1x4x2x2xf32>, tensor<1x2x6x2xf32>) -> (tensor<1x4x4xf32>, tensor<1x4x4xf32>)
// CHECK: return %[[K0]], %[[V0]], %arg0, %arg1, %[[I0]], %[[VOTES0]], %[[POOLED0]], %arg0, %[[KS]], %[[I1]], %[[VOTES1]], %[[POOLED1]] :
// NAMED-LABEL: func.func @prefill
// NAMED: snapkv.score
// NAMED-LABEL: func.func @other
// NAMED-NOT: snapkv.score
// NAMED-NOT: snapkv.exposed_scores
func.func @prefill(%q: tensor<1x4x2x2xf32>, %k: tensor<1x2x?x2xf32>, %v: tensor<1x2x?x2xf32>)
    -> (tensor<1x2x?x2xf32>, tensor<1x2x?x2xf32>) attributes {foo} {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 2 capacity 4 kernel 3 pooling max
      gqa mean order score scale 0.5
      : (tensor<1x4x2x2xf32>, tensor<1x2x?x2xf32>, tensor<1x2x?x2xf32>)
      -> (tensor<1x2x?x2xf32>, tensor<1x2x?x2xf32>, tensor<1x2x?xi64>)
  %ks = tensor.empty() : tensor<1x2x6x2xf32>
  %k1, %v1, %i1 = snapkv.select %q, %ks, %ks window 2 capacity 5
      : (tensor<1x4x2x2xf32>, tensor<1x2x6x2xf32>, tensor<1x2x6x2xf32>)
      -> (tensor<1x4x5x2xf32>, tensor<1x4x5x2xf32>, tensor<1x4x5xi64>)
  return %ko, %vo : tensor<1x2x?x2xf32>, tensor<1x2x?x2xf32>
}
func.func @other(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64> {
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 3
      : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>)
      -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  return %idx : tensor<1x1x3xi64>
}

// -----

// The score ranks as the select does: a prefix_votes select gets a
// prefix_votes score; recent, random and keydiff rank without votes, and
// their score shows the votes.
// CHECK-LABEL: func.func @prefill(%arg0: tensor<1x1x2x2xf32>
// CHECK: snapkv.select {{.*}} scoring prefix_votes
// CHECK: snapkv.score %arg0, %arg1 window 2 scoring prefix_votes outs(
// CHECK: snapkv.select {{.*}} scoring recent
// CHECK: snapkv.score %arg0, %arg1 window 2 outs(
// CHECK: snapkv.select {{.*}} scoring keydiff
// CHECK: snapkv.score %arg0, %arg1 window 2 outs(
// NAMED-LABEL: func.func @prefill(%arg0: tensor<1x1x2x2xf32>
// NAMED: snapkv.score {{.*}} scoring prefix_votes
func.func @prefill(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x8x2xf32>) -> (tensor<1x1x4xi64>, tensor<1x1x4xi64>, tensor<1x1x4xi64>) {
  %k0, %v0, %i0 = snapkv.select %q, %k, %k window 2 capacity 4 scoring prefix_votes
      : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
      -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  %k1, %v1, %i1 = snapkv.select %q, %k, %k window 2 capacity 4 scoring recent
      : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
      -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  %k2, %v2, %i2 = snapkv.select %q, %k, %k window 2 capacity 4 scoring keydiff
      : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
      -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  return %i0, %i1, %i2 : tensor<1x1x4xi64>, tensor<1x1x4xi64>, tensor<1x1x4xi64>
}
