// The model rewrite on a one-layer prefill/decode pair (Inputs/): what
// changes and what stays, for each GQA policy and option.
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 gqa=expand kernel=3" \
// RUN:   | FileCheck %s --check-prefix=EXPAND
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 kernel=5 gqa=mean pooling=max order=score" \
// RUN:   | FileCheck %s --check-prefix=MEAN
// RUN: sed 's/5.000000e-01 : f32/2.500000e-01 : f32/' %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   | snapkv-opt --snapkv-compress-kv-cache="window=2 capacity=6 kernel=5 gqa=max" \
// RUN:   | FileCheck %s --check-prefix=SCALE
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=16 kernel=5 gqa=expand decode-func=" \
// RUN:   | FileCheck %s --check-prefix=SHORT

// Prefill: the select reads the last `window` rows of the post-RoPE queries
// (here the function's %arg0) and the full K/V; only the results change.
// EXPAND-LABEL: func.func @prefill
// EXPAND-SAME: (%[[Q:.*]]: tensor<1x4x8x4xf32>, %[[K:.*]]: tensor<1x2x8x4xf32>, %[[V:.*]]: tensor<1x2x8x4xf32>)
// EXPAND-SAME: -> (tensor<1x4x8x4xf32>, tensor<1x4x6x4xf32>, tensor<1x4x6x4xf32>)
// Prefill's own attention is untouched: it still reads all 8 positions.
// EXPAND: linalg.batch_matmul {{.*}} -> tensor<4x8x8xf32>
// EXPAND: linalg.batch_matmul {{.*}} -> tensor<4x8x4xf32>
// EXPAND: %[[W:.*]] = tensor.extract_slice %[[Q]][0, 0, 6, 0] [1, 4, 2, 4] [1, 1, 1, 1]
// EXPAND: %[[SK:.*]], %[[SV:.*]], %{{.*}} = snapkv.select %[[W]], %[[K]], %[[V]] window 2 capacity 6 kernel 3 scale 5.000000e-01 :
// EXPAND-SAME: (tensor<1x4x2x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x4x6x4xf32>, tensor<1x4x6x4xf32>, tensor<1x4x6xi64>)
// EXPAND: return %{{.*}}, %[[SK]], %[[SV]]

// Decode (expand): the caches have Hq = 4 heads, the new token's K/V are
// repeated before the append, the attention reads the cache without a repeat,
// and the mask derived from the physical length is gone.
// EXPAND-LABEL: func.func @decode
// EXPAND-SAME: %[[KC:[a-z0-9]+]]: tensor<1x4x8x4xf32>, %[[VC:[a-z0-9]+]]: tensor<1x4x8x4xf32>)
// EXPAND-SAME: -> (tensor<1x4x1x4xf32>, tensor<1x4x9x4xf32>, tensor<1x4x9x4xf32>)
// EXPAND-NOT: arith.cmpi
// EXPAND: %[[KR:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<1x2x1x4xf32>) outs(%{{.*}} : tensor<1x2x2x1x4xf32>)
// EXPAND: %[[KRC:.*]] = tensor.collapse_shape %[[KR]] {{\[}}[0], [1, 2], [3], [4]]
// EXPAND: %[[KALL:.*]] = tensor.concat dim(2) %[[KC]], %[[KRC]] : (tensor<1x4x8x4xf32>, tensor<1x4x1x4xf32>) -> tensor<1x4x9x4xf32>
// EXPAND: %[[VALL:.*]] = tensor.concat dim(2) %[[VC]], %{{.*}} -> tensor<1x4x9x4xf32>
// EXPAND: linalg.transpose ins(%[[KALL]] : tensor<1x4x9x4xf32>)
// EXPAND-NOT: tensor<1x2x2x9x4xf32>
// EXPAND-NOT: arith.select
// EXPAND: return %{{.*}}, %[[KALL]], %[[VALL]]

// mean/max: one selection per kv head; decode keeps Hkv heads and its repeat.
// MEAN-LABEL: func.func @prefill
// MEAN-SAME: -> (tensor<1x4x8x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>)
// MEAN: snapkv.select {{.*}} window 2 capacity 6 pooling max gqa mean order score scale 5.000000e-01 :
// MEAN-LABEL: func.func @decode
// MEAN-SAME: tensor<1x2x8x4xf32>, %{{.*}}: tensor<1x2x8x4xf32>)
// MEAN-SAME: -> (tensor<1x4x1x4xf32>, tensor<1x2x9x4xf32>, tensor<1x2x9x4xf32>)
// MEAN-NOT: arith.cmpi
// MEAN: tensor.concat dim(2) {{.*}} -> tensor<1x2x9x4xf32>
// MEAN: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x2x2x9x4xf32>)

// The model's scale is carried onto the select, also when it differs from
// 1/sqrt(D) (the op's default).
// SCALE: snapkv.select {{.*}} window 2 capacity 6 gqa max scale 2.500000e-01 :

// capacity > L: the select is still inserted (it keeps all L positions at run
// time), and decode-func="" leaves decode alone.
// SHORT-LABEL: func.func @prefill
// SHORT-SAME: -> (tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>)
// SHORT: snapkv.select {{.*}} window 2 capacity 16 scale 5.000000e-01 :
// SHORT-LABEL: func.func @decode
// SHORT-SAME: tensor<1x2x8x4xf32>, %{{.*}}: tensor<1x2x8x4xf32>)
// SHORT: arith.cmpi sle
