// snapkv-quantize-weights: the entry points' transposed matmul weights become
// int8 values and f32 block scales, through the calls to the layer functions.
// RUN: snapkv-opt %s --snapkv-quantize-weights | FileCheck %s
// RUN: snapkv-opt %s --snapkv-quantize-weights --snapkv-describe-module -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=JSON
// int8 activations: the values packed by 4 rows ([K / 4, N, 4]); a prompt's
// rows are quantized too (one int8 x int8 contraction, no matmul).
// RUN: snapkv-opt %s --snapkv-quantize-weights=activations=i8 \
// RUN:   | FileCheck %s --check-prefix=PACKED
// RUN: snapkv-opt %s --snapkv-quantize-weights=activations=i8 --snapkv-describe-module \
// RUN:   -o /dev/null | FileCheck %s --check-prefix=PACKEDJSON
// RUN: not snapkv-opt %s --snapkv-quantize-weights=format=q4_0 2>&1 \
// RUN:   | FileCheck %s --check-prefix=FORMAT

// FORMAT: snapkv-quantize-weights: format must be q8_0 or q4_1, got 'q4_0'

// The maps of the vector x Q8_0 matrix product (@decode_layer, below).
// CHECK-DAG:  #[[XMAP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-DAG:  #[[QMAP:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d2, d3)>
// CHECK-DAG:  #[[SMAP:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d3)>
// CHECK-DAG:  #[[OMAP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3)>
// CHECK-LABEL: func.func @decode(
// CHECK-SAME:   %[[X:.*]]: tensor<1x64xf32>, %{{.*}}: tensor<1x48xf32>,
// CHECK-SAME:   %[[Q:.*]]: tensor<64x16xi8> {bufferization.writable = false, snapkv.quantized = "q8_0", snapkv.transposed, snapkv.weight = "model.layers.0.q_proj.weight"},
// CHECK-SAME:   %[[S:.*]]: tensor<2x16xf32> {bufferization.writable = false, snapkv.quantized = "q8_0_scales", snapkv.transposed, snapkv.weight = "model.layers.0.q_proj.weight"},
// The norm weight (not a matmul's) and a weight also used otherwise stay.
// CHECK-SAME:   %{{.*}}: tensor<64xf32> {snapkv.weight = "model.norm.weight"},
// CHECK-SAME:   %[[E:.*]]: tensor<64x16xf32> {snapkv.transposed, snapkv.weight = "model.embed.weight"},
// A K that is not a whole number of blocks stays.
// CHECK-SAME:   %{{.*}}: tensor<48x16xf32> {snapkv.transposed, snapkv.weight = "model.odd.weight"},
// A weight the checkpoint holds as is (not transposed) stays.
// CHECK-SAME:   %{{.*}}: tensor<64x16xf32> {snapkv.weight = "model.plain.weight"})
// CHECK:        call @decode_layer(%[[X]], %[[Q]], %[[S]]) : (tensor<1x64xf32>, tensor<64x16xi8>, tensor<2x16xf32>) -> tensor<1x16xf32>
// CHECK:        linalg.matmul ins(%[[X]], %[[E]] : tensor<1x64xf32>, tensor<64x16xf32>)

