// RUN: snapkv-opt %s --snapkv-cpu-pipeline | FileCheck %s --implicit-check-not=powi

// RMSNorm-style x^2 (math.fpowi, as torch-mlir emits it) reaches LLVM: it is
// expanded before vectorisation would turn its exponent into a vector.
// No powi is left anywhere (llvm.intr.powi, math.fpowi, a __powisf2 call).
// CHECK-LABEL: llvm.func @square
// CHECK: llvm.fmul
func.func @square(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %e = tensor.empty() : tensor<4x64xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x64xf32>) outs(%e : tensor<4x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %c2 = arith.constant 2 : i64
    %p = math.fpowi %a, %c2 : f32, i64
    linalg.yield %p : f32
  } -> tensor<4x64xf32>
  return %r : tensor<4x64xf32>
}
