// snapkv-decompose-select splits a select into its stage ops through
// SelectOp::decomposeOperation (AggregatedOpInterface; upstream's
// transform.structured.decompose_interface takes single-result ops only).
// RUN: snapkv-opt %s --split-input-file --snapkv-decompose-select | FileCheck %s

// A static prompt longer than the capacity: score, top positions, two gathers;
// the select's clauses go to the stage that reads them.
// CHECK-LABEL: func.func @long
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x2x8xf32>, %[[K:.*]]: tensor<1x2x16x8xf32>, %[[V:.*]]: tensor<1x2x16x8xf32>)
// CHECK: %[[VOTES:.*]], %[[POOLED:.*]] = snapkv.score %[[Q]], %[[K]] window 2 kernel 3 pooling max scale 5.000000e-01 scoring prefix_votes
// CHECK-SAME: -> (tensor<1x4x14xf32>, tensor<1x4x14xf32>)
// CHECK: %[[I0:.*]] = tensor.empty() : tensor<1x4x5xi64>
// CHECK: %[[IDX:.*]] = snapkv.top_positions %[[POOLED]] window 2 capacity 5 order score outs(%[[I0]] : tensor<1x4x5xi64>)
// CHECK: %[[KS:.*]] = snapkv.gather %[[K]][%[[IDX]]] outs(%{{.*}} : tensor<1x4x5x8xf32>) : tensor<1x2x16x8xf32>, tensor<1x4x5xi64> -> tensor<1x4x5x8xf32>
// CHECK: %[[VS:.*]] = snapkv.gather %[[V]][%[[IDX]]] outs(%{{.*}} : tensor<1x4x5x8xf32>)
// CHECK: return %[[KS]], %[[VS]], %[[IDX]]
func.func @long(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>)
    -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3 pooling max
      order score scale 0.5 scoring prefix_votes
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return %a, %b, %c : tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>
}

// -----

// `block` goes to the score (its pooled result holds the block sums); the
// top positions then take whole blocks by themselves.
// CHECK-LABEL: func.func @blocks
// CHECK: %{{.*}}, %[[POOLED:.*]] = snapkv.score %{{.*}}, %{{.*}} window 2 block 4 outs(
// CHECK: snapkv.top_positions %[[POOLED]] window 2 capacity 10 outs(
func.func @blocks(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>)
    -> (tensor<1x4x10x8xf32>, tensor<1x4x10x8xf32>, tensor<1x4x10xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 10 block 4
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x10x8xf32>, tensor<1x4x10x8xf32>, tensor<1x4x10xi64>)
  return %a, %b, %c : tensor<1x4x10x8xf32>, tensor<1x4x10x8xf32>, tensor<1x4x10xi64>
}

// -----

// A static prompt shorter than the capacity: the bypass keeps every
// position, gathered through the index tensor 0 .. L-1.
// CHECK-LABEL: func.func @short
// CHECK-NOT: snapkv.score
// CHECK: %[[ALL:.*]] = tensor.generate
// CHECK: ^bb0(%{{.*}}: index, %{{.*}}: index, %[[J:.*]]: index):
// CHECK: arith.index_cast %[[J]] : index to i64
// CHECK: } : tensor<1x2x4xi64>
// CHECK: snapkv.gather %{{.*}}[%[[ALL]]] outs(%{{.*}} : tensor<1x2x4x8xf16>) : tensor<1x2x4x8xf16>, tensor<1x2x4xi64> -> tensor<1x2x4x8xf16>
// CHECK: snapkv.gather %{{.*}}[%[[ALL]]]
// CHECK: return
func.func @short(%q: tensor<1x4x2x8xf16>, %k: tensor<1x2x4x8xf16>, %v: tensor<1x2x4x8xf16>)
    -> (tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>, tensor<1x2x4xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 gqa mean
      : (tensor<1x4x2x8xf16>, tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>)
      -> (tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>, tensor<1x2x4xi64>)
  return %a, %b, %c : tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>, tensor<1x2x4xi64>
}

// -----

// A dynamic prompt length: the whole op's run-time checks, then the bypass
// or the stages, each cast to the select's result types.
// CHECK-LABEL: func.func @dynamic
// CHECK: %[[L:.*]] = tensor.dim %{{.*}}, %{{.*}} : tensor<1x2x?x8xf32>
// CHECK: cf.assert %{{.*}}, "snapkv.select: prompt length of 'values' differs from 'keys'"
// CHECK: cf.assert %{{.*}}, "snapkv.select: prompt length (keys dim 2) is shorter than window 2"
// CHECK: cf.assert %{{.*}}, "snapkv.select: prompt length (keys dim 2) must be below 2^31 - 1"
// CHECK: %[[SHORT:.*]] = arith.cmpi slt, %[[L]], %{{.*}} : index
// CHECK: scf.if %[[SHORT]] -> (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?xi64>)
// CHECK: tensor.generate %[[L]]
// CHECK: snapkv.gather
// CHECK: } else {
// CHECK: snapkv.score {{.*}} -> (tensor<1x2x?xf32>, tensor<1x2x?xf32>)
// CHECK: snapkv.top_positions {{.*}} : tensor<1x2x?xf32> -> tensor<1x2x5xi64>
// CHECK: tensor.cast %{{.*}} : tensor<1x2x5x8xf32> to tensor<1x2x?x8xf32>
func.func @dynamic(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>)
    -> (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 gqa max
      : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?xi64>)
  return %a, %b, %c : tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?xi64>
}

// -----

// scoring recent / random rank without scores: the op stays whole.
// CHECK-LABEL: func.func @unscored
// CHECK: snapkv.select {{.*}} scoring recent
// CHECK: snapkv.select {{.*}} scoring random
// CHECK-NOT: snapkv.top_positions
func.func @unscored(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>)
    -> (tensor<1x4x5xi64>, tensor<1x4x5xi64>) {
  %a:3 = snapkv.select %q, %k, %v window 2 capacity 5 scoring recent
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  %b:3 = snapkv.select %q, %k, %v window 2 capacity 5 scoring random seed 3
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return %a#2, %b#2 : tensor<1x4x5xi64>, tensor<1x4x5xi64>
}
