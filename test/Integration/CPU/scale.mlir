// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// The `scale` clause multiplies the logits, and its default is 1/sqrt(D) (docs/semantics.md, step 1, 3).
// One input, selected with the default scale and with `scale 1.0`; the two pick different
// prefix positions, so a lowering that ignores the clause, or uses 1 (or anything but 1/sqrt(D))
// as the default, fails one of the two checks.
//
// L = 4, W = 2, P = 2, C = 3 (one prefix position kept), kernel 1, D = 2.
// q2 = [1, 0], q3 = [0, 1], keys[j] = [ln a_j, ln b_j], a = [16, 1, 16, 1], b = [2, 8, 1, 1];
// with scale s the exp-weights are a_j^s and b_j^s. values[j] = [j, -j].
//
// scale 1.0:   query 2: 16 1 16 (-)  sum 33 -> A(0) 0.4848, B(1) 0.0303
//              query 3:  2 8  1  1   sum 12 -> A    0.1667, B    0.6667
//              A = 0.6515 < B = 0.6970 -> keep 1: [1, 2, 3]
// default s = 1/sqrt(2) = 0.70711: 16^s = 7.1030, 8^s = 4.3509, 2^s = 1.6325
//              query 2: 7.1030 1 7.1030 (-)         sum 15.2060 -> A 0.4671, B 0.0658
//              query 3: 1.6325 4.3509 1 1           sum  7.9834 -> A 0.2045, B 0.5450
//              A = 0.6716 > B = 0.6108 -> keep 0: [0, 2, 3]

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print(%idx: tensor<1x1x3xi64>, %vo: tensor<1x1x3x2xf32>) {
  %im = bufferization.to_buffer %idx : tensor<1x1x3xi64> to memref<1x1x3xi64>
  %iu = memref.cast %im : memref<1x1x3xi64> to memref<*xi64>
  call @printMemrefI64(%iu) : (memref<*xi64>) -> ()
  %vm = bufferization.to_buffer %vo : tensor<1x1x3x2xf32> to memref<1x1x3x2xf32>
  %vu = memref.cast %vm : memref<1x1x3x2xf32> to memref<*xf32>
  call @printMemrefF32(%vu) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %q = arith.constant dense<[[[[1.0, 0.0], [0.0, 1.0]]]]> : tensor<1x1x2x2xf32>
  // ln 16 = 2.77258872, ln 8 = 2.07944154, ln 2 = 0.69314718
  %k = arith.constant dense<[[[[2.77258872, 0.69314718], [0.0, 2.07944154],
                               [2.77258872, 0.0], [0.0, 0.0]]]]> : tensor<1x1x4x2xf32>
  %v = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0]]]]> : tensor<1x1x4x2xf32>

  %k1, %v1, %i1 = snapkv.select %q, %k, %v window 2 capacity 3 kernel 1 scale 1.0
    : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>)
    -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  // CHECK: sizes = [1, 1, 3]
  // CHECK-NEXT: {{^\[\[\[}}1, 2, 3]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3]]]]
  call @print(%i1, %v1) : (tensor<1x1x3xi64>, tensor<1x1x3x2xf32>) -> ()

  %k2, %v2, %i2 = snapkv.select %q, %k, %v window 2 capacity 3 kernel 1
    : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>)
    -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  // CHECK: sizes = [1, 1, 3]
  // CHECK-NEXT: {{^\[\[\[}}0, 2, 3]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3]]]]
  call @print(%i2, %v2) : (tensor<1x1x3xi64>, tensor<1x1x3x2xf32>) -> ()
  return
}
