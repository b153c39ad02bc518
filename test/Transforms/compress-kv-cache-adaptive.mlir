// budget=adaptive (Ada-KV): prefill returns each layer's packed keys and
// values [B, T, D] and offsets [B, Hc + 1] (snapkv.select_adaptive); decode,
// its attention fused, takes caller-owned ragged buffers [B, R, D] plus rows
// [P, 2, B, Hc] (each layer's starts and lengths), writes each head's new row
// at start + length in place (run-time checks: nothing negative, room before
// the next head) and attends per head with snapkv.ragged_attention over one
// row more. A decode that cannot append in place leaves the module unchanged.
// RUN: snapkv-opt %S/Inputs/models/llama_sdpa_dynamic.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=4 budget=adaptive floor=1" \
// RUN:   | FileCheck %s
// RUN: snapkv-opt %S/Inputs/models/llama_sdpa_dynamic.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=4 budget=adaptive floor=1" \
// RUN:   | snapkv-opt --snapkv-cpu-pipeline | FileCheck %s --check-prefix=LOWERED
// RUN: snapkv-opt %S/Inputs/models/llama_sdpa_dynamic.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=4 budget=adaptive floor=1" \
// RUN:   | snapkv-opt --snapkv-describe-module -o /dev/null | FileCheck %s --check-prefix=DESCRIBE
// RUN: snapkv-opt %S/Inputs/models/llama_layers.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=4 budget=adaptive prefill-func=prefill_layer decode-func=decode_layer" \
// RUN:   | FileCheck %s --check-prefix=LAYERS
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=16 budget=adaptive" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=STATIC
// RUN: snapkv-opt %S/Inputs/models/llama_sdpa_dynamic.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=2000000000 budget=adaptive" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=LARGE
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=12 floor=2" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=FLOORUNIFORM
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=12 budget=adaptive floor=9" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=FLOORLARGE
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=12 budget=adaptive floor=-1" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=FLOORNEGATIVE
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=12 budget=adaptive scoring=recent" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=SCORING
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=12 budget=adaptive order=score" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=ORDER

// CHECK-LABEL: func.func @prefill(
// CHECK-SAME:    -> (tensor<1x?x64xf32>, tensor<1x?x128xf32>, tensor<1x?x128xf32>, tensor<1x3xi64>)
// CHECK:         %[[K:.*]], %[[V:.*]], %{{.*}}, %[[OFF:.*]] = snapkv.select_adaptive {{.*}} window 2 capacity 4 floor 1 kernel 15 gqa mean
// CHECK:         return %{{.*}}, %[[K]], %[[V]], %[[OFF]]
// CHECK-LABEL: func.func @decode(
// CHECK-SAME:    %[[KB:[^:]*]]: memref<1x?x128xf32>, %[[VB:[^:]*]]: memref<1x?x128xf32>, %[[ROWS:[^:]*]]: tensor<1x2x1x2xi64>) -> tensor<1x1x64xf32>
// CHECK-SAME:    snapkv.append_in_place = {buffers = [2, 3], dim = 1 : i64, layout = "ragged", rows = 4 : i64}
// CHECK-DAG:     %[[STARTS:.*]] = tensor.extract_slice %[[ROWS]][0, 0, 0, 0] [1, 1, 1, 2] [1, 1, 1, 1] : tensor<1x2x1x2xi64> to tensor<1x2xi64>
// CHECK-DAG:     %[[LENGTHS:.*]] = tensor.extract_slice %[[ROWS]][0, 1, 0, 0] [1, 1, 1, 2] [1, 1, 1, 1] : tensor<1x2x1x2xi64> to tensor<1x2xi64>
// CHECK-DAG:     %[[KT:.*]] = bufferization.to_tensor %[[KB]] restrict writable
// CHECK-DAG:     %[[VT:.*]] = bufferization.to_tensor %[[VB]] restrict writable
// CHECK:         %[[W:.*]]:2 = scf.for %[[B:.*]] = {{.*}} iter_args(%{{.*}} = %[[KT]], %{{.*}} = %[[VT]])
// CHECK:           scf.for %[[C:.*]] = {{.*}} to %c2
// CHECK:             cf.assert {{.*}}"append in place: a head's start or length is negative"
// CHECK:             cf.assert {{.*}}"append in place: a head has no room for the new row
// CHECK:             tensor.insert_slice {{.*}}[%[[B]], %[[AT:.*]], 0] [1, 1, 128]
// CHECK:             tensor.insert_slice {{.*}}[%[[B]], %[[AT]], 0] [1, 1, 128]
// CHECK:         %[[GROWN:.*]] = linalg.generic {{.*}} ins(%[[LENGTHS]] : tensor<1x2xi64>)
// CHECK:         snapkv.ragged_attention %{{.*}}, %[[W]]#0, %[[W]]#1 rows(%[[STARTS]], %[[GROWN]]) scale 0.0883883461 : tensor<1x4x1x128xf32>
// CHECK-NOT:     snapkv.attention
// CHECK:         bufferization.materialize_in_destination %[[W]]#0 in restrict writable %[[KB]]
// CHECK:         bufferization.materialize_in_destination %[[W]]#1 in restrict writable %[[VB]]
// CHECK:         return %{{.*}} : tensor<1x1x64xf32>

