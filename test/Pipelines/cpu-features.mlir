// The CPU pipeline hands its cpu-features to snapkv-configure-lowering, which
// chooses each root op's microkernel from them (the host's by default).
// RUN: snapkv-opt %s --snapkv-cpu-pipeline="cpu-features=avx512f,avx512bf16" --mlir-disable-threading --mlir-print-ir-after=snapkv-configure-lowering -o /dev/null 2>&1 | FileCheck %s --check-prefix=BF16
// RUN: snapkv-opt %s --snapkv-cpu-pipeline="cpu-features=avx512f" --mlir-disable-threading --mlir-print-ir-after=snapkv-configure-lowering -o /dev/null 2>&1 | FileCheck %s --check-prefix=PLAIN

// The select's function is outlined after its caller.
// BF16: linalg.matmul {snapkv.microkernel = #snapkv.microkernel<avx512bf16>}
// BF16: snapkv.score {{.*}}microkernel = avx512bf16>}
// PLAIN: linalg.matmul {snapkv.microkernel = #snapkv.microkernel<none>}
// PLAIN: snapkv.score {{.*}}keep_logits = true>}
func.func @main(%q: tensor<1x1x2x4xbf16>, %k: tensor<1x1x8x4xbf16>, %a: tensor<4x8xbf16>, %b: tensor<8x4xbf16>)
    -> (tensor<1x1x6xf32>, tensor<4x4xf32>) {
  %e = tensor.empty() : tensor<1x1x6xf32>
  %votes, %pooled = snapkv.score %q, %k window 2 outs(%e, %e : tensor<1x1x6xf32>, tensor<1x1x6xf32>)
      : (tensor<1x1x2x4xbf16>, tensor<1x1x8x4xbf16>) -> (tensor<1x1x6xf32>, tensor<1x1x6xf32>)
  %z = arith.constant 0.0 : f32
  %c0 = tensor.empty() : tensor<4x4xf32>
  %c = linalg.fill ins(%z : f32) outs(%c0 : tensor<4x4xf32>) -> tensor<4x4xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xbf16>, tensor<8x4xbf16>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %pooled, %m : tensor<1x1x6xf32>, tensor<4x4xf32>
}
