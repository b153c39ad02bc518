// The vector x Q8_0 matrix product of snapkv-quantize-weights, through the
// CPU codegen: snapkv-parallelize splits its reduction into parts of whole
// blocks of 32 rows (six of three blocks here), each summed into its own row
// as the f32 vector x matrix product's, and snapkv-vectorize takes it like a
// contraction (one reduction step per register tile, the columns the
// vector): each step reads a row of int8 values, widens and scales it, and
// multiply-adds it into the accumulator, no scalar inner loop and no
// per-column dot products.
// RUN: snapkv-opt %s --pass-pipeline="builtin.module(snapkv-quantize-weights,func.func(snapkv-parallelize,snapkv-vectorize{vector-bits=512},canonicalize,cse))" | FileCheck %s --implicit-check-not=linalg.generic --implicit-check-not=vector.reduction
// RUN: snapkv-opt %s --snapkv-quantize-weights --snapkv-cpu-pipeline -o /dev/null

// CHECK-LABEL: func.func private @layer(
// CHECK:         scf.forall (%{{.*}}) in (6) shared_outs
// CHECK:           scf.for %{{.*}} = %c0 to %c3 step %c1
// CHECK:             scf.for %{{.*}} = %c0 to %c32 step %c1
// CHECK:               scf.for %{{.*}} = %c0 to %c1536 step %c64
// CHECK:                 %[[X:.*]] = vector.broadcast %{{.*}} : vector<1xf32> to vector<64xf32>
// CHECK:                 %[[Q:.*]] = vector.transfer_read {{.*}} : tensor<1x1x64xi8>, vector<64xi8>
// CHECK:                 %[[S:.*]] = vector.transfer_read {{.*}} : tensor<1x64xf32>, vector<64xf32>
// CHECK:                 %[[ACC:.*]] = vector.transfer_read {{.*}} : tensor<1x64xf32>, vector<64xf32>
// CHECK:                 %[[W:.*]] = arith.sitofp %[[Q]] : vector<64xi8> to vector<64xf32>
// CHECK:                 %[[WS:.*]] = arith.mulf %[[W]], %[[S]] : vector<64xf32>
// CHECK:                 vector.fma %[[X]], %[[WS]], %[[ACC]] : vector<64xf32>

func.func @decode(%x: tensor<1x576xf32>, %w: tensor<576x1536xf32> {snapkv.weight = "w", snapkv.transposed}) -> tensor<1x1536xf32> {
  %y = call @layer(%x, %w) : (tensor<1x576xf32>, tensor<576x1536xf32>) -> tensor<1x1536xf32>
  return %y : tensor<1x1536xf32>
}

func.func private @layer(%x: tensor<1x576xf32>, %w: tensor<576x1536xf32>) -> tensor<1x1536xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x1536xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<1x1536xf32>) -> tensor<1x1536xf32>
  %y = linalg.matmul ins(%x, %w : tensor<1x576xf32>, tensor<576x1536xf32>) outs(%c : tensor<1x1536xf32>) -> tensor<1x1536xf32>
  return %y : tensor<1x1536xf32>
}
