// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// Border rules of the pooling (docs/semantics.md, step 3): `avg` always divides by the kernel size, counting
// out-of-range neighbours as 0 (avg_pool1d, count_include_pad=True); `max` takes the maximum of
// the in-range neighbours. Each input is run with both policies; avg, max and the wrong
// "divide by the number of in-range neighbours" avg each keep a different set, and the wrong avg
// would keep a border position that the correct avg does not.
//
// Both cases: W = 1 (one window query at position 6, it sees every column, no mask),
// L = 7, P = 6, C = 3 (two prefix positions kept), D = 2, `scale 1.0`, q = [1, 0],
// keys[j] = [ln w_j, 0] so the exp-weight of column j is w_j; w_6 = 1 (the window position).
// votes[j] = w_j / sum(w); the common factor 1/sum(w) does not change any ranking, so the
// scores below are given in units of w. values[j] = [j, -j].

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

func.func @values() -> tensor<1x1x7x2xf32> {
  %v = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0],
                               [4.0, -4.0], [5.0, -5.0], [6.0, -6.0]]]]> : tensor<1x1x7x2xf32>
  return %v : tensor<1x1x7x2xf32>
}

func.func @run_kernel3(%k: tensor<1x1x7x2xf32>) {
  %q = arith.constant dense<[[[[1.0, 0.0]]]]> : tensor<1x1x1x2xf32>
  %v = call @values() : () -> tensor<1x1x7x2xf32>
  %k1, %v1, %i1 = snapkv.select %q, %k, %v window 1 capacity 3 kernel 3 scale 1.0
    : (tensor<1x1x1x2xf32>, tensor<1x1x7x2xf32>, tensor<1x1x7x2xf32>)
    -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  call @print(%i1, %v1) : (tensor<1x1x3xi64>, tensor<1x1x3x2xf32>) -> ()
  %k2, %v2, %i2 = snapkv.select %q, %k, %v window 1 capacity 3 kernel 3 pooling max scale 1.0
    : (tensor<1x1x1x2xf32>, tensor<1x1x7x2xf32>, tensor<1x1x7x2xf32>)
    -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  call @print(%i2, %v2) : (tensor<1x1x3xi64>, tensor<1x1x3x2xf32>) -> ()
  return
}

func.func @run_kernel5(%k: tensor<1x1x7x2xf32>) {
  %q = arith.constant dense<[[[[1.0, 0.0]]]]> : tensor<1x1x1x2xf32>
  %v = call @values() : () -> tensor<1x1x7x2xf32>
  %k1, %v1, %i1 = snapkv.select %q, %k, %v window 1 capacity 3 scale 1.0
    : (tensor<1x1x1x2xf32>, tensor<1x1x7x2xf32>, tensor<1x1x7x2xf32>)
    -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  call @print(%i1, %v1) : (tensor<1x1x3xi64>, tensor<1x1x3x2xf32>) -> ()
  %k2, %v2, %i2 = snapkv.select %q, %k, %v window 1 capacity 3 pooling max scale 1.0
    : (tensor<1x1x1x2xf32>, tensor<1x1x7x2xf32>, tensor<1x1x7x2xf32>)
    -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  call @print(%i2, %v2) : (tensor<1x1x3xi64>, tensor<1x1x3x2xf32>) -> ()
  return
}

