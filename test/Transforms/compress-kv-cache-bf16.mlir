// A model exported in bf16 (`snapkv export --hf --dtype bf16`): weights, activations and K/V
// caches are bf16, and SDPA is kept as one snapkv.sdpa on them (computing in f32 itself).
// Input: Inputs/models/llama_layers_bf16.mlir (scripts/gen-hf-export-fixture.py).
// An export that decomposed SDPA (Inputs/models/llama_layers_bf16_decomposed.mlir, kept
// from before) widens the queries, keys and values to f32 (extf) after the GQA repeat,
// builds the mask in bf16 and widens it inside the mask add, and rounds the f32 P . V
// product back to bf16. The matcher reads through those widenings, so the select and the
// fused attention take the bf16 tensors themselves (both compute in f32).

// The rewrite: the select on the bf16 post-RoPE queries and the bf16 cache tensors, the
// caches of the layer functions and entry points bf16 (Hq heads with gqa=expand).
// RUN: snapkv-opt %S/Inputs/models/llama_layers_bf16.mlir --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   | FileCheck %s --check-prefix=EXPAND
// EXPAND-LABEL: func.func private @prefill_layer(
// EXPAND-SAME:    -> (tensor<1x?x32xbf16>, tensor<1x4x?x128xbf16>, tensor<1x4x?x128xbf16>)
// EXPAND:         snapkv.select {{.*}} window 4 capacity 8 scale 0.0883883461 : (tensor<1x4x4x128xbf16>, tensor<1x2x?x128xbf16>, tensor<1x2x?x128xbf16>) -> (tensor<1x4x?x128xbf16>, tensor<1x4x?x128xbf16>, tensor<1x4x?xi64>)
// EXPAND-LABEL: func.func private @decode_layer(
// EXPAND-SAME:    %{{.*}}: tensor<1x1x32xbf16>, %{{.*}}: tensor<1xi64>, %{{.*}}: tensor<1x4x?x128xbf16>, %{{.*}}: tensor<1x4x?x128xbf16>,
// EXPAND-SAME:    -> (tensor<1x1x32xbf16>, tensor<1x4x?x128xbf16>, tensor<1x4x?x128xbf16>)
// EXPAND-LABEL: func.func private @head(
// EXPAND-SAME:    -> tensor<1x1x64xf32>
// EXPAND-LABEL: func.func @prefill(
// EXPAND-SAME:    -> (tensor<1x1x64xf32>, tensor<1x4x?x128xbf16>, tensor<1x4x?x128xbf16>, tensor<1x4x?x128xbf16>, tensor<1x4x?x128xbf16>)

// The ledger counts 2 bytes an element: half the f32 export's figures
// (compress-kv-cache-layers.mlir: full 81,920 B, compacted 98,304 B).
// RUN: snapkv-opt %S/Inputs/models/llama_layers_bf16.mlir --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand prefill-func=prefill_layer decode-func=decode_layer" \
// RUN:   --snapkv-report-cache="prompt-length=16 generated=4" -o /dev/null | FileCheck %s --check-prefix=LEDGER
// LEDGER:      0      expand     1    2    4   128  2        8                 20,480                 24,576
// LEDGER-NEXT: 1      expand     1    2    4   128  2        8                 20,480                 24,576
// LEDGER-NEXT: total: 2 layers, full 40,960 B, compacted 49,152 B

// gqa=mean: Hkv heads, bf16.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_bf16.mlir --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=mean prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   | FileCheck %s --check-prefix=MEAN
// MEAN:       snapkv.select {{.*}} gqa mean {{.*}} : (tensor<1x4x4x128xbf16>, tensor<1x2x?x128xbf16>, tensor<1x2x?x128xbf16>) -> (tensor<1x2x?x128xbf16>, tensor<1x2x?x128xbf16>, tensor<1x2x?xi64>)

// The fusion of the kept SDPA: one snapkv.attention per layer function on the bf16 tensors.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_bf16.mlir --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=KEPT
// KEPT-LABEL: func.func private @prefill_layer(
// KEPT-NOT:     snapkv.sdpa
// KEPT:         snapkv.attention {{.*}} : tensor<1x4x?x128xbf16>, tensor<1x2x?x128xbf16>, tensor<1x2x?x128xbf16> -> tensor<1x4x?x128xbf16>
// KEPT-LABEL: func.func private @decode_layer(
// KEPT-NOT:     snapkv.sdpa
// KEPT:         snapkv.attention {{.*}} : tensor<1x4x1x128xbf16>, tensor<1x2x?x128xbf16>, tensor<1x2x?x128xbf16> -> tensor<1x4x1x128xbf16>

// The fusion of the decomposed SDPA: one snapkv.attention per layer function on the bf16
// tensors, its bf16 result widened back for the importer's rounding of the f32 product
// (exact); no batch_matmul of the attention is left.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_bf16_decomposed.mlir --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=FUSED
// FUSED-LABEL: func.func private @prefill_layer(
// FUSED-NOT:     linalg.batch_matmul
// FUSED:         %[[A:.*]] = snapkv.attention {{.*}} : tensor<1x4x?x128xbf16>, tensor<1x2x?x128xbf16>, tensor<1x2x?x128xbf16> -> tensor<1x4x?x128xbf16>
// FUSED:         %[[C:.*]] = tensor.collapse_shape %[[A]]
// FUSED:         %[[W:.*]] = linalg.generic {{.*}} ins(%[[C]] : tensor<4x?x128xbf16>) outs(%{{.*}} : tensor<4x?x128xf32>)
// FUSED-NEXT:    ^bb0(%[[IN:.*]]: bf16, %{{.*}}: f32):
// FUSED-NEXT:      %[[E:.*]] = arith.extf %[[IN]] : bf16 to f32
// FUSED-NEXT:      linalg.yield %[[E]] : f32
// FUSED:         tensor.expand_shape %[[W]]
// FUSED:         arith.truncf %{{.*}} : f32 to bf16
// FUSED-LABEL: func.func private @decode_layer(
// FUSED-NOT:     linalg.batch_matmul
// FUSED:         snapkv.attention {{.*}} : tensor<1x4x1x128xbf16>, tensor<1x2x?x128xbf16>, tensor<1x2x?x128xbf16> -> tensor<1x4x1x128xbf16>

// The f32 product read other than through its rounding to bf16 (here by an unknown op):
// snapkv.attention's bf16 result would lose what that reader sees, so @prefill_layer's
// attention stays as imported (decode's is still fused).
// RUN: sed 's/^    %138 = tensor.empty(%103) : tensor<1x4x?x128xbf16>$/    "test.use"(%expanded_43) : (tensor<1x4x?x128xf32>) -> ()\n&/' \
// RUN:   %S/Inputs/models/llama_layers_bf16_decomposed.mlir > %t.unrounded.mlir
// RUN: snapkv-opt --allow-unregistered-dialect %t.unrounded.mlir --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=UNROUNDED
// UNROUNDED-LABEL: func.func private @prefill_layer(
// UNROUNDED:         "test.use"(%{{.*}}) : (tensor<1x4x?x128xf32>) -> ()
// UNROUNDED-NOT:     snapkv.attention
// UNROUNDED-LABEL: func.func private @decode_layer(
// UNROUNDED:         snapkv.attention