// One row: one contraction over (m, k / 32, k % 32, n) that widens the int8
// value and applies its block's scale.
// CHECK-LABEL: func.func private @decode_layer(
// CHECK-SAME:   %[[LX:.*]]: tensor<1x64xf32>, %[[LQ:.*]]: tensor<64x16xi8>, %[[LS:.*]]: tensor<2x16xf32>) -> tensor<1x16xf32>
// CHECK:        %[[XB:.*]] = tensor.expand_shape %[[LX]] {{\[}}[0], [1, 2]] output_shape [1, 2, 32] : tensor<1x64xf32> into tensor<1x2x32xf32>
// CHECK:        %[[QB:.*]] = tensor.expand_shape %[[LQ]] {{\[}}[0, 1], [2]] output_shape [2, 32, 16] : tensor<64x16xi8> into tensor<2x32x16xi8>
// CHECK:        linalg.generic {indexing_maps = [#[[XMAP]], #[[QMAP]], #[[SMAP]], #[[OMAP]]], iterator_types = ["parallel", "reduction", "reduction", "parallel"]}
// CHECK-SAME:     ins(%[[XB]], %[[QB]], %[[LS]] : tensor<1x2x32xf32>, tensor<2x32x16xi8>, tensor<2x16xf32>)
// CHECK:        ^bb0(%[[A:.*]]: f32, %[[B:.*]]: i8, %[[C:.*]]: f32, %[[ACC:.*]]: f32):
// CHECK-NEXT:     %[[W:.*]] = arith.sitofp %[[B]] : i8 to f32
// CHECK-NEXT:     %[[WS:.*]] = arith.mulf %[[W]], %[[C]] : f32
// CHECK-NEXT:     %[[P:.*]] = arith.mulf %[[A]], %[[WS]] : f32
// CHECK-NEXT:     %[[R:.*]] = arith.addf %[[ACC]], %[[P]] : f32
// CHECK-NEXT:     linalg.yield %[[R]] : f32
// CHECK-NOT:    linalg.matmul

// Rows of a prompt: the weight dequantized once, then the f32 matmul.
// CHECK-LABEL: func.func @prefill(
// CHECK-SAME:   tensor<64x16xi8>
// CHECK-SAME:   tensor<2x16xf32>
// CHECK-LABEL: func.func private @prefill_layer(
// CHECK-SAME:   %[[PX:.*]]: tensor<?x64xf32>, %[[PQ:.*]]: tensor<64x16xi8>, %[[PS:.*]]: tensor<2x16xf32>)
// CHECK:        %[[PB:.*]] = tensor.expand_shape %[[PQ]]
// CHECK:        %[[D:.*]] = linalg.generic
// CHECK-SAME:     ins(%[[PB]], %[[PS]] : tensor<2x32x16xi8>, tensor<2x16xf32>) outs(%{{.*}} : tensor<2x32x16xf32>)
// CHECK:          arith.sitofp
// CHECK-NEXT:     arith.mulf
// CHECK:        %[[DW:.*]] = tensor.collapse_shape %[[D]] {{\[}}[0, 1], [2]] : tensor<2x32x16xf32> into tensor<64x16xf32>
// CHECK:        linalg.matmul ins(%[[PX]], %[[DW]] : tensor<?x64xf32>, tensor<64x16xf32>)

// PACKED-LABEL: func.func @decode(
// PACKED-SAME:   tensor<16x16x4xi8> {bufferization.writable = false, snapkv.quantized = "q8_0_packed", snapkv.transposed, snapkv.weight = "model.layers.0.q_proj.weight"},
// PACKED-SAME:   tensor<2x16xf32> {bufferization.writable = false, snapkv.quantized = "q8_0_scales", snapkv.transposed, snapkv.weight = "model.layers.0.q_proj.weight"},
// PACKED-LABEL: func.func private @prefill_layer(
// PACKED-SAME:   %[[PX:.*]]: tensor<?x64xf32>, %[[PQ:.*]]: tensor<16x16x4xi8>, %[[PS:.*]]: tensor<2x16xf32>)
// PACKED:        %[[PA:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1], [2, 3]] output_shape [%{{.*}}, 2, 8, 4] : tensor<?x2x32xi8> into tensor<?x2x8x4xi8>
// PACKED:        %[[PB:.*]] = tensor.expand_shape %[[PQ]] {{\[}}[0, 1], [2], [3]] output_shape [2, 8, 16, 4]
// PACKED:        linalg.generic {{.*}}iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]}
// PACKED-SAME:     ins(%[[PA]], %[[PB]], %{{.*}}, %[[PS]] : tensor<?x2x8x4xi8>, tensor<2x8x16x4xi8>, tensor<?x2xf32>, tensor<2x16xf32>)
// PACKED-NOT:    linalg.matmul

