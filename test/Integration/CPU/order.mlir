// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// `order` (docs/semantics.md, step 5) on one input: `position` lists the kept positions ascending; `score` lists
// the kept prefix by descending POOLED score (not raw vote), then the window ascending. The same
// set is kept either way. Two query heads with different rankings show the order is per head.
//
// Hq = 2, Hkv = 1, gqa expand, W = 1 (query at position 8), L = 9, P = 8, C = 5 (four prefix
// positions kept), kernel 3 avg, `scale 1.0`, D = 2. Head 0 = [1, 0], head 1 = [0, 1],
// keys[j] = [ln a_j, ln b_j], values[j] = [j, -j].
//   a = [5, 4, 9, 2, 1, 1, 1, 4 | 1] (sum 28), b = [1, 1, 9, 8, 4, 2, 2, 3 | 1] (sum 31).
// Pooled scores in units of 1/(3*sum):
//   head 0: [9, 18, 15, 12, 4, 3, 6, 5]   -> keep {0, 1, 2, 3}
//           position [0, 1, 2, 3, 8]; score [1, 2, 3, 0, 8]
//           (raw-vote order of the kept set would be [2, 0, 1, 3]; raw top-4 is {0, 1, 2, 7})
//   head 1: [2, 11, 18, 21, 14, 8, 7, 5]  -> keep {1, 2, 3, 4}
//           position [1, 2, 3, 4, 8]; score [3, 2, 4, 1, 8]
//           (raw-vote order would be [2, 3, 4, 1])

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print_i64(%t: tensor<*xi64>) {
  %m = bufferization.to_buffer %t : tensor<*xi64> to memref<*xi64>
  call @printMemrefI64(%m) : (memref<*xi64>) -> ()
  return
}

func.func @print_f32(%t: tensor<*xf32>) {
  %m = bufferization.to_buffer %t : tensor<*xf32> to memref<*xf32>
  call @printMemrefF32(%m) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %q = arith.constant dense<[[[[1.0, 0.0]], [[0.0, 1.0]]]]> : tensor<1x2x1x2xf32>
  // ln 2 = 0.69314718, ln 3 = 1.09861229, ln 4 = 1.38629436, ln 5 = 1.60943791,
  // ln 8 = 2.07944154, ln 9 = 2.19722458
  %k = arith.constant dense<[[[[1.60943791, 0.0], [1.38629436, 0.0], [2.19722458, 2.19722458],
                               [0.69314718, 2.07944154], [0.0, 1.38629436], [0.0, 0.69314718],
                               [0.0, 0.69314718], [1.38629436, 1.09861229], [0.0, 0.0]]]]> : tensor<1x1x9x2xf32>
  %v = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0], [4.0, -4.0],
                               [5.0, -5.0], [6.0, -6.0], [7.0, -7.0], [8.0, -8.0]]]]> : tensor<1x1x9x2xf32>

  %k1, %v1, %i1 = snapkv.select %q, %k, %v window 1 capacity 5 kernel 3 scale 1.0
    : (tensor<1x2x1x2xf32>, tensor<1x1x9x2xf32>, tensor<1x1x9x2xf32>)
    -> (tensor<1x2x5x2xf32>, tensor<1x2x5x2xf32>, tensor<1x2x5xi64>)
  // CHECK: sizes = [1, 2, 5]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 2, 3, 8],
  // CHECK-NEXT: {{^}}  [1, 2, 3, 4, 8]]]
  %i1u = tensor.cast %i1 : tensor<1x2x5xi64> to tensor<*xi64>
  call @print_i64(%i1u) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 2, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [8, -8]],
  // CHECK-NEXT: {{^}}  {{\[\[}}1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [4, -4],
  // CHECK-NEXT: {{^}}   [8, -8]]]]
  %v1u = tensor.cast %v1 : tensor<1x2x5x2xf32> to tensor<*xf32>
  call @print_f32(%v1u) : (tensor<*xf32>) -> ()

  %k2, %v2, %i2 = snapkv.select %q, %k, %v window 1 capacity 5 kernel 3 order score scale 1.0
    : (tensor<1x2x1x2xf32>, tensor<1x1x9x2xf32>, tensor<1x1x9x2xf32>)
    -> (tensor<1x2x5x2xf32>, tensor<1x2x5x2xf32>, tensor<1x2x5xi64>)
  // CHECK: sizes = [1, 2, 5]
  // CHECK-NEXT: {{^\[\[\[}}1, 2, 3, 0, 8],
  // CHECK-NEXT: {{^}}  [3, 2, 4, 1, 8]]]
  %i2u = tensor.cast %i2 : tensor<1x2x5xi64> to tensor<*xi64>
  call @print_i64(%i2u) : (tensor<*xi64>) -> ()
  // Keys follow the same order (head 1 rows 3, 2, 4, 1, 8).
  // CHECK: sizes = [1, 2, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1.38629, 0],
  // CHECK-NEXT: {{^}}   [2.19722, 2.19722],
  // CHECK-NEXT: {{^}}   [0.693147, 2.07944],
  // CHECK-NEXT: {{^}}   [1.60944, 0],
  // CHECK-NEXT: {{^}}   [0, 0]],
  // CHECK-NEXT: {{^}}  {{\[\[}}0.693147, 2.07944],
  // CHECK-NEXT: {{^}}   [2.19722, 2.19722],
  // CHECK-NEXT: {{^}}   [0, 1.38629],
  // CHECK-NEXT: {{^}}   [1.38629, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  %k2u = tensor.cast %k2 : tensor<1x2x5x2xf32> to tensor<*xf32>
  call @print_f32(%k2u) : (tensor<*xf32>) -> ()
  // CHECK: sizes = [1, 2, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [8, -8]],
  // CHECK-NEXT: {{^}}  {{\[\[}}3, -3],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [4, -4],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [8, -8]]]]
  %v2u = tensor.cast %v2 : tensor<1x2x5x2xf32> to tensor<*xf32>
  call @print_f32(%v2u) : (tensor<*xf32>) -> ()
  return
}