func.func @main() {
  // Case 1: left border, kernel 3. w = [12, 1, 1, 6, 6, 6 | 1].
  //   avg (/3, pad 0):          [13, 14, 8, 13, 18, 12] / 3 -> 4 (18), 1 (14)  -> [1, 4, 6]
  //   wrong avg (/in-range):    [13/2, 14/3, 8/3, 13/3, 18/3, 12/2]
  //                             = [6.5, 4.67, 2.67, 4.33, 6, 6]  -> 0, 4       -> [0, 4, 6]
  //   max (in range):           [12, 12, 6, 6, 6, 6]  -> exact tie 0, 1 (lower first) -> [0, 1, 6]
  // ln 12 = 2.48490665, ln 6 = 1.79175947
  %kl = arith.constant dense<[[[[2.48490665, 0.0], [0.0, 0.0], [0.0, 0.0], [1.79175947, 0.0],
                                [1.79175947, 0.0], [1.79175947, 0.0], [0.0, 0.0]]]]> : tensor<1x1x7x2xf32>
  // CHECK: sizes = [1, 1, 3]
  // CHECK-NEXT: {{^\[\[\[}}1, 4, 6]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1, -1],
  // CHECK-NEXT: {{^}}   [4, -4],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  // CHECK: sizes = [1, 1, 3]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 6]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  call @run_kernel3(%kl) : (tensor<1x1x7x2xf32>) -> ()

  // Case 2: right border, kernel 5 (two neighbours each side). w = [1, 2, 2, 1, 8, 8 | 1].
  //   avg (/5, pad 0):        p0 = (1+2+2)/5, p1 = (1+2+2+1)/5, p2 = (1+2+2+1+8)/5,
  //                           p3 = (2+2+1+8+8)/5, p4 = (2+1+8+8)/5, p5 = (1+8+8)/5
  //                           = [5, 6, 14, 21, 19, 17] / 5        -> 3, 4   -> [3, 4, 6]
  //   wrong avg (/in-range):  [5/3, 6/4, 14/5, 21/5, 19/4, 17/3]
  //                           = [1.67, 1.5, 2.8, 4.2, 4.75, 5.67] -> 5, 4   -> [4, 5, 6]
  //   max (in range):         [2, 2, 8, 8, 8, 8] -> exact tie, lowest two 2, 3 -> [2, 3, 6]
  // ln 2 = 0.69314718, ln 8 = 2.07944154
  %kr = arith.constant dense<[[[[0.0, 0.0], [0.69314718, 0.0], [0.69314718, 0.0], [0.0, 0.0],
                                [2.07944154, 0.0], [2.07944154, 0.0], [0.0, 0.0]]]]> : tensor<1x1x7x2xf32>
  // CHECK: sizes = [1, 1, 3]
  // CHECK-NEXT: {{^\[\[\[}}3, 4, 6]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}3, -3],
  // CHECK-NEXT: {{^}}   [4, -4],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  // CHECK: sizes = [1, 1, 3]
  // CHECK-NEXT: {{^\[\[\[}}2, 3, 6]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2, -2],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  call @run_kernel5(%kr) : (tensor<1x1x7x2xf32>) -> ()

  // Case 3: the padding is exactly 0, kernel 3. w = [0, 1, 1, 0, 1, 1 | 1] (weight 0: key
  // -1e30, exp underflows to exactly 0), so the votes are exactly 0 or v = 1/5 and every sum
  // of two v's and zeros is exact:
  //   avg (/3, pad 0):  [v, 2v, 2v, 2v, 2v, 2v] / 3 -> exact tie 1..5, lowest two 1, 2 -> [1, 2, 6]
  //   any pad p > 0 lifts the border position 5 to (2v + p) / 3, above the tie: [1, 5, 6]
  //   max (in range):   [v, v, v, v, v, v] -> exact tie, lowest two 0, 1       -> [0, 1, 6]
  %kz = arith.constant dense<[[[[-1.0e30, 0.0], [0.0, 0.0], [0.0, 0.0], [-1.0e30, 0.0],
                                [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]]]> : tensor<1x1x7x2xf32>
  // CHECK: sizes = [1, 1, 3]
  // CHECK-NEXT: {{^\[\[\[}}1, 2, 6]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  // CHECK: sizes = [1, 1, 3]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 6]]]
  // CHECK: sizes = [1, 1, 3, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  call @run_kernel3(%kz) : (tensor<1x1x7x2xf32>) -> ()
  return
}
