// kv-dtype=i8: the compacted caches hold packed int8 rows (D values, then the four bytes of
// the row's f32 scale absmax/127). Prefill quantizes what the select keeps (the select votes
// with the unquantized K/V); decode quantizes the new row, appends it to the packed cache,
// returns the append and reads it back as q * s. Inputs: the bundled tiny model (Hq=4, Hkv=2,
// D=16) and the one-function-per-layer fixture (D=128).

// RUN: snapkv-opt %S/../Models/tiny_llama_dynamic.mlir --snapkv-compress-kv-cache="window=8 capacity=24 kv-dtype=i8" | FileCheck %s
// RUN: snapkv-opt %S/../Models/tiny_llama_dynamic.mlir --snapkv-compress-kv-cache="window=8 capacity=24 gqa=expand kv-dtype=i8" | FileCheck %s --check-prefix=EXPAND
// RUN: snapkv-opt %S/Inputs/models/llama_layers.mlir --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer kv-dtype=i8" | FileCheck %s --check-prefix=LAYERS
// RUN: snapkv-opt %S/Inputs/models/llama_layers_bf16.mlir --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer strict=true kv-dtype=i8" | FileCheck %s --check-prefix=BF16
// RUN: snapkv-opt %S/../Models/tiny_llama_dynamic.mlir --snapkv-compress-kv-cache="window=8 capacity=24 kv-dtype=i8" \
// RUN:   --snapkv-report-cache="prompt-length=48 generated=16 format=json" -o /dev/null | FileCheck %s --check-prefix=LEDGER
// RUN: snapkv-opt %S/../Models/tiny_llama_dynamic.mlir --snapkv-compress-kv-cache="window=8 capacity=24 kv-dtype=i8" \
// RUN:   --snapkv-report-cache="prompt-length=48 generated=16" -o /dev/null | FileCheck %s --check-prefix=TABLE
// RUN: not snapkv-opt %S/../Models/tiny_llama_dynamic.mlir --snapkv-compress-kv-cache="window=8 capacity=24 kv-dtype=i8 chunk=8" -o /dev/null 2>&1 | FileCheck %s --check-prefix=CHUNK
// RUN: not snapkv-opt %S/../Models/tiny_llama_dynamic.mlir --snapkv-compress-kv-cache="window=8 capacity=24 kv-dtype=i8 budget=adaptive" -o /dev/null 2>&1 | FileCheck %s --check-prefix=ADAPTIVE
// RUN: not snapkv-opt %S/../Models/tiny_llama_dynamic.mlir --snapkv-compress-kv-cache="window=8 capacity=24 kv-dtype=u8" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK: module attributes {snapkv.kv_cache = {dtype = "i8", scale = "f32"}}
// CHECK: func.func @prefill(%{{.*}}: tensor<1x?xi64>) -> (tensor<1x?x256xf32>, tensor<1x2x?x20xi8>, tensor<1x2x?x20xi8>, tensor<1x2x?x20xi8>, tensor<1x2x?x20xi8>)
// CHECK: %[[K:[a-z0-9_]+]], %[[V:[a-z0-9_]+]], %{{.*}} = snapkv.select
// CHECK: linalg.generic {{.*}} ins(%[[K]] : tensor<1x2x?x16xf32>)
// CHECK: math.absf
// CHECK: arith.maxnumf
// CHECK: arith.constant 1.270000e+02 : f32
// CHECK: arith.divf
// CHECK: math.roundeven
// CHECK: arith.fptosi %{{.*}} : f32 to i8
// CHECK: arith.bitcast %{{.*}} : f32 to i32
// CHECK: arith.shrui
// CHECK: arith.trunci %{{.*}} : i32 to i8
// CHECK: %[[PK:[a-z0-9_]+]] = tensor.concat dim(3) %{{.*}}, %{{.*}} : (tensor<1x2x?x16xi8>, tensor<1x2x?x4xi8>) -> tensor<1x2x?x20xi8>
// CHECK: return %{{.*}}, %[[PK]], %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x?x256xf32>, tensor<1x2x?x20xi8>

// CHECK: func.func @decode(%{{.*}}: tensor<1x1xi64>, %{{.*}}: tensor<1xi64>, %[[C0:[a-z0-9_]+]]: tensor<1x2x?x20xi8>, %{{.*}}: tensor<1x2x?x20xi8>, %{{.*}}: tensor<1x2x?x20xi8>, %{{.*}}: tensor<1x2x?x20xi8>) -> (tensor<1x1x256xf32>, tensor<1x2x?x20xi8>
// CHECK: %[[ROW:[a-z0-9_]+]] = tensor.concat dim(3) %{{.*}}, %{{.*}} : (tensor<1x2x1x16xi8>, tensor<1x2x1x4xi8>) -> tensor<1x2x1x20xi8>
// CHECK: %[[APPEND:[a-z0-9_]+]] = tensor.concat dim(2) %[[C0]], %[[ROW]] : (tensor<1x2x?x20xi8>, tensor<1x2x1x20xi8>) -> tensor<1x2x?x20xi8>
// CHECK: tensor.extract_slice %[[APPEND]][0, 0, 0, 0] [1, 2, %{{.*}}, 16] [1, 1, 1, 1] : tensor<1x2x?x20xi8> to tensor<1x2x?x16xi8>
// CHECK: tensor.extract_slice %[[APPEND]][0, 0, 0, 16] [1, 2, %{{.*}}, 4] [1, 1, 1, 1] : tensor<1x2x?x20xi8> to tensor<1x2x?x4xi8>
// CHECK: arith.extui %{{.*}} : i8 to i32
// CHECK: arith.shli
// CHECK: arith.ori
// CHECK: arith.bitcast %{{.*}} : i32 to f32
// CHECK: arith.sitofp %{{.*}} : i8 to f32
// CHECK: arith.mulf
// CHECK: return %{{.*}}, %[[APPEND]], %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x1x256xf32>, tensor<1x2x?x20xi8>

