// The vector x Q4_1 matrix product of snapkv-quantize-weights format=q4_1,
// through the CPU codegen: snapkv-parallelize splits its blocks into parts
// (six of three blocks here), as the Q8_0 product's, and snapkv-vectorize
// takes each block's 16 rows of bytes in address order: both nibbles of a
// vector of bytes (`and 15`, `shr 4`) widened and multiply-added by
// activations j and 16 + j into a row of block sums, the activations summed
// on the way; then one pass per block adds `sums * d + m * sum x`.
// RUN: snapkv-opt %s --pass-pipeline="builtin.module(snapkv-quantize-weights{format=q4_1},func.func(snapkv-parallelize,snapkv-vectorize{vector-bits=512},canonicalize,cse))" | FileCheck %s --implicit-check-not=linalg.generic --implicit-check-not=arith.mulf
// RUN: snapkv-opt %s --snapkv-quantize-weights=format=q4_1 --snapkv-cpu-pipeline -o /dev/null

// CHECK-LABEL: func.func private @layer(
// CHECK-SAME:    tensor<1x576xf32>, %{{.*}}: tensor<288x1536xi8>, %{{.*}}: tensor<18x1536xf32>, %{{.*}}: tensor<18x1536xf32>)
// CHECK-DAG:     %[[FOUR:.*]] = arith.constant dense<4> : vector<64xi8>
// CHECK-DAG:     %[[FIFTEEN:.*]] = arith.constant dense<15> : vector<64xi8>
// CHECK:         scf.forall (%{{.*}}) in (6) shared_outs
// CHECK:           %[[XS:.*]] = tensor.extract_slice %{{.*}} : tensor<1x18x2x16xf32> to tensor<1x3x2x16xf32>
// CHECK:           %[[BYTES:.*]] = tensor.extract_slice %{{.*}} : tensor<18x16x1536xi8> to tensor<3x16x1536xi8>
// CHECK:           %[[D:.*]] = tensor.extract_slice %{{.*}} : tensor<18x1536xf32> to tensor<3x1536xf32>
// CHECK:           %[[M:.*]] = tensor.extract_slice %{{.*}} : tensor<18x1536xf32> to tensor<3x1536xf32>
// CHECK:           scf.for %[[B:.*]] = %c0 to %c3 step %c1 iter_args(%[[OUT:.*]] = %{{.*}}, %{{.*}} = %{{.*}})
// CHECK:             %[[ROWS:.*]]:2 = scf.for %[[J:.*]] = %c0 to %c16 step %c1 iter_args(%[[T:.*]] = %{{.*}}, %[[TOTAL:.*]] = %{{.*}})
// CHECK:               %[[LO:.*]] = tensor.extract %[[XS]][%c0, %[[B]], %c0, %[[J]]]
// CHECK:               %[[HI:.*]] = tensor.extract %[[XS]][%c0, %[[B]], %c1, %[[J]]]
// CHECK:               %[[T1:.*]] = arith.addf %[[TOTAL]], %[[LO]] : f32
// CHECK:               %[[T2:.*]] = arith.addf %[[T1]], %[[HI]] : f32
// CHECK:               %[[LOS:.*]] = vector.broadcast %[[LO]] : f32 to vector<64xf32>
// CHECK:               %[[HIS:.*]] = vector.broadcast %[[HI]] : f32 to vector<64xf32>
// CHECK:               scf.for %[[N:.*]] = %c0 to %c1536 step %c64 iter_args(%[[S:.*]] = %[[T]])
// CHECK:                 %[[PACKED:.*]] = vector.transfer_read %[[BYTES]][%[[B]], %[[J]], %[[N]]]{{.*}} : tensor<3x16x1536xi8>, vector<64xi8>
// CHECK:                 %[[QL:.*]] = arith.andi %[[PACKED]], %[[FIFTEEN]] : vector<64xi8>
// CHECK:                 %[[QLF:.*]] = arith.uitofp %[[QL]] : vector<64xi8> to vector<64xf32>
// CHECK:                 %[[QH:.*]] = arith.shrui %[[PACKED]], %[[FOUR]] : vector<64xi8>
// CHECK:                 %[[QHF:.*]] = arith.uitofp %[[QH]] : vector<64xi8> to vector<64xf32>
// CHECK:                 %[[ACC:.*]] = vector.transfer_read %[[S]][%[[N]]]
// CHECK:                 %[[F1:.*]] = vector.fma %[[LOS]], %[[QLF]], %[[ACC]] : vector<64xf32>
// CHECK:                 %[[F2:.*]] = vector.fma %[[HIS]], %[[QHF]], %[[F1]] : vector<64xf32>
// CHECK:                 vector.transfer_write %[[F2]], %[[S]][%[[N]]]
// CHECK:               scf.yield %{{.*}}, %[[T2]] : tensor<1536xf32>, f32
// CHECK:             %[[SUMX:.*]] = vector.broadcast %[[ROWS]]#1 : f32 to vector<64xf32>
// CHECK:             scf.for %[[N:.*]] = %c0 to %c1536 step %c64 iter_args(%[[Y:.*]] = %[[OUT]])
// CHECK:               %[[MV:.*]] = vector.transfer_read %[[M]][%[[B]], %[[N]]]
// CHECK:               %[[YV:.*]] = vector.transfer_read %[[Y]][%c0, %[[N]]]
// CHECK:               %[[SHIFTED:.*]] = vector.fma %[[MV]], %[[SUMX]], %[[YV]] : vector<64xf32>
// CHECK:               %[[SV:.*]] = vector.transfer_read %[[ROWS]]#0[%[[N]]]
// CHECK:               %[[DV:.*]] = vector.transfer_read %[[D]][%[[B]], %[[N]]]
// CHECK:               %[[R:.*]] = vector.fma %[[SV]], %[[DV]], %[[SHIFTED]] : vector<64xf32>
// CHECK:               vector.transfer_write %[[R]], %[[Y]][%c0, %[[N]]]

// bf16 activations: widened as they are read.
// CHECK-LABEL: func.func @bf16(
// CHECK:           %[[A:.*]] = tensor.extract %{{.*}} : tensor<1x1x2x16xbf16>
// CHECK:           arith.extf %[[A]] : bf16 to f32

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

func.func @bf16(%x: tensor<1x128xbf16>, %w: tensor<128x256xbf16> {snapkv.weight = "wb", snapkv.transposed}) -> tensor<1x256xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x256xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<1x256xf32>) -> tensor<1x256xf32>
  %y = linalg.matmul ins(%x, %w : tensor<1x128xbf16>, tensor<128x256xbf16>) outs(%c : tensor<1x256xf32>) -> tensor<1x256xf32>
  return %y : tensor<1x256xf32>
}
