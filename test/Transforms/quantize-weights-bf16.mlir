// snapkv-quantize-weights on a `--dtype bf16` module (bf16 weights and
// activations, f32 products): the weights become int8 values and f32 scales
// as in f32; a one-row product widens the bf16 activation to f32 inside the
// contraction, and a prompt's product dequantizes the weight to bf16 (the
// product of value and scale rounded) for the bf16 matmul.
// RUN: snapkv-opt %s --snapkv-quantize-weights | FileCheck %s
// RUN: snapkv-opt %s --snapkv-quantize-weights --snapkv-cpu-pipeline -o /dev/null

// CHECK-LABEL: func.func @decode(
// CHECK-SAME:   %{{.*}}: tensor<1x64xbf16>,
// CHECK-SAME:   %{{.*}}: tensor<64x32xi8> {snapkv.quantized = "q8_0", snapkv.transposed, snapkv.weight = "w"},
// CHECK-SAME:   %{{.*}}: tensor<2x32xf32> {snapkv.quantized = "q8_0_scales", snapkv.transposed, snapkv.weight = "w"})
// CHECK:        linalg.generic
// CHECK-SAME:     ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<1x2x32xbf16>, tensor<2x32x32xi8>, tensor<2x32xf32>) outs(%{{.*}} : tensor<1x32xf32>)
// CHECK:        ^bb0(%[[A:.*]]: bf16, %[[B:.*]]: i8, %[[C:.*]]: f32, %[[ACC:.*]]: f32):
// CHECK-NEXT:     %[[AW:.*]] = arith.extf %[[A]] : bf16 to f32
// CHECK-NEXT:     %[[W:.*]] = arith.sitofp %[[B]] : i8 to f32
// CHECK-NEXT:     %[[WS:.*]] = arith.mulf %[[W]], %[[C]] : f32
// CHECK-NEXT:     %[[P:.*]] = arith.mulf %[[AW]], %[[WS]] : f32
// CHECK-NEXT:     %[[R:.*]] = arith.addf %[[ACC]], %[[P]] : f32
// CHECK-NEXT:     linalg.yield %[[R]] : f32
// CHECK-NOT:    linalg.matmul

// CHECK-LABEL: func.func @prefill(
// CHECK-SAME:   %[[X:.*]]: tensor<?x64xbf16>,
// CHECK-SAME:   tensor<64x32xi8>
// CHECK-SAME:   tensor<2x32xf32>
// CHECK:        %[[D:.*]] = linalg.generic
// CHECK-SAME:     outs(%{{.*}} : tensor<2x32x32xbf16>)
// CHECK:          arith.sitofp
// CHECK-NEXT:     arith.mulf
// CHECK-NEXT:     arith.truncf %{{.*}} : f32 to bf16
// CHECK:        %[[DW:.*]] = tensor.collapse_shape %[[D]] {{\[}}[0, 1], [2]] : tensor<2x32x32xbf16> into tensor<64x32xbf16>
// CHECK:        linalg.matmul ins(%[[X]], %[[DW]] : tensor<?x64xbf16>, tensor<64x32xbf16>) outs(%{{.*}} : tensor<?x32xf32>)

func.func @decode(%x: tensor<1x64xbf16>,
                  %w: tensor<64x32xbf16> {snapkv.weight = "w", snapkv.transposed}) -> tensor<1x32xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x32xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<1x32xf32>) -> tensor<1x32xf32>
  %y = linalg.matmul ins(%x, %w : tensor<1x64xbf16>, tensor<64x32xbf16>) outs(%c : tensor<1x32xf32>) -> tensor<1x32xf32>
  return %y : tensor<1x32xf32>
}

func.func @prefill(%x: tensor<?x64xbf16>,
                   %w: tensor<64x32xbf16> {snapkv.weight = "w", snapkv.transposed}) -> tensor<?x32xf32> {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x64xbf16>
  %init = tensor.empty(%m) : tensor<?x32xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<?x32xf32>) -> tensor<?x32xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x64xbf16>, tensor<64x32xbf16>) outs(%c : tensor<?x32xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
