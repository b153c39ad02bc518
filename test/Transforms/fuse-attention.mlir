// The prompt's attention of torch-mlir imported models becomes one
// snapkv.attention on the queries and the keys and values before the GQA
// repeat, with the model's own effective scale (see
// compress-kv-cache-models.mlir for how it is computed); the [L, L] scores,
// mask and softmax are erased. A decode step's attention fuses too when its
// mask compares the keys with the cache's length before the append (every
// key visible to the one new query), over the appended cache.
// RUN: snapkv-opt %S/Inputs/models/llama_eager.mlir --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=EAGER
// RUN: snapkv-opt %S/Inputs/models/llama_sdpa_dynamic.mlir --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=DYNAMIC
// RUN: snapkv-opt %S/Inputs/models/llama_layers.mlir --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=LAYERS
// A sliding window that covers the 16-token prompt hides nothing; the same
// window over a dynamic prompt might, and Gemma-2's softcapping is not
// plain attention: both are left unchanged.
// RUN: snapkv-opt %S/Inputs/models/mistral_sdpa_window32.mlir --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=WINDOW
// RUN: snapkv-opt %S/Inputs/models/mistral_sdpa_window32_dynamic.mlir --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" > %t.window
// RUN: snapkv-opt %S/Inputs/models/mistral_sdpa_window32_dynamic.mlir | diff - %t.window
// A decode mask that compares the keys with another value (another layer's
// cache length, the `position` argument) could hide cached keys for some
// inputs: snapkv.attention gets that value as its explicit offset.
// RUN: snapkv-opt %S/../Models/tiny_llama_dynamic.mlir --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=OTHER-CACHE
// RUN: sed 's/ins(%%qp0 : tensor<1xi64>) outs(%%qp0e/ins(%%pos_arg : tensor<1xi64>) outs(%%qp0e/; s/arith.addi %%in, %%cq_i64/arith.addi %%in, %%c0_i64/' \
// RUN:   %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   | snapkv-opt --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" | FileCheck %s --check-prefix=ARGUMENT
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=STATIC
// RUN: snapkv-opt %S/Inputs/models/gemma2_eager.mlir --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" > %t.gemma
// RUN: snapkv-opt %S/Inputs/models/gemma2_eager.mlir | diff - %t.gemma
// After the SnapKV rewrite, the prefill's attention fuses the same way next
// to the select, and the decode step's, whose mask the rewrite removed (the
// new token sees every kept key), over the appended compacted cache (gqa
// expand: one cached head per query head, no repeat).
// RUN: snapkv-opt %S/Inputs/models/llama_sdpa.mlir \
// RUN:   --pass-pipeline="builtin.module(snapkv-compress-kv-cache{window=4 capacity=8 kernel=5 gqa=expand strict=true},func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=REWRITTEN

// EAGER-LABEL: func.func @prefill
// EAGER-NOT: linalg.batch_matmul
// EAGER: snapkv.attention %{{.*}}, %{{.*}}, %{{.*}} scale 0.0883883461 outs(%{{.*}} : tensor<1x4x16x128xf32>) : tensor<1x4x16x128xf32>, tensor<1x2x16x128xf32>, tensor<1x2x16x128xf32> -> tensor<1x4x16x128xf32>
// EAGER-NOT: linalg.batch_matmul
// EAGER-NOT: tensor<4x16x16xf32>
// EAGER-LABEL: func.func @decode
// EAGER-NOT: linalg.batch_matmul
// EAGER: %[[K:.*]] = tensor.concat dim(2) %arg2
// EAGER: %[[V:.*]] = tensor.concat dim(2) %arg3
// EAGER: snapkv.attention %{{.*}}, %[[K]], %[[V]] scale 0.0883883461 outs(%{{.*}} : tensor<1x4x1x128xf32>) : tensor<1x4x1x128xf32>, tensor<1x2x17x128xf32>, tensor<1x2x17x128xf32> -> tensor<1x4x1x128xf32>
// EAGER-NOT: linalg.batch_matmul

// DYNAMIC-LABEL: func.func @prefill
// DYNAMIC-NOT: x?x?x
// DYNAMIC: snapkv.attention %{{.*}} scale 0.0883883461 outs(%{{.*}} : tensor<1x4x?x128xf32>) : tensor<1x4x?x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32> -> tensor<1x4x?x128xf32>
// DYNAMIC-NOT: x?x?x
// DYNAMIC-LABEL: func.func @decode
// DYNAMIC: snapkv.attention %{{.*}} outs(%{{.*}} : tensor<1x4x1x128xf32>) : tensor<1x4x1x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32> -> tensor<1x4x1x128xf32>

// LAYERS-LABEL: func.func private @prefill_layer
// LAYERS: snapkv.attention
// LAYERS-LABEL: func.func private @decode_layer
// LAYERS: snapkv.attention
// LAYERS-LABEL: func.func @prefill

// WINDOW-LABEL: func.func @prefill
// WINDOW: snapkv.attention
// WINDOW-LABEL: func.func @decode
// WINDOW-NOT: snapkv.attention
// WINDOW: snapkv.sdpa %{{.*}} mask

// REWRITTEN-LABEL: func.func @prefill
// REWRITTEN-DAG: snapkv.select
// REWRITTEN-DAG: snapkv.attention
// REWRITTEN-LABEL: func.func @decode
// REWRITTEN-NOT: linalg.batch_matmul
// REWRITTEN: snapkv.attention %{{.*}} outs(%{{.*}} : tensor<1x4x1x128xf32>) : tensor<1x4x1x128xf32>, tensor<1x4x17x128xf32>, tensor<1x4x17x128xf32> -> tensor<1x4x1x128xf32>

// OTHER-CACHE-LABEL: func.func @prefill
// OTHER-CACHE-COUNT-2: snapkv.attention
// OTHER-CACHE-LABEL: func.func @decode
// OTHER-CACHE-NOT: linalg.batch_matmul
// The importer compares the keys with the last layer's value cache length.
// OTHER-CACHE: tensor.dim %arg5, %c2
// OTHER-CACHE: %[[LEN:.*]] = tensor.dim %arg5, %c2
// OTHER-CACHE: snapkv.attention %{{.*}}, %{{.*}}, %{{.*}} offset %[[LEN]] scale 2.500000e-01 outs(%{{.*}} : tensor<1x4x1x16xf32>) : tensor<1x4x1x16xf32>
// OTHER-CACHE-NOT: linalg.batch_matmul

// ARGUMENT-LABEL: func.func @decode
// ARGUMENT: %[[POS:.*]] = tensor.extract %arg0[%c0] : tensor<1xi64>
// ARGUMENT: %[[IDX:.*]] = arith.index_cast %[[POS]] : i64 to index
// ARGUMENT: snapkv.attention %{{.*}}, %{{.*}}, %{{.*}} offset %[[IDX]] scale 5.000000e-01

// The mini decode's query position is the constant static cache length 8:
// the default alignment (every key of the 9 visible).
// STATIC-LABEL: func.func @decode
// STATIC: snapkv.attention %{{.*}}, %{{.*}}, %{{.*}} scale 5.000000e-01 outs(%{{.*}} : tensor<1x4x1x4xf32>) : tensor<1x4x1x4xf32>, tensor<1x2x9x4xf32>, tensor<1x2x9x4xf32> -> tensor<1x4x1x4xf32>
