// The vector x Q8_0 matrix product of snapkv-quantize-weights, through the
// CPU codegen: snapkv-parallelize splits its reduction into parts of whole
// blocks of 32 rows (six of three blocks here), each summed into its own row
// as the f32 vector x matrix product's, and snapkv-vectorize sums each
// block's 32 products before its scale: per block, a row of sums is zeroed,
// each of the block's rows of int8 values is read in address order, widened
// and multiply-added into it (one FMA per vector), then one FMA per vector
// adds the sums, times the block's scales, to the result: no multiply by a
// scale per product, no scalar inner loop and no per-column dot products.
// RUN: snapkv-opt %s --pass-pipeline="builtin.module(snapkv-quantize-weights,func.func(snapkv-parallelize,snapkv-vectorize{vector-bits=512},canonicalize,cse))" | FileCheck %s --implicit-check-not=linalg.generic --implicit-check-not=vector.reduction --implicit-check-not=arith.mulf
// RUN: snapkv-opt %s --snapkv-quantize-weights --snapkv-cpu-pipeline -o /dev/null

// CHECK-LABEL: func.func private @layer(
// CHECK-DAG:     %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : vector<64xf32>
// CHECK:         scf.forall (%{{.*}}) in (6) shared_outs
// CHECK:           %[[EMPTY:.*]] = tensor.empty() : tensor<1536xf32>
// CHECK:           scf.for %[[B:.*]] = %c0 to %c3 step %c1 iter_args(%[[OUT:.*]] = %{{.*}}, %[[SUMS:.*]] = %[[EMPTY]])
// CHECK:             %[[ZEROED:.*]] = scf.for %[[Z:.*]] = %c0 to %c1536 step %c64 iter_args(%[[T:.*]] = %[[SUMS]])
// CHECK:               vector.transfer_write %[[ZERO]], %[[T]][%[[Z]]]
// CHECK:             %[[BLOCK:.*]] = scf.for %[[K:.*]] = %c0 to %c32 step %c1 iter_args(%[[T:.*]] = %[[ZEROED]])
// CHECK:               %[[X:.*]] = tensor.extract %{{.*}}[%c0, %[[B]], %[[K]]] : tensor<1x3x32xf32>
// CHECK:               %[[XB:.*]] = vector.broadcast %[[X]] : f32 to vector<64xf32>
// CHECK:               scf.for %[[N:.*]] = %c0 to %c1536 step %c64 iter_args(%[[T2:.*]] = %[[T]])
// CHECK:                 %[[Q:.*]] = vector.transfer_read %{{.*}}[%[[B]], %[[K]], %[[N]]]{{.*}} : tensor<3x32x1536xi8>, vector<64xi8>
// CHECK:                 %[[W:.*]] = arith.sitofp %[[Q]] : vector<64xi8> to vector<64xf32>
// CHECK:                 %[[ACC:.*]] = vector.transfer_read %[[T2]][%[[N]]]{{.*}} : tensor<1536xf32>, vector<64xf32>
// CHECK:                 %[[F:.*]] = vector.fma %[[XB]], %[[W]], %[[ACC]] : vector<64xf32>
// CHECK:                 vector.transfer_write %[[F]], %[[T2]][%[[N]]]
// CHECK:             scf.for %[[N:.*]] = %c0 to %c1536 step %c64 iter_args(%[[Y:.*]] = %[[OUT]])
// CHECK:               %[[SUM:.*]] = vector.transfer_read %[[BLOCK]][%[[N]]]{{.*}} : tensor<1536xf32>, vector<64xf32>
// CHECK:               %[[S:.*]] = vector.transfer_read %{{.*}}[%[[B]], %[[N]]]{{.*}} : tensor<3x1536xf32>, vector<64xf32>
// CHECK:               %[[YV:.*]] = vector.transfer_read %[[Y]][%c0, %[[N]]]{{.*}} : tensor<1x1536xf32>, vector<64xf32>
// CHECK:               %[[R:.*]] = vector.fma %[[SUM]], %[[S]], %[[YV]] : vector<64xf32>
// CHECK:               vector.transfer_write %[[R]], %[[Y]][%c0, %[[N]]]

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

// More than 2,048 columns (the logits): the columns in chunks of 2,048 with
// the blocks inside each chunk (one block per part here, its loop folded),
// so that a chunk's sums stay in the L1 cache.
// CHECK-LABEL: func.func @wide(
// CHECK:         scf.forall (%{{.*}}) in (8)
// CHECK:           scf.for %{{.*}} = %c0 to %c4096 step %c2048
// CHECK:             scf.for %{{.*}} = %c0 to %c2048 step %c64
// CHECK:             scf.for %{{.*}} = %c0 to %c32 step %c1
// CHECK:               scf.for %{{.*}} = %c0 to %c2048 step %c64
// CHECK:             scf.for %{{.*}} = %c0 to %c2048 step %c64
func.func @wide(%x: tensor<1x256xf32>, %w: tensor<256x4096xf32> {snapkv.weight = "head", snapkv.transposed}) -> tensor<1x4096xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x4096xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<1x4096xf32>) -> tensor<1x4096xf32>
  %y = linalg.matmul ins(%x, %w : tensor<1x256xf32>, tensor<256x4096xf32>) outs(%c : tensor<1x4096xf32>) -> tensor<1x4096xf32>
  return %y : tensor<1x4096xf32>
}

// bf16 activations (`--dtype bf16`): each is widened to f32 once per row of
// the block, the kernel otherwise the same.
// CHECK-LABEL: func.func @bf16(
// CHECK:         scf.for %{{.*}} = %c0 to %c32 step %c1
// CHECK:           %[[A:.*]] = tensor.extract %{{.*}} : tensor<1x{{[0-9]+}}x32xbf16>
// CHECK:           %[[AW:.*]] = arith.extf %[[A]] : bf16 to f32
// CHECK:           %[[AB:.*]] = vector.broadcast %[[AW]] : f32 to vector<64xf32>
// CHECK:           scf.for %{{.*}} = %c0 to %c256 step %c64
// CHECK:             vector.fma %[[AB]], %{{.*}}, %{{.*}} : vector<64xf32>
func.func @bf16(%x: tensor<1x128xbf16>, %w: tensor<128x256xbf16> {snapkv.weight = "wb", snapkv.transposed}) -> tensor<1x256xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x256xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<1x256xf32>) -> tensor<1x256xf32>
  %y = linalg.matmul ins(%x, %w : tensor<1x128xbf16>, tensor<128x256xbf16>) outs(%c : tensor<1x256xf32>) -> tensor<1x256xf32>
  return %y : tensor<1x256xf32>
}
