// Accumulated scores (scoring sum / norm_sum) lower for the CPU: one (batch, query head) at a
// time, its Q x L logits the scratch (the differential test checks the numbers); tiling=gpu
// is an error naming the op.
// RUN: snapkv-opt %s --convert-snapkv-to-linalg="tiling=cpu" | FileCheck %s
// RUN: snapkv-opt %s --convert-snapkv-to-linalg="tiling=gpu" -verify-diagnostics -o /dev/null
// CHECK-LABEL: func.func @accumulated
// CHECK:         scf.for
// CHECK:           linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<1x1x?x4xf32>, tensor<1x1x16x4xf32>) outs(%{{.*}} : tensor<?x16xf32>)
// CHECK:           math.exp
// CHECK:           arith.divf
// CHECK:           arith.uitofp
func.func @accumulated(%q: tensor<1x2x?x4xf32>, %k: tensor<1x2x16x4xf32>) -> tensor<1x2x6xi64> {
  // expected-error @+1 {{'snapkv.select' op has no GPU lowering (tiling=gpu); scoring sum, norm_sum and keydiff are lowered for the CPU only}}
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 6 scoring norm_sum : (tensor<1x2x?x4xf32>, tensor<1x2x16x4xf32>, tensor<1x2x16x4xf32>) -> (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6xi64>)
  return %idx : tensor<1x2x6xi64>
}
