// The model rewrite on the exported tiny Llama (test/Models): every layer of
// both functions is rewritten, in the static and the dynamic module.
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 kernel=5 gqa=expand" | FileCheck %s --check-prefix=STATIC
// RUN: snapkv-opt %S/../Models/tiny_llama_dynamic.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 kernel=5 gqa=expand strict=true" \
// RUN:   | FileCheck %s --check-prefix=DYN
// RUN: snapkv-opt %S/../Models/tiny_llama_dynamic.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 kernel=5 gqa=mean strict=true" \
// RUN:   | FileCheck %s --check-prefix=DYNMEAN

// STATIC-LABEL: func.func @prefill(%arg0: tensor<1x64xi64>)
// STATIC-SAME: -> (tensor<1x64x256xf32>, tensor<1x4x24x16xf32>, tensor<1x4x24x16xf32>, tensor<1x4x24x16xf32>, tensor<1x4x24x16xf32>)
// Prefill attention still covers all 64 positions in both layers.
// STATIC-COUNT-2: linalg.batch_matmul {{.*}} -> tensor<4x64x64xf32>
// STATIC: tensor.extract_slice %{{.*}}[0, 0, 56, 0] [1, 4, 8, 16] [1, 1, 1, 1] : tensor<1x4x64x16xf32> to tensor<1x4x8x16xf32>
// STATIC: snapkv.select {{.*}} window 8 capacity 24 scale 2.500000e-01 : (tensor<1x4x8x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>)
// STATIC: tensor.extract_slice
// STATIC: snapkv.select {{.*}} window 8 capacity 24 scale 2.500000e-01 :
// STATIC-NOT: snapkv.select
// STATIC-LABEL: func.func @decode(%arg0: tensor<1x1xi64>, %arg1: tensor<1xi64>, %arg2: tensor<1x4x64x16xf32>, %arg3: tensor<1x4x64x16xf32>, %arg4: tensor<1x4x64x16xf32>, %arg5: tensor<1x4x64x16xf32>)
// STATIC-SAME: -> (tensor<1x1x256xf32>, tensor<1x4x65x16xf32>, tensor<1x4x65x16xf32>, tensor<1x4x65x16xf32>, tensor<1x4x65x16xf32>)
// The physical-length mask (positions 0..64 compared with 64) is gone.
// STATIC-NOT: arith.cmpi sle
// STATIC-NOT: tensor<1x2x2x65x16xf32>
// STATIC-COUNT-4: tensor.concat dim(2) %arg{{[2-5]}}, %{{.*}} : (tensor<1x4x64x16xf32>, tensor<1x4x1x16xf32>) -> tensor<1x4x65x16xf32>

// DYN-LABEL: func.func @prefill(%arg0: tensor<1x?xi64>)
// DYN-SAME: -> (tensor<1x?x256xf32>, tensor<1x4x?x16xf32>, tensor<1x4x?x16xf32>, tensor<1x4x?x16xf32>, tensor<1x4x?x16xf32>)
// DYN: cf.assert %{{.*}}, "snapkv: the prompt is shorter than the observation window"
// DYN: snapkv.select {{.*}} window 8 capacity 24 scale 2.500000e-01 : (tensor<1x4x8x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>) -> (tensor<1x4x?x16xf32>, tensor<1x4x?x16xf32>, tensor<1x4x?xi64>)
// DYN: snapkv.select
// DYN-LABEL: func.func @decode(%arg0: tensor<1x1xi64>, %arg1: tensor<1xi64>, %arg2: tensor<1x4x?x16xf32>
// DYN-NOT: arith.cmpi sle
// DYN-COUNT-4: tensor.concat dim(2) %arg{{[2-5]}}, %{{.*}} : (tensor<1x4x?x16xf32>, tensor<1x4x1x16xf32>) -> tensor<1x4x?x16xf32>

// DYNMEAN-LABEL: func.func @prefill
// DYNMEAN-SAME: -> (tensor<1x?x256xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>)
// DYNMEAN-COUNT-2: snapkv.select {{.*}} window 8 capacity 24 gqa mean scale 2.500000e-01 :
// DYNMEAN-LABEL: func.func @decode(%arg0: tensor<1x1xi64>, %arg1: tensor<1xi64>, %arg2: tensor<1x2x?x16xf32>
// DYNMEAN-NOT: arith.cmpi sle
// DYNMEAN: tensor.concat dim(2) %arg2, %{{.*}} : (tensor<1x2x?x16xf32>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32>
