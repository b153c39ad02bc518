// RUN: snapkv-opt %s --pass-pipeline="builtin.module(func.func(snapkv-fuse-elementwise))" | FileCheck %s

// Chains whose work grows with the prompt length fuse: the decomposed
// softmax's subtract-and-exp over [heads, L, L] and the same chain over
// [1, L, 64] each become one op. A producer with a second use stays, and so
// does one that its consumer broadcasts (a [1, L, 1] row statistic read
// for each of 64 columns would be recomputed 64 times).
// CHECK-LABEL: func.func @chains
// CHECK: %[[EXP:.*]] = linalg.generic
// CHECK: arith.subf
// CHECK-NEXT: math.exp
// CHECK: } -> tensor<1x4x?x?xf32>
// CHECK: %[[LEXP:.*]] = linalg.generic
// CHECK: arith.negf
// CHECK-NEXT: math.exp
// CHECK: } -> tensor<1x?x64xf32>
// CHECK: %[[SHARED:.*]] = linalg.generic
// CHECK: arith.subf
// CHECK-NOT: math.exp
// CHECK: } -> tensor<1x4x?x?xf32>
// CHECK: linalg.generic
// CHECK: math.exp
// CHECK: %[[ROW:.*]] = linalg.generic
// CHECK: math.rsqrt
// CHECK: } -> tensor<1x?x1xf32>
// CHECK: linalg.generic
// CHECK-NOT: math.rsqrt
// CHECK: arith.mulf
// CHECK: return %[[EXP]], %[[LEXP]], %{{.*}}, %[[SHARED]], %{{.*}}
#q = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#qrow = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#l = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#lrow = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
func.func @chains(%s: tensor<1x4x?x?xf32>, %m: tensor<1x4x?x1xf32>, %x: tensor<1x?x64xf32>,
                  %r: tensor<1x?x1xf32>)
    -> (tensor<1x4x?x?xf32>, tensor<1x?x64xf32>, tensor<1x4x?x?xf32>, tensor<1x4x?x?xf32>,
        tensor<1x?x64xf32>) {
  %sub = linalg.generic {indexing_maps = [#q, #qrow, #q], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s, %m : tensor<1x4x?x?xf32>, tensor<1x4x?x1xf32>) outs(%s : tensor<1x4x?x?xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.subf %a, %b : f32
    linalg.yield %d : f32
  } -> tensor<1x4x?x?xf32>
  %exp = linalg.generic {indexing_maps = [#q, #q], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%sub : tensor<1x4x?x?xf32>) outs(%s : tensor<1x4x?x?xf32>) {
  ^bb0(%a: f32, %o: f32):
    %e = math.exp %a : f32
    linalg.yield %e : f32
  } -> tensor<1x4x?x?xf32>
  %lsub = linalg.generic {indexing_maps = [#l, #l], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<1x?x64xf32>) outs(%x : tensor<1x?x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %d = arith.negf %a : f32
    linalg.yield %d : f32
  } -> tensor<1x?x64xf32>
  %lexp = linalg.generic {indexing_maps = [#l, #l], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%lsub : tensor<1x?x64xf32>) outs(%x : tensor<1x?x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %e = math.exp %a : f32
    linalg.yield %e : f32
  } -> tensor<1x?x64xf32>
  %shared = linalg.generic {indexing_maps = [#q, #qrow, #q], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%s, %m : tensor<1x4x?x?xf32>, tensor<1x4x?x1xf32>) outs(%s : tensor<1x4x?x?xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.subf %a, %b : f32
    linalg.yield %d : f32
  } -> tensor<1x4x?x?xf32>
  %sexp = linalg.generic {indexing_maps = [#q, #q], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%shared : tensor<1x4x?x?xf32>) outs(%s : tensor<1x4x?x?xf32>) {
  ^bb0(%a: f32, %o: f32):
    %e = math.exp %a : f32
    linalg.yield %e : f32
  } -> tensor<1x4x?x?xf32>
  %rs = linalg.generic {indexing_maps = [#l, #l], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%r : tensor<1x?x1xf32>) outs(%r : tensor<1x?x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %e = math.rsqrt %a : f32
    linalg.yield %e : f32
  } -> tensor<1x?x1xf32>
  %scaled = linalg.generic {indexing_maps = [#l, #lrow, #l], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x, %rs : tensor<1x?x64xf32>, tensor<1x?x1xf32>) outs(%x : tensor<1x?x64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %e = arith.mulf %a, %b : f32
    linalg.yield %e : f32
  } -> tensor<1x?x64xf32>
  return %exp, %lexp, %sexp, %shared, %scaled : tensor<1x4x?x?xf32>, tensor<1x?x64xf32>, tensor<1x4x?x?xf32>, tensor<1x4x?x?xf32>, tensor<1x?x64xf32>
}
