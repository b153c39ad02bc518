// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// Votes come from the FULL causal softmax (docs/semantics.md, step 1): the denominator holds every visible
// column, prefix AND window, and future columns are masked out.
//
// All cases: L = 4, W = 2 (window queries at positions 2 and 3), P = 2, C = W + 1 = 3 (exactly
// one prefix position is kept), kernel 1 (no pooling), D = 2, `scale 1.0`.
// q2 = [1, 0], q3 = [0, 1], keys[j] = [ln a_j, ln b_j], so exp(logit) of query 2 over column j
// is a_j and of query 3 is b_j. values[j] = [j, -j].

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @run(%k: tensor<1x1x4x2xf32>) {
  %q = arith.constant dense<[[[[1.0, 0.0], [0.0, 1.0]]]]> : tensor<1x1x2x2xf32>
  %v = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0]]]]> : tensor<1x1x4x2xf32>
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 2 capacity 3 kernel 1 scale 1.0
    : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>)
    -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  %im = bufferization.to_buffer %idx : tensor<1x1x3xi64> to memref<1x1x3xi64>
  %iu = memref.cast %im : memref<1x1x3xi64> to memref<*xi64>
  call @printMemrefI64(%iu) : (memref<*xi64>) -> ()
  %km = bufferization.to_buffer %ko : tensor<1x1x3x2xf32> to memref<1x1x3x2xf32>
  %ku = memref.cast %km : memref<1x1x3x2xf32> to memref<*xf32>
  call @printMemrefF32(%ku) : (memref<*xf32>) -> ()
  %vm = bufferization.to_buffer %vo : tensor<1x1x3x2xf32> to memref<1x1x3x2xf32>
  %vu = memref.cast %vm : memref<1x1x3x2xf32> to memref<*xf32>
  call @printMemrefF32(%vu) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  // Case 1: the seed's counter-example. Prefix A = position 0, B = position 1.
  //   exp-weights   A   B   w2  w3
  //   query 2       9   1   90  -     sum 100 -> A 0.09,  B 0.01
  //   query 3       9  27    2  2     sum  40 -> A 0.225, B 0.675
  // Full softmax: A = 0.09 + 0.225 = 0.315, B = 0.01 + 0.675 = 0.685 -> keep B (1).
  // Normalising over the prefix columns only (the bug) gives A = 0.9 + 0.25 = 1.15,
  // B = 0.1 + 0.75 = 0.85 -> it would keep A and print [0, 2, 3].
  // ln 9 = 2.19722458, ln 90 = 4.49980967, ln 27 = 3.29583687, ln 2 = 0.69314718.
  %k1 = arith.constant dense<[[[[2.19722458, 2.19722458], [0.0, 3.29583687],
                                [4.49980967, 0.69314718], [0.0, 0.69314718]]]]> : tensor<1x1x4x2xf32>
  // CHECK: sizes = [1, 1, 3]
  // CHECK-NEXT: {{^\[\[\[}}1, 2, 3]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 3.29584],
  // CHECK-NEXT: {{^}}   [4.49981, 0.693147],
  // CHECK-NEXT: {{^}}   [0, 0.693147]]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3]]]]
  call @run(%k1) : (tensor<1x1x4x2xf32>) -> ()

  // Case 2: the causal mask. Column 3 is in the future of query 2 and gets a huge weight
  // (1000) there; it must not enter query 2's denominator.
  //   exp-weights   A   B   w2  w3
  //   query 2       4   1   1   (1000, masked)   sum 6 -> A 0.667, B 0.167
  //   query 3       1   2   1   1                sum 5 -> A 0.2,   B 0.4
  // Masked: A = 0.867, B = 0.567 -> keep A (0). Without the mask query 2's denominator is 1006
  // (A 0.004, B 0.001), so A = 0.204 < B = 0.401 and a mask bug prints [1, 2, 3].
  // ln 4 = 1.38629436, ln 1000 = 6.90775528.
  %k2 = arith.constant dense<[[[[1.38629436, 0.0], [0.0, 0.69314718],
                                [0.0, 0.0], [6.90775528, 0.0]]]]> : tensor<1x1x4x2xf32>
  // CHECK: sizes = [1, 1, 3]
  // CHECK-NEXT: {{^\[\[\[}}0, 2, 3]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1.38629, 0],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [6.90776, 0]]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3]]]]
  call @run(%k2) : (tensor<1x1x4x2xf32>) -> ()
  return
}
