// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// `block B` (docs/semantics.md, step 3, "Blocks"): blocks of B prefix positions from
// position 0 rank by the sum of their pooled scores and are kept whole.
//
// Input 1 is the seed's worked example (worked_example.mlir): L = 8, W = 2, P = 6,
// kernel 3, avg, pooled = [0.06564, 0.30154, 0.53590, 0.52256, 0.31282, 0.05231]
// (block 1 keeps [2, 3, 4]).
//   block 3, C = 5: blocks [0, 1, 2] = 0.90308 > [3, 4, 5] = 0.88769 -> [0, 1, 2] + [6, 7].
//   block 2, C = 6: [0, 1] = 0.36718, [2, 3] = 1.05846, [4, 5] = 0.36513
//     -> [2, 3] and [0, 1] (0.36718 > 0.36513); order score lists [2, 3] first.
//   snapkv.score ... block 2 returns each position's block sum as `pooled`.
// Input 2 (kernel 1, so pooled = votes): exp-weights a = [1, 1, 2, 2, 10, 10, 1, -] (sum 27)
// and b = [1, 1, 2, 2, 10, 10, 1, 1] (sum 28), votes = [0.07275, 0.07275, 0.14550, 0.14550,
// 0.72751, 0.72751]. block 1, C = 6 keeps the top four: [2, 3, 4, 5].
//   block 4, C = 6: blocks [0, 1, 2, 3] = 0.43651 and the short last block [4, 5] = 1.45503.
//   The short block ranks first and is kept whole; the 2 slots it leaves go to the lowest
//   positions of the next block: [0, 1, 4, 5] + [6, 7] (order score: [4, 5, 0, 1, 6, 7]).

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print5(%t: tensor<1x1x5xi64>) {
  %m = bufferization.to_buffer %t : tensor<1x1x5xi64> to memref<1x1x5xi64>
  %u = memref.cast %m : memref<1x1x5xi64> to memref<*xi64>
  call @printMemrefI64(%u) : (memref<*xi64>) -> ()
  return
}

func.func @print6(%t: tensor<1x1x6xi64>) {
  %m = bufferization.to_buffer %t : tensor<1x1x6xi64> to memref<1x1x6xi64>
  %u = memref.cast %m : memref<1x1x6xi64> to memref<*xi64>
  call @printMemrefI64(%u) : (memref<*xi64>) -> ()
  return
}