// What programs read (snapkv-describe-module): the select and the convention.
// DESCRIBE:      "name": "prefill",
// DESCRIBE:      "selects": [
// DESCRIBE:          "floor": 1,
// DESCRIBE:          "op": "snapkv.select_adaptive",
// DESCRIBE:        "snapkv.append_in_place": {
// DESCRIBE-NEXT:     "buffers": [
// DESCRIBE:          "dim": 1,
// DESCRIBE-NEXT:     "layout": "ragged",
// DESCRIBE-NEXT:     "rows": 4
// DESCRIBE:      "name": "decode",

// Fully lowered for the CPU: the appends write the caller's buffers.
// LOWERED-LABEL: llvm.func @decode(
// LOWERED-NOT:   snapkv.select_adaptive
// LOWERED-NOT:   snapkv.ragged_attention
// LOWERED:       llvm.return

// One function per layer: each layer gets its pair's [1, 2, B, Hc] slice of
// the entry point's rows, and prefill returns every layer's offsets.
// LAYERS-LABEL: func.func private @decode_layer(
// LAYERS-SAME:    memref<1x?x128xf32>, %{{.*}}: memref<1x?x128xf32>
// LAYERS-SAME:    tensor<1x2x1x2xi64>) -> tensor<1x1x32xf32>
// LAYERS-SAME:    layout = "ragged"
// LAYERS:         snapkv.ragged_attention
// LAYERS-LABEL: func.func @prefill(
// LAYERS:         %[[L0:.*]]:4 = call @prefill_layer
// LAYERS:         %[[L1:.*]]:4 = call @prefill_layer
// LAYERS:         return %{{.*}}, %[[L0]]#1, %[[L0]]#2, %[[L0]]#3, %[[L1]]#1, %[[L1]]#2, %[[L1]]#3 :
// LAYERS-LABEL: func.func @decode(
// LAYERS-SAME:    %[[ROWS:arg[0-9]+]]: tensor<2x2x1x2xi64>
// LAYERS-SAME:    snapkv.append_in_place = {buffers = [2, 3, 4, 5], dim = 1 : i64, layout = "ragged", rows = 6 : i64}
// LAYERS:         tensor.extract_slice %[[ROWS]][0, 0, 0, 0] [1, 2, 1, 2]
// LAYERS:         call @decode_layer
// LAYERS:         tensor.extract_slice %[[ROWS]][1, 0, 0, 0] [1, 2, 1, 2]
// LAYERS:         call @decode_layer

// STATIC: warning: snapkv-compress-kv-cache left the module unchanged: @decode: budget=adaptive needs a decode step that appends each head's row to a ragged cache in place, but @decode: argument 2 has a static length along dim 2
// STATIC: snapkv.refusal = {function = "decode", {{.*}}reason = "ragged-decode"}
// STATIC-NOT: select_adaptive

// A capacity the shared ranking cannot number is refused before anything
// changes (not a verifier error after the rewrite).
// LARGE: warning: snapkv-compress-kv-cache left the module unchanged: @prefill: layer 0: budget=adaptive ranks a layer's (head, position) pairs together with 32-bit indices, but heads x capacity = 2 x 2000000000 reaches 2^31 - 1
// LARGE: snapkv.refusal = {{{.*}}reason = "adaptive-too-large"
// LARGE-NOT: select_adaptive
// LARGE-NOT: error

// FLOORUNIFORM: floor is Ada-KV's per-head minimum: it needs budget=adaptive
// FLOORLARGE: floor must be between 0 and capacity - window (8), got 9
// FLOORNEGATIVE: floor must be between 0 and capacity - window (8), got -1
// SCORING: budget=adaptive ranks scores across heads: scoring must be votes or prefix_votes
// ORDER: budget=adaptive keeps each head's positions in ascending order (order=score is not available)
