// RUN: snapkv-opt %s --convert-snapkv-to-linalg -one-shot-bufferize=bufferize-function-boundaries -convert-linalg-to-loops -expand-strided-metadata -lower-affine -finalize-memref-to-llvm -convert-scf-to-cf -convert-cf-to-llvm -convert-arith-to-llvm -convert-math-to-llvm -convert-func-to-llvm -reconcile-unrealized-casts \
// RUN:   | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils | FileCheck %s --check-prefixes=CHECK,MASKED
// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s --check-prefixes=CHECK,MASKED
// RUN: snapkv-opt %s --snapkv-cpu-pipeline=fuse-attention=false | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s --check-prefixes=CHECK,MASKED

// snapkv.sdpa as convert-snapkv-to-linalg lowers it (a mask that is not
// causal is never fused). One head, D = 1, scale 1, keys [0, ln 3], values
// [4, 8]:
//   row 0 (q = 1) sees both keys: softmax [1/4, 3/4] -> 7;
//   row 1 (q = 0) sees no key: 0 (as torch's SDPA for a fully masked row);
//   row 2 (q = 0) sees key 0 only: 4.
// Without the mask rows 1 and 2 see both keys, with equal scores: 6.
// The CPU pipeline reads the i1 mask with vector loads: without
// snapkv-byte-bool-vectors they read it bit-packed and row 0 gives 4.

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print(%t: tensor<1x3x1xf32>) {
  %m = bufferization.to_buffer %t : tensor<1x3x1xf32> to memref<1x3x1xf32>
  %u = memref.cast %m : memref<1x3x1xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %q = arith.constant dense<[[[1.0], [0.0], [0.0]]]> : tensor<1x3x1xf32>
  %k = arith.constant dense<[[[0.0], [1.09861229]]]> : tensor<1x2x1xf32>
  %v = arith.constant dense<[[[4.0], [8.0]]]> : tensor<1x2x1xf32>
  %mask = arith.constant dense<[[[true, true], [false, false], [true, false]]]> : tensor<1x3x2xi1>
  %init = tensor.empty() : tensor<1x3x1xf32>
  %masked = snapkv.sdpa %q, %k, %v mask %mask scale 1.0 outs(%init : tensor<1x3x1xf32>)
      : tensor<1x3x1xf32>, tensor<1x2x1xf32>, tensor<1x2x1xf32>, tensor<1x3x2xi1> -> tensor<1x3x1xf32>
  // MASKED: {{\[}}[7],
  // MASKED-NEXT: [0],
  // MASKED-NEXT: [4]]]
  call @print(%masked) : (tensor<1x3x1xf32>) -> ()
  %all = snapkv.sdpa %q, %k, %v scale 1.0 outs(%init : tensor<1x3x1xf32>)
      : tensor<1x3x1xf32>, tensor<1x2x1xf32>, tensor<1x2x1xf32> -> tensor<1x3x1xf32>
  // CHECK: {{\[}}[7],
  // CHECK-NEXT: [6],
  // CHECK-NEXT: [6]]]
  call @print(%all) : (tensor<1x3x1xf32>) -> ()
  return
}
