// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// Dynamic prompt length (docs/semantics.md, step 7): one function with `?` L dims, window 2, capacity 5,
// kernel 3, avg, `order score`, default scale 1/sqrt(2), is called with L = 8 (selects),
// L = 4 (L < C: bypass, S = 4), L = 5 (L == C: selects, keeps all) and L = 2 (L == W: the
// runtime check L >= window passes, bypass, S = 2; an off-by-one `L > W` check would abort). The result length
// S = min(L, C) is decided at run time and shows in the printed `sizes`. Using `order score`
// makes the three paths distinguishable: the bypass keeps ascending order, the L == C
// selection prints the prefix by score. Queries [sqrt2, 0] and [0, sqrt2] with keys
// [ln a_j, ln b_j] make the exp-weights a_j (first window query) and b_j (second).
// values[j] = [j, -j].

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @select_dyn(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x?x2xf32>, %v: tensor<1x1x?x2xf32>)
    -> (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3 order score
    : (tensor<1x1x2x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>)
    -> (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?xi64>)
  return %ko, %vo, %idx : tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?xi64>
}

func.func @run(%k: tensor<1x1x?x2xf32>, %v: tensor<1x1x?x2xf32>) {
  %q = arith.constant dense<[[[[1.41421356, 0.0], [0.0, 1.41421356]]]]> : tensor<1x1x2x2xf32>
  %ko, %vo, %idx = call @select_dyn(%q, %k, %v)
    : (tensor<1x1x2x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>)
    -> (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?xi64>)
  %iu = tensor.cast %idx : tensor<1x1x?xi64> to tensor<*xi64>
  %im = bufferization.to_buffer %iu : tensor<*xi64> to memref<*xi64>
  call @printMemrefI64(%im) : (memref<*xi64>) -> ()
  %ku = tensor.cast %ko : tensor<1x1x?x2xf32> to tensor<*xf32>
  %km = bufferization.to_buffer %ku : tensor<*xf32> to memref<*xf32>
  call @printMemrefF32(%km) : (memref<*xf32>) -> ()
  %vu = tensor.cast %vo : tensor<1x1x?x2xf32> to tensor<*xf32>
  %vm = bufferization.to_buffer %vu : tensor<*xf32> to memref<*xf32>
  call @printMemrefF32(%vm) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  // L = 8 >= C: the seed's worked example (see worked_example.mlir): pooled prefix scores
  // [0.0656, 0.3015, 0.5359, 0.5226, 0.3128, 0.0523] -> score order [2, 3, 4] + [6, 7].
  // a = [1, 2, 10, 8, 1, 1, 2, 1], b = [1, 1, 8, 12, 1, 1, 1, 1]
  %k8 = arith.constant dense<[[[[0.0, 0.0], [0.69314718, 0.0], [2.30258509, 2.07944154],
                                [2.07944154, 2.48490665], [0.0, 0.0], [0.0, 0.0],
                                [0.69314718, 0.0], [0.0, 0.0]]]]> : tensor<1x1x8x2xf32>
  %v8 = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0],
                                [4.0, -4.0], [5.0, -5.0], [6.0, -6.0], [7.0, -7.0]]]]> : tensor<1x1x8x2xf32>
  %k8d = tensor.cast %k8 : tensor<1x1x8x2xf32> to tensor<1x1x?x2xf32>
  %v8d = tensor.cast %v8 : tensor<1x1x8x2xf32> to tensor<1x1x?x2xf32>
  // CHECK: sizes = [1, 1, 5]
  // CHECK-NEXT: {{^\[\[\[}}2, 3, 4, 6, 7]]]
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2.30259, 2.07944],
  // CHECK-NEXT: {{^}}   [2.07944, 2.48491],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [0.693147, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2, -2],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [4, -4],
  // CHECK-NEXT: {{^}}   [6, -6],
  // CHECK-NEXT: {{^}}   [7, -7]]]]
  call @run(%k8d, %v8d) : (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>) -> ()

  // L = 4 < C = 5: bypass, S = 4, all positions in ascending order although key 1
  // (a_1 = b_1 = 8) would rank first if a selection ran with `order score`.
  %k4 = arith.constant dense<[[[[0.0, 0.0], [2.07944154, 2.07944154], [0.0, 0.0], [0.0, 0.0]]]]> : tensor<1x1x4x2xf32>
  %v4 = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0]]]]> : tensor<1x1x4x2xf32>
  %k4d = tensor.cast %k4 : tensor<1x1x4x2xf32> to tensor<1x1x?x2xf32>
  %v4d = tensor.cast %v4 : tensor<1x1x4x2xf32> to tensor<1x1x?x2xf32>
  // CHECK: sizes = [1, 1, 4]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 2, 3]]]
  // CHECK: sizes = [1, 1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [2.07944, 2.07944],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  // CHECK: sizes = [1, 1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3]]]]
  call @run(%k4d, %v4d) : (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>) -> ()

  // L = 5 == C: selection runs (P = 3, all three kept). a = [1, 1, 8, 1, -] (sum 11),
  // b = [1, 1, 8, 1, 1] (sum 12): votes v0 = v1 = 1/11 + 1/12, v2 = 8/11 + 8/12.
  // pooled: p0 = (v0 + v1)/3, p1 = (v0 + v1 + v2)/3, p2 = (v1 + v2)/3 -> p1 > p2 > p0,
  // so score order [1, 2, 0, 3, 4] (a bypass would print [0, 1, 2, 3, 4]).
  %k5 = arith.constant dense<[[[[0.0, 0.0], [0.0, 0.0], [2.07944154, 2.07944154], [0.0, 0.0], [0.0, 0.0]]]]> : tensor<1x1x5x2xf32>
  %v5 = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0], [4.0, -4.0]]]]> : tensor<1x1x5x2xf32>
  %k5d = tensor.cast %k5 : tensor<1x1x5x2xf32> to tensor<1x1x?x2xf32>
  %v5d = tensor.cast %v5 : tensor<1x1x5x2xf32> to tensor<1x1x?x2xf32>
  // CHECK: sizes = [1, 1, 5]
  // CHECK-NEXT: {{^\[\[\[}}1, 2, 0, 3, 4]]]
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [2.07944, 2.07944],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [4, -4]]]]
  call @run(%k5d, %v5d) : (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>) -> ()

  // L = 2 == W: P = 0, bypass, S = 2: [0, 1].
  %k2 = arith.constant dense<[[[[0.5, -0.25], [0.75, 1.5]]]]> : tensor<1x1x2x2xf32>
  %v2 = arith.constant dense<[[[[10.0, -10.0], [11.0, -11.0]]]]> : tensor<1x1x2x2xf32>
  %k2d = tensor.cast %k2 : tensor<1x1x2x2xf32> to tensor<1x1x?x2xf32>
  %v2d = tensor.cast %v2 : tensor<1x1x2x2xf32> to tensor<1x1x?x2xf32>
  // CHECK: sizes = [1, 1, 2]
  // CHECK-NEXT: {{^\[\[\[}}0, 1]]]
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0.5, -0.25],
  // CHECK-NEXT: {{^}}   [0.75, 1.5]]]]
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}10, -10],
  // CHECK-NEXT: {{^}}   [11, -11]]]]
  call @run(%k2d, %v2d) : (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>) -> ()
  return
}
