// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// The seed's worked example (docs/semantics.md, a worked example), computed from Q and K, not from preset scores.
//
// L = 8, W = 2 (window = positions 6, 7), P = 6, C = 5 (three prefix positions are kept),
// D = 2, default scale 1/sqrt(2), kernel 3, avg pooling.
//   keys[j]   = [ln a_j, ln b_j], a = [1, 2, 10, 8, 1, 1, 2, 1], b = [1, 1, 8, 12, 1, 1, 1, 1]
//   q6 = [sqrt2, 0], q7 = [0, sqrt2]    (so logit[t][j] = ln a_j resp. ln b_j: exp gives a, b)
//   values[j] = [j, -j]
// Visible exp-weights (position 7 is masked for query 6):
//   query 6: 1 2 10  8 1 1 2 -   sum 25
//   query 7: 1 1  8 12 1 1 1 1   sum 26
// votes[j] = a_j/25 + b_j/26 for j < 6:
//   [0.07846, 0.11846, 0.70769, 0.78154, 0.07846, 0.07846]
// avg pooling, kernel 3, out-of-range neighbours count as 0, always divided by 3:
//   pooled = [0.06564, 0.30154, 0.53590, 0.52256, 0.31282, 0.05231]
// Top-3 of the pooled prefix: 2 (0.5359) > 3 (0.5226) > 4 (0.3128) > 1 (0.3015).
// Kept: [2, 3, 4] + window [6, 7]. Raw votes would pick [1, 2, 3] (3 > 2 > 1), so a lowering that
// skips pooling, or pools with the default kernel 5 instead of 3 (pooled [.181 .337 .353 .353
// .329 .188] -> [1, 2, 3]), fails here. The score order of the prefix is also 2, 3, 4 (descending
// pooled score), so `order score` prints the same list here (order.mlir has an input where the
// two orders differ).
// Keys and values must be gathered with the same index list, as bit-identical copies: the keys
// are also printed as raw f32 bit patterns (arith.bitcast to i32), e.g. ln 10 = 0x40135D8E =
// 1075010958, ln 8 = 0x400515A2 = 1074075026, ln 12 = 0x401F0B16 = 1075775670,
// ln 2 = 0x3F317218 = 1060205080.

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}
func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print_idx(%t: tensor<1x1x5xi64>) {
  %m = bufferization.to_buffer %t : tensor<1x1x5xi64> to memref<1x1x5xi64>
  %u = memref.cast %m : memref<1x1x5xi64> to memref<*xi64>
  call @printMemrefI64(%u) : (memref<*xi64>) -> ()
  return
}

func.func @print_rows(%t: tensor<1x1x5x2xf32>) {
  %m = bufferization.to_buffer %t : tensor<1x1x5x2xf32> to memref<1x1x5x2xf32>
  %u = memref.cast %m : memref<1x1x5x2xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @print_bits(%t: tensor<1x1x5x2xf32>) {
  %b = arith.bitcast %t : tensor<1x1x5x2xf32> to tensor<1x1x5x2xi32>
  %m = bufferization.to_buffer %b : tensor<1x1x5x2xi32> to memref<1x1x5x2xi32>
  %u = memref.cast %m : memref<1x1x5x2xi32> to memref<*xi32>
  call @printMemrefI32(%u) : (memref<*xi32>) -> ()
  return
}

func.func @main() {
  %q = arith.constant dense<[[[[1.41421356, 0.0], [0.0, 1.41421356]]]]> : tensor<1x1x2x2xf32>
  // [ln a_j, ln b_j]; ln 1 = 0, ln 2 = 0.69314718, ln 8 = 2.07944154, ln 10 = 2.30258509,
  // ln 12 = 2.48490665.
  %k = arith.constant dense<[[[[0.0, 0.0], [0.69314718, 0.0], [2.30258509, 2.07944154],
                               [2.07944154, 2.48490665], [0.0, 0.0], [0.0, 0.0],
                               [0.69314718, 0.0], [0.0, 0.0]]]]> : tensor<1x1x8x2xf32>
  %v = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0],
                               [4.0, -4.0], [5.0, -5.0], [6.0, -6.0], [7.0, -7.0]]]]> : tensor<1x1x8x2xf32>

  %ko, %vo, %idx = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3
    : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
    -> (tensor<1x1x5x2xf32>, tensor<1x1x5x2xf32>, tensor<1x1x5xi64>)
  // CHECK: rank = 3 offset = 0 sizes = [1, 1, 5]
  // CHECK-NEXT: {{^\[\[\[}}2, 3, 4, 6, 7]]]
  call @print_idx(%idx) : (tensor<1x1x5xi64>) -> ()
  // Keys rows 2, 3, 4, 6, 7 (printed with 6 significant digits, then as exact bits).
  // CHECK: rank = 4 offset = 0 sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2.30259, 2.07944],
  // CHECK-NEXT: {{^}}   [2.07944, 2.48491],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [0.693147, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  call @print_rows(%ko) : (tensor<1x1x5x2xf32>) -> ()
  // CHECK: rank = 4 offset = 0 sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1075010958, 1074075026],
  // CHECK-NEXT: {{^}}   [1074075026, 1075775670],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [1060205080, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  call @print_bits(%ko) : (tensor<1x1x5x2xf32>) -> ()
  // Values rows 2, 3, 4, 6, 7 = [j, -j]: the same index list as the keys.
  // CHECK: rank = 4 offset = 0 sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2, -2],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [4, -4],
  // CHECK-NEXT: {{^}}   [6, -6],
  // CHECK-NEXT: {{^}}   [7, -7]]]]
  call @print_rows(%vo) : (tensor<1x1x5x2xf32>) -> ()

  // order score: prefix by descending pooled score (2 > 3 > 4), then the window.
  %ko2, %vo2, %idx2 = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3 order score
    : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
    -> (tensor<1x1x5x2xf32>, tensor<1x1x5x2xf32>, tensor<1x1x5xi64>)
  // CHECK: rank = 3 offset = 0 sizes = [1, 1, 5]
  // CHECK-NEXT: {{^\[\[\[}}2, 3, 4, 6, 7]]]
  call @print_idx(%idx2) : (tensor<1x1x5xi64>) -> ()
  // CHECK: rank = 4 offset = 0 sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2, -2],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [4, -4],
  // CHECK-NEXT: {{^}}   [6, -6],
  // CHECK-NEXT: {{^}}   [7, -7]]]]
  call @print_rows(%vo2) : (tensor<1x1x5x2xf32>) -> ()
  return
}