// EXPAND: func.func @prefill(%{{.*}}: tensor<1x?xi64>) -> (tensor<1x?x256xf32>, tensor<1x4x?x20xi8>, tensor<1x4x?x20xi8>, tensor<1x4x?x20xi8>, tensor<1x4x?x20xi8>)
// EXPAND: func.func @decode(%{{.*}}: tensor<1x1xi64>, %{{.*}}: tensor<1xi64>, %[[C0:[a-z0-9_]+]]: tensor<1x4x?x20xi8>,
// EXPAND: tensor.concat dim(2) %[[C0]], %{{.*}} : (tensor<1x4x?x20xi8>, tensor<1x4x1x20xi8>) -> tensor<1x4x?x20xi8>

// The entry points' calls and signatures follow the layer functions'.
// LAYERS: module attributes {snapkv.kv_cache = {dtype = "i8", scale = "f32"}}
// LAYERS: func.func private @prefill_layer({{.*}} -> (tensor<1x?x32xf32>, tensor<1x2x?x132xi8>, tensor<1x2x?x132xi8>)
// LAYERS: func.func private @decode_layer(%{{.*}}: tensor<1x1x32xf32>, %{{.*}}: tensor<1xi64>, %{{.*}}: tensor<1x2x?x132xi8>, %{{.*}}: tensor<1x2x?x132xi8>,
// LAYERS: func.func @prefill({{.*}} -> (tensor<1x1x64xf32>, tensor<1x2x?x132xi8>, tensor<1x2x?x132xi8>, tensor<1x2x?x132xi8>, tensor<1x2x?x132xi8>)
// LAYERS: call @prefill_layer({{.*}} -> (tensor<1x?x32xf32>, tensor<1x2x?x132xi8>, tensor<1x2x?x132xi8>)
// LAYERS: func.func @decode(%{{.*}}: tensor<1x1xi64>, %{{.*}}: tensor<1xi64>, %{{.*}}: tensor<1x2x?x132xi8>, %{{.*}}: tensor<1x2x?x132xi8>, %{{.*}}: tensor<1x2x?x132xi8>, %{{.*}}: tensor<1x2x?x132xi8>,
// LAYERS: call @decode_layer({{.*}}tensor<1x2x?x132xi8>, tensor<1x2x?x132xi8>,

// A bf16 model: the rows are widened to f32 to be quantized, and read back rounded to bf16.
// BF16: func.func private @decode_layer(%{{.*}}: tensor<1x1x32xbf16>, %{{.*}}: tensor<1xi64>, %{{.*}}: tensor<1x2x?x132xi8>, %{{.*}}: tensor<1x2x?x132xi8>,
// BF16: arith.extf %{{.*}} : bf16 to f32
// BF16: math.roundeven
// BF16: arith.sitofp %{{.*}} : i8 to f32
// BF16-NEXT: arith.mulf
// BF16-NEXT: arith.truncf %{{.*}} : f32 to bf16

// D + 4 = 20 bytes a row: 2 (K, V) * 2 heads * (24 + 16) rows * 20 = 3,200 B a layer; the
// full cache stays f32: 2 * 2 * (48 + 16) * 16 * 4 = 16,384 B.
// LEDGER: "layers": [
// LEDGER: "e": 4,
// LEDGER-NEXT: "row_bytes": 20,
// LEDGER-NEXT: "kept": 24,
// LEDGER-NEXT: "full": 16384,
// LEDGER-NEXT: "compacted": 3200,
// LEDGER: "total": {
// LEDGER-NEXT: "layers": 2,
// LEDGER-NEXT: "full": 32768,
// LEDGER-NEXT: "compacted": 6400,

// TABLE: snapkv cache ledger: L=48 g=16
// TABLE-NEXT: compacted cache in int8: D + 4 bytes a row (the values and an f32 scale)
// TABLE: total: 2 layers, full 32,768 B, compacted 6,400 B (0.1953 of full)

// CHUNK: error: snapkv-compress-kv-cache: kv-dtype=i8 is not available with chunk (the extend function and the ragged cache take the model's element type)
// ADAPTIVE: error: snapkv-compress-kv-cache: kv-dtype=i8 is not available with budget=adaptive
// BAD: Cannot find option named 'u8'!
