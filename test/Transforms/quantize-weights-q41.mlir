// snapkv-quantize-weights format=q4_1: a weight becomes its nibble bytes
// (K/2 x N i8) with f32 scales and mins per block of 32, through the calls;
// weight-formats keeps a named weight in Q8_0 (SmolLM2's tied embedding).
// RUN: snapkv-opt %s --snapkv-quantize-weights="format=q4_1 weight-formats=model.embed.weight:q8_0" | FileCheck %s
// RUN: snapkv-opt %s --snapkv-quantize-weights="format=q4_1 weight-formats=model.embed.weight:q8_0" \
// RUN:   --snapkv-describe-module -o /dev/null | FileCheck %s --check-prefix=JSON
// RUN: snapkv-opt %s --snapkv-quantize-weights="format=q4_1 weight-formats=model.embed.weight:q8_0" \
// RUN:   --snapkv-cpu-pipeline -o /dev/null
// RUN: not snapkv-opt %s --snapkv-quantize-weights="weight-formats=model.embed.weight" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=ENTRY
// RUN: snapkv-opt %s --snapkv-quantize-weights="format=q4_1 activations=i8" | FileCheck %s --check-prefix=I8
// RUN: snapkv-opt %s --snapkv-quantize-weights="format=q4_1 activations=i8" \
// RUN:   --snapkv-cpu-pipeline="cpu-features=-avx512vnni" -o /dev/null

// ENTRY: weight-formats takes NAME:FORMAT entries with FORMAT q8_0 or q4_1, got 'model.embed.weight'
// With int8 activations: x quantized per block of 32 (as for Q8_0), then
// `out + (sitofp(a) * scale_a) * (q * d + m)` over (m, k / 32, h, j, n).
// I8-DAG:  #[[IA:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
// I8-DAG:  #[[IB:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d4)>
// I8-DAG:  #[[IS:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1)>
// I8-DAG:  #[[ID:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d1, d4)>
// I8-LABEL: func.func private @decode_layer(
// I8:          math.round
// I8:        } -> tensor<1x2x32xi8>
// I8:        %[[AH:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1], [2, 3]] output_shape [1, 2, 2, 16] : tensor<1x2x32xi8>
// I8:        linalg.generic {indexing_maps = [#[[IA]], #[[IB]], #[[IS]], #[[ID]], #[[ID]], #{{.*}}]
// I8-SAME:     ins(%[[AH]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x2x2x16xi8>, tensor<2x16x16xi8>, tensor<1x2xf32>, tensor<2x16xf32>, tensor<2x16xf32>)
// I8:        ^bb0(%[[QA:.*]]: i8, %[[BYTE:.*]]: i8, %[[SA:.*]]: f32, %[[SD:.*]]: f32, %[[SM:.*]]: f32, %[[ACC:.*]]: f32):
// I8:          %[[WA:.*]] = arith.sitofp %[[QA]] : i8 to f32
// I8:          %[[DA:.*]] = arith.mulf %[[WA]], %[[SA]] : f32
// I8:          arith.shrui %[[BYTE]]
// I8:          %[[W:.*]] = arith.addf %{{.*}}, %[[SM]] : f32
// I8:          %[[P:.*]] = arith.mulf %[[DA]], %[[W]] : f32
// I8:          arith.addf %[[ACC]], %[[P]] : f32

// CHECK-DAG:  #[[X:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
// CHECK-DAG:  #[[B:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d4)>
// CHECK-DAG:  #[[S:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d1, d4)>
// CHECK-DAG:  #[[O:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d4)>
// CHECK-LABEL: func.func @decode(
// CHECK-SAME:   %[[XA:.*]]: tensor<1x64xf32>,
// CHECK-SAME:   %[[Q:.*]]: tensor<32x16xi8> {bufferization.writable = false, snapkv.quantized = "q4_1", snapkv.transposed, snapkv.weight = "model.layers.0.q_proj.weight"},
// CHECK-SAME:   %[[D:.*]]: tensor<2x16xf32> {bufferization.writable = false, snapkv.quantized = "q4_1_scales", snapkv.transposed, snapkv.weight = "model.layers.0.q_proj.weight"},
// CHECK-SAME:   %[[M:.*]]: tensor<2x16xf32> {bufferization.writable = false, snapkv.quantized = "q4_1_mins", snapkv.transposed, snapkv.weight = "model.layers.0.q_proj.weight"},
// CHECK-SAME:   %[[E:.*]]: tensor<64x16xi8> {snapkv.quantized = "q8_0", snapkv.transposed, snapkv.weight = "model.embed.weight"},
// CHECK-SAME:   %{{.*}}: tensor<2x16xf32> {snapkv.quantized = "q8_0_scales", snapkv.transposed, snapkv.weight = "model.embed.weight"})
// CHECK:        call @decode_layer(%[[XA]], %[[Q]], %[[D]], %[[M]])

