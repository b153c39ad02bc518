// RUN: snapkv-opt %s --pass-pipeline="builtin.module(convert-snapkv-to-linalg,canonicalize,cse,one-shot-bufferize{bufferize-function-boundaries},func.func(snapkv-vectorize-linalg,canonicalize,snapkv-optimize-math))" | FileCheck %s

// The hot loops of the lowered select are vector code: logits as broadcast
// FMAs into a [4 x 16] register tile, the causal row max and row sum and the
// votes as 16-lane vectors (exp by polynomial, no libm call), the top-k
// threshold counts as i32 vectors. The logits accumulator stays in
// registers across the D loop. The dynamic prompt length is handled by
// peeling: the scalar remainder (a linalg.generic on dynamic slices) is what
// is left in linalg.
// CHECK-LABEL: func.func @select
// CHECK: scf.for {{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (vector<1x1x1x4x1x16xf32>)
// CHECK: math.fma %{{.*}}, %{{.*}}, %[[ACC]] : vector<1x1x1x4x1x16xf32>
// CHECK: vector.multi_reduction <maximumf>, %{{.*}}, %{{.*}} [4] : vector<1x1x1x8x16xf32> to vector<1x1x1x8xf32>
// CHECK: math.fma {{.*}} : vector<1x1x1x8x16xf32>
// CHECK: vector.multi_reduction <add>, %{{.*}}, %{{.*}} [4] : vector<1x1x1x8x16xf32> to vector<1x1x1x8xf32>
// CHECK: arith.divf %{{.*}}, %{{.*}} : vector<1x1x1x1x16xf32>
// CHECK: arith.cmpi uge, %{{.*}}, %{{.*}} : vector<1x8x16xi32>
// CHECK: vector.multi_reduction <add>, %{{.*}}, %{{.*}} [2] : vector<1x8x16xi32> to vector<1x8xi32>
// CHECK-NOT: math.exp
func.func @select(%q: tensor<1x8x32x128xf32>, %k: tensor<1x2x?x128xf32>, %v: tensor<1x2x?x128xf32>)
    -> (tensor<1x8x?x128xf32>, tensor<1x8x?x128xf32>, tensor<1x8x?xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 32 capacity 64
      : (tensor<1x8x32x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>)
      -> (tensor<1x8x?x128xf32>, tensor<1x8x?x128xf32>, tensor<1x8x?xi64>)
  return %a, %b, %c : tensor<1x8x?x128xf32>, tensor<1x8x?x128xf32>, tensor<1x8x?xi64>
}
