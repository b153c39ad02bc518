// RUN: snapkv-opt %s --snapkv-cpu-pipeline | FileCheck %s

// The whole module reaches the LLVM dialect, and the hot loops are 16-lane
// vector code: FMAs for the logits and the exp polynomial, 8 rows at a time
// of vector max / add for the softmax statistics, no per-lane expf calls.
// CHECK-LABEL: llvm.func @select
// CHECK-NOT: snapkv.
// CHECK-NOT: linalg.
// CHECK-NOT: llvm.call @expf
// CHECK-NOT: llvm.intr.exp
// CHECK-DAG: llvm.intr.fma(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<16xf32>, vector<16xf32>, vector<16xf32>) -> vector<16xf32>
// CHECK-DAG: llvm.intr.maximum(%{{.*}}, %{{.*}}) : (vector<8xf32>, vector<8xf32>) -> vector<8xf32>
// CHECK-DAG: llvm.fadd %{{.*}}, %{{.*}} : vector<8xf32>
func.func @select(%q: tensor<1x8x32x128xf32>, %k: tensor<1x2x256x128xf32>, %v: tensor<1x2x256x128xf32>)
    -> (tensor<1x8x64x128xf32>, tensor<1x8x64x128xf32>, tensor<1x8x64xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 32 capacity 64
      : (tensor<1x8x32x128xf32>, tensor<1x2x256x128xf32>, tensor<1x2x256x128xf32>)
      -> (tensor<1x8x64x128xf32>, tensor<1x8x64x128xf32>, tensor<1x8x64xi64>)
  return %a, %b, %c : tensor<1x8x64x128xf32>, tensor<1x8x64x128xf32>, tensor<1x8x64xi64>
}