// One row: nibble h of byte (k / 32, j, n), `q * d + m`, multiply-added.
// CHECK-LABEL: func.func private @decode_layer(
// CHECK-SAME:   %[[LX:.*]]: tensor<1x64xf32>, %[[LQ:.*]]: tensor<32x16xi8>, %[[LD:.*]]: tensor<2x16xf32>, %[[LM:.*]]: tensor<2x16xf32>)
// CHECK-DAG:    %[[XB:.*]] = tensor.expand_shape %[[LX]] {{\[}}[0], [1, 2, 3]] output_shape [1, 2, 2, 16]
// CHECK-DAG:    %[[QB:.*]] = tensor.expand_shape %[[LQ]] {{\[}}[0, 1], [2]] output_shape [2, 16, 16]
// CHECK:        linalg.generic {indexing_maps = [#[[X]], #[[B]], #[[S]], #[[S]], #[[O]]], iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]}
// CHECK-SAME:     ins(%[[XB]], %[[QB]], %[[LD]], %[[LM]] : tensor<1x2x2x16xf32>, tensor<2x16x16xi8>, tensor<2x16xf32>, tensor<2x16xf32>)
// CHECK:        ^bb0(%[[A:.*]]: f32, %[[BYTE:.*]]: i8, %[[SD:.*]]: f32, %[[SM:.*]]: f32, %[[ACC:.*]]: f32):
// CHECK:          %[[H:.*]] = linalg.index 2 : index
// CHECK:          %[[H8:.*]] = arith.index_cast %[[H]] : index to i8
// CHECK:          %[[SHIFT:.*]] = arith.muli %[[H8]], %{{.*}} : i8
// CHECK:          %[[SH:.*]] = arith.shrui %[[BYTE]], %[[SHIFT]] : i8
// CHECK:          %[[NIB:.*]] = arith.andi %[[SH]], %{{.*}} : i8
// CHECK:          %[[QF:.*]] = arith.uitofp %[[NIB]] : i8 to f32
// CHECK:          %[[QD:.*]] = arith.mulf %[[QF]], %[[SD]] : f32
// CHECK:          %[[W:.*]] = arith.addf %[[QD]], %[[SM]] : f32
// CHECK:          %[[P:.*]] = arith.mulf %[[A]], %[[W]] : f32
// CHECK:          arith.addf %[[ACC]], %[[P]] : f32

// Rows of a prompt: the weight dequantized once ([K/32, 2, 16, N]), then the
// matmul.
// CHECK-LABEL: func.func private @prefill_layer(
// CHECK:        linalg.generic
// CHECK-SAME:     outs(%{{.*}} : tensor<2x2x16x16xf32>)
// CHECK:          linalg.index 1 : index
// CHECK:          arith.uitofp
// CHECK:        %[[DW:.*]] = tensor.collapse_shape %{{.*}} {{\[}}[0, 1, 2], [3]] : tensor<2x2x16x16xf32> into tensor<64x16xf32>
// CHECK:        linalg.matmul ins(%{{.*}}, %[[DW]] : tensor<?x64xf32>, tensor<64x16xf32>)

// JSON:      "quantized": "q4_1",
// JSON:      "element": "i8"
// JSON:      "quantized": "q4_1_scales",
// JSON:      "quantized": "q4_1_mins",
// JSON:      "quantized": "q8_0",

func.func @decode(%x: tensor<1x64xf32>,
                  %w: tensor<64x16xf32> {bufferization.writable = false, snapkv.weight = "model.layers.0.q_proj.weight", snapkv.transposed},
                  %e: tensor<64x16xf32> {snapkv.weight = "model.embed.weight", snapkv.transposed})
    -> (tensor<1x16xf32>, tensor<1x16xf32>) {
  %y = call @decode_layer(%x, %w) : (tensor<1x64xf32>, tensor<64x16xf32>) -> tensor<1x16xf32>
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x16xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<1x16xf32>) -> tensor<1x16xf32>
  %z = linalg.matmul ins(%x, %e : tensor<1x64xf32>, tensor<64x16xf32>) outs(%c : tensor<1x16xf32>) -> tensor<1x16xf32>
  return %y, %z : tensor<1x16xf32>, tensor<1x16xf32>
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