// PACKEDJSON:      "name": "decode"
// PACKEDJSON:      "quantized": "q8_0_packed",
// PACKEDJSON-NEXT: "transposed": true,
// PACKEDJSON:      "element": "i8"
// PACKEDJSON-NEXT: "shape": [
// PACKEDJSON-NEXT:   16,
// PACKEDJSON-NEXT:   16,
// PACKEDJSON-NEXT:   4
// PACKEDJSON-NEXT: ],

// JSON:      "name": "decode"
// JSON:      "quantized": "q8_0",
// JSON-NEXT: "transposed": true,
// JSON:      "element": "i8"
// JSON:      "weight": "model.layers.0.q_proj.weight"
// JSON:      "quantized": "q8_0_scales",
// JSON-NEXT: "transposed": true,
// JSON:      "text": "tensor<2x16xf32>"
// JSON:      "weight": "model.layers.0.q_proj.weight"

func.func @decode(%x: tensor<1x64xf32>, %x2: tensor<1x48xf32>,
                  %w: tensor<64x16xf32> {bufferization.writable = false, snapkv.weight = "model.layers.0.q_proj.weight", snapkv.transposed},
                  %n: tensor<64xf32> {snapkv.weight = "model.norm.weight"},
                  %e: tensor<64x16xf32> {snapkv.weight = "model.embed.weight", snapkv.transposed},
                  %o: tensor<48x16xf32> {snapkv.weight = "model.odd.weight", snapkv.transposed},
                  %p: tensor<64x16xf32> {snapkv.weight = "model.plain.weight"})
    -> (tensor<1x16xf32>, tensor<1x16xf32>, tensor<64x16xf32>, tensor<1x16xf32>, tensor<1x16xf32>, tensor<64xf32>) {
  %y = call @decode_layer(%x, %w) : (tensor<1x64xf32>, tensor<64x16xf32>) -> tensor<1x16xf32>
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x16xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<1x16xf32>) -> tensor<1x16xf32>
  %z = linalg.matmul ins(%x, %e : tensor<1x64xf32>, tensor<64x16xf32>) outs(%c : tensor<1x16xf32>) -> tensor<1x16xf32>
  %zo = linalg.matmul ins(%x2, %o : tensor<1x48xf32>, tensor<48x16xf32>) outs(%c : tensor<1x16xf32>) -> tensor<1x16xf32>
  %zp = linalg.matmul ins(%x, %p : tensor<1x64xf32>, tensor<64x16xf32>) outs(%c : tensor<1x16xf32>) -> tensor<1x16xf32>
  return %y, %z, %e, %zo, %zp, %n : tensor<1x16xf32>, tensor<1x16xf32>, tensor<64x16xf32>, tensor<1x16xf32>, tensor<1x16xf32>, tensor<64xf32>
}

func.func private @decode_layer(%x: tensor<1x64xf32>, %w: tensor<64x16xf32>) -> tensor<1x16xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x16xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<1x16xf32>) -> tensor<1x16xf32>
  %y = linalg.matmul ins(%x, %w : tensor<1x64xf32>, tensor<64x16xf32>) outs(%c : tensor<1x16xf32>) -> tensor<1x16xf32>
  return %y : tensor<1x16xf32>
}

func.func @prefill(%x: tensor<?x64xf32>,
                   %w: tensor<64x16xf32> {snapkv.weight = "model.layers.0.q_proj.weight", snapkv.transposed})
    -> tensor<?x16xf32> {
  %y = call @prefill_layer(%x, %w) : (tensor<?x64xf32>, tensor<64x16xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

func.func private @prefill_layer(%x: tensor<?x64xf32>, %w: tensor<64x16xf32>) -> tensor<?x16xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %m = tensor.dim %x, %c0 : tensor<?x64xf32>
  %init = tensor.empty(%m) : tensor<?x16xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<?x16xf32>) -> tensor<?x16xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x16xf32>) outs(%c : tensor<?x16xf32>) -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}