func.func @print_scores(%t: tensor<1x1x6xf32>) {
  %m = bufferization.to_buffer %t : tensor<1x1x6xf32> to memref<1x1x6xf32>
  %u = memref.cast %m : memref<1x1x6xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @print_rows(%t: tensor<1x1x6x2xf32>) {
  %m = bufferization.to_buffer %t : tensor<1x1x6x2xf32> to memref<1x1x6x2xf32>
  %u = memref.cast %m : memref<1x1x6x2xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %q = arith.constant dense<[[[[1.4142135623730951, 0.0], [0.0, 1.4142135623730951]]]]> : tensor<1x1x2x2xf32>
  %k = arith.constant dense<[[[[0.0, 0.0], [0.6931471805599453, 0.0], [2.302585092994046, 2.0794415416798357], [2.0794415416798357, 2.4849066497880004], [0.0, 0.0], [0.0, 0.0], [0.6931471805599453, 0.0], [0.0, 0.0]]]]> : tensor<1x1x8x2xf32>
  %v = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0],
                               [4.0, -4.0], [5.0, -5.0], [6.0, -6.0], [7.0, -7.0]]]]> : tensor<1x1x8x2xf32>

  %k3, %v3, %i3 = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3 block 3
    : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
    -> (tensor<1x1x5x2xf32>, tensor<1x1x5x2xf32>, tensor<1x1x5xi64>)
  // CHECK: rank = 3 offset = 0 sizes = [1, 1, 5]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 2, 6, 7]]]
  call @print5(%i3) : (tensor<1x1x5xi64>) -> ()

  %k2, %v2, %i2 = snapkv.select %q, %k, %v window 2 capacity 6 kernel 3 block 2
    : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
    -> (tensor<1x1x6x2xf32>, tensor<1x1x6x2xf32>, tensor<1x1x6xi64>)
  // CHECK: rank = 3 offset = 0 sizes = [1, 1, 6]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 2, 3, 6, 7]]]
  call @print6(%i2) : (tensor<1x1x6xi64>) -> ()
  // The values of the kept rows, gathered with the same indices.
  // CHECK: rank = 4 offset = 0 sizes = [1, 1, 6, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [6, -6],
  // CHECK-NEXT: {{^}}   [7, -7]]]]
  call @print_rows(%v2) : (tensor<1x1x6x2xf32>) -> ()

  %k2s, %v2s, %i2s = snapkv.select %q, %k, %v window 2 capacity 6 kernel 3 order score block 2
    : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
    -> (tensor<1x1x6x2xf32>, tensor<1x1x6x2xf32>, tensor<1x1x6xi64>)
  // CHECK: rank = 3 offset = 0 sizes = [1, 1, 6]
  // CHECK-NEXT: {{^\[\[\[}}2, 3, 0, 1, 6, 7]]]
  call @print6(%i2s) : (tensor<1x1x6xi64>) -> ()

  %votes0 = tensor.empty() : tensor<1x1x6xf32>
  %pooled0 = tensor.empty() : tensor<1x1x6xf32>
  %votes, %pooled = snapkv.score %q, %k window 2 kernel 3 block 2
      outs(%votes0, %pooled0 : tensor<1x1x6xf32>, tensor<1x1x6xf32>)
      : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>) -> (tensor<1x1x6xf32>, tensor<1x1x6xf32>)
  // The votes are not summed; the pooled scores are, per block.
  // CHECK: [0.0784615, 0.118462, 0.707692, 0.781539, 0.0784615, 0.0784615]
  call @print_scores(%votes) : (tensor<1x1x6xf32>) -> ()
  // CHECK: [0.367179, 0.367179, 1.05846, 1.05846, 0.365128, 0.365128]
  call @print_scores(%pooled) : (tensor<1x1x6xf32>) -> ()

  // Input 2: [ln a_j, ln b_j]; ln 2 = 0.6931471805599453, ln 10 = 2.302585092994046.
  %kb = arith.constant dense<[[[[0.0, 0.0], [0.0, 0.0], [0.6931471805599453, 0.6931471805599453],
                                [0.6931471805599453, 0.6931471805599453],
                                [2.302585092994046, 2.302585092994046],
                                [2.302585092994046, 2.302585092994046],
                                [0.0, 0.0], [0.0, 0.0]]]]> : tensor<1x1x8x2xf32>
  %k1, %v1, %i1 = snapkv.select %q, %kb, %v window 2 capacity 6 kernel 1
    : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
    -> (tensor<1x1x6x2xf32>, tensor<1x1x6x2xf32>, tensor<1x1x6xi64>)
  // CHECK: rank = 3 offset = 0 sizes = [1, 1, 6]
  // CHECK-NEXT: {{^\[\[\[}}2, 3, 4, 5, 6, 7]]]
  call @print6(%i1) : (tensor<1x1x6xi64>) -> ()
  %k4, %v4, %i4 = snapkv.select %q, %kb, %v window 2 capacity 6 kernel 1 block 4
    : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
    -> (tensor<1x1x6x2xf32>, tensor<1x1x6x2xf32>, tensor<1x1x6xi64>)
  // CHECK: rank = 3 offset = 0 sizes = [1, 1, 6]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 4, 5, 6, 7]]]
  call @print6(%i4) : (tensor<1x1x6xi64>) -> ()
  %k4s, %v4s, %i4s = snapkv.select %q, %kb, %v window 2 capacity 6 kernel 1 order score block 4
    : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
    -> (tensor<1x1x6x2xf32>, tensor<1x1x6x2xf32>, tensor<1x1x6xi64>)
  // CHECK: rank = 3 offset = 0 sizes = [1, 1, 6]
  // CHECK-NEXT: {{^\[\[\[}}4, 5, 0, 1, 6, 7]]]
  call @print6(%i4s) : (tensor<1x1x6xi64>) -> ()
  return
}
