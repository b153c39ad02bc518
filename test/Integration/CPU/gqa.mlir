// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// GQA policies (docs/semantics.md, step 2). Query head h reads kv head h / G (HuggingFace repeat_kv order).
// `expand`: one selection per query head, Hc = Hq heads; `mean` / `max`: the votes of the G
// query heads of a kv head are averaged / maxed BEFORE pooling, Hc = Hkv heads.
// Values encode (kv head, position): kv head 0 row j = [j, -j], kv head 1 row j = [10+j, -(10+j)],
// so a wrong head mapping (e.g. h % Hkv instead of h / G) shows up in the gathered rows even
// where the indices happen to agree.

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
  // Case 1: Hq = 4, Hkv = 2 (G = 2), W = 1, L = 4, P = 3, C = 2 (one prefix position kept),
  // kernel 1, `scale 1.0`, D = 2. Queries: heads 0, 2 = [1, 0], heads 1, 3 = [0, 1].
  // kv head 0 keys [ln a_j, ln b_j], a = [12, 1, 6 | 1], b = [1, 10, 8 | 1]
  // kv head 1 keys [ln c_j, ln d_j], c = [6, 1, 12 | 1], d = [8, 10, 1 | 1]   (all sums 20)
  //   head 0 (kv 0, a): votes [0.60, 0.05, 0.30] -> 0
  //   head 1 (kv 0, b): votes [0.05, 0.50, 0.40] -> 1
  //   head 2 (kv 1, c): votes [0.30, 0.05, 0.60] -> 2
  //   head 3 (kv 1, d): votes [0.40, 0.50, 0.05] -> 1
  //   mean kv 0: [0.325, 0.275, 0.35] -> 2     max kv 0: [0.6, 0.5, 0.4] -> 0
  //   mean kv 1: [0.35, 0.275, 0.325] -> 0     max kv 1: [0.4, 0.5, 0.6] -> 2
  // With the wrong mapping h % 2, head 2 would read kv 0 (votes a/20 -> 0, values [0, 0]).
  // ln 12 = 2.48490665, ln 10 = 2.30258509, ln 8 = 2.07944154, ln 6 = 1.79175947
  %q = arith.constant dense<[[[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 0.0]], [[0.0, 1.0]]]]> : tensor<1x4x1x2xf32>
  %k = arith.constant dense<[[[[2.48490665, 0.0], [0.0, 2.30258509], [1.79175947, 2.07944154], [0.0, 0.0]],
                              [[1.79175947, 2.07944154], [0.0, 2.30258509], [2.48490665, 0.0], [0.0, 0.0]]]]>
      : tensor<1x2x4x2xf32>
  %v = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0]],
                              [[10.0, -10.0], [11.0, -11.0], [12.0, -12.0], [13.0, -13.0]]]]>
      : tensor<1x2x4x2xf32>

  // expand: Hc = 4.
  %k1, %v1, %i1 = snapkv.select %q, %k, %v window 1 capacity 2 kernel 1 scale 1.0
    : (tensor<1x4x1x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>)
    -> (tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>, tensor<1x4x2xi64>)
  // CHECK: sizes = [1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[}}0, 3],
  // CHECK-NEXT: {{^}}  [1, 3],
  // CHECK-NEXT: {{^}}  [2, 3],
  // CHECK-NEXT: {{^}}  [1, 3]]]
  %i1u = tensor.cast %i1 : tensor<1x4x2xi64> to tensor<*xi64>
  call @print_i64(%i1u) : (tensor<*xi64>) -> ()
  // keys: head 0 = kv 0 rows 0, 3; head 1 = kv 0 rows 1, 3; head 2 = kv 1 rows 2, 3;
  // head 3 = kv 1 rows 1, 3.
  // CHECK: sizes = [1, 4, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2.48491, 0],
  // CHECK-NEXT: {{^}}   [0, 0]],
  // CHECK-NEXT: {{^}}  {{\[\[}}0, 2.30259],
  // CHECK-NEXT: {{^}}   [0, 0]],
  // CHECK-NEXT: {{^}}  {{\[\[}}2.48491, 0],
  // CHECK-NEXT: {{^}}   [0, 0]],
  // CHECK-NEXT: {{^}}  {{\[\[}}0, 2.30259],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  %k1u = tensor.cast %k1 : tensor<1x4x2x2xf32> to tensor<*xf32>
  call @print_f32(%k1u) : (tensor<*xf32>) -> ()
  // CHECK: sizes = [1, 4, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [3, -3]],
  // CHECK-NEXT: {{^}}  {{\[\[}}1, -1],
  // CHECK-NEXT: {{^}}   [3, -3]],
  // CHECK-NEXT: {{^}}  {{\[\[}}12, -12],
  // CHECK-NEXT: {{^}}   [13, -13]],
  // CHECK-NEXT: {{^}}  {{\[\[}}11, -11],
  // CHECK-NEXT: {{^}}   [13, -13]]]]
  %v1u = tensor.cast %v1 : tensor<1x4x2x2xf32> to tensor<*xf32>
  call @print_f32(%v1u) : (tensor<*xf32>) -> ()

  // mean: Hc = 2, kv 0 keeps 2, kv 1 keeps 0.
  %k2, %v2, %i2 = snapkv.select %q, %k, %v window 1 capacity 2 kernel 1 gqa mean scale 1.0
    : (tensor<1x4x1x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>)
    -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>, tensor<1x2x2xi64>)
  // CHECK: sizes = [1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[}}2, 3],
  // CHECK-NEXT: {{^}}  [0, 3]]]
  %i2u = tensor.cast %i2 : tensor<1x2x2xi64> to tensor<*xi64>
  call @print_i64(%i2u) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 2, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1.79176, 2.07944],
  // CHECK-NEXT: {{^}}   [0, 0]],
  // CHECK-NEXT: {{^}}  {{\[\[}}1.79176, 2.07944],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  %k2u = tensor.cast %k2 : tensor<1x2x2x2xf32> to tensor<*xf32>
  call @print_f32(%k2u) : (tensor<*xf32>) -> ()
  // CHECK: sizes = [1, 2, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2, -2],
  // CHECK-NEXT: {{^}}   [3, -3]],
  // CHECK-NEXT: {{^}}  {{\[\[}}10, -10],
  // CHECK-NEXT: {{^}}   [13, -13]]]]
  %v2u = tensor.cast %v2 : tensor<1x2x2x2xf32> to tensor<*xf32>
  call @print_f32(%v2u) : (tensor<*xf32>) -> ()

  // max: Hc = 2, kv 0 keeps 0, kv 1 keeps 2.
  %k3, %v3, %i3 = snapkv.select %q, %k, %v window 1 capacity 2 kernel 1 gqa max scale 1.0
    : (tensor<1x4x1x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>)
    -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>, tensor<1x2x2xi64>)
  // CHECK: sizes = [1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[}}0, 3],
  // CHECK-NEXT: {{^}}  [2, 3]]]
  %i3u = tensor.cast %i3 : tensor<1x2x2xi64> to tensor<*xi64>
  call @print_i64(%i3u) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 2, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [3, -3]],
  // CHECK-NEXT: {{^}}  {{\[\[}}12, -12],
  // CHECK-NEXT: {{^}}   [13, -13]]]]
  %v3u = tensor.cast %v3 : tensor<1x2x2x2xf32> to tensor<*xf32>
  call @print_f32(%v3u) : (tensor<*xf32>) -> ()

  // Case 2: `gqa max` aggregates BEFORE pooling. Hq = 2, Hkv = 1, W = 1, L = 6, P = 5,
  // C = 2 (one prefix position kept), kernel 3 avg, `scale 1.0`. Head 0 = [1, 0], head 1 = [0, 1],
  // keys [ln a_j, ln b_j], a = [2, 8, 8, 8, 1 | 1] (sum 28), b = [2, 2, 2, 1, 8 | 1] (sum 16).
  //   va = a/28 = [.0714, .2857, .2857, .2857, .0357], vb = b/16 = [.125, .125, .125, .0625, .5]
  //   max then pool: max = [.125, .2857, .2857, .2857, .5]
  //                  pooled = [.1369, .2321, .2857, .3571, .2619]  -> 3: [3, 5]
  //   pool then max (wrong): pool(va) = [.1190, .2143, .2857, .2024, .1071],
  //                  pool(vb) = [.0833, .1250, .1042, .2292, .1875],
  //                  max = [.1190, .2143, .2857, .2292, .1875]  -> 2
  %qb = arith.constant dense<[[[[1.0, 0.0]], [[0.0, 1.0]]]]> : tensor<1x2x1x2xf32>
  %kb = arith.constant dense<[[[[0.69314718, 0.69314718], [2.07944154, 0.69314718], [2.07944154, 0.69314718],
                                [2.07944154, 0.0], [0.0, 2.07944154], [0.0, 0.0]]]]> : tensor<1x1x6x2xf32>
  %vb = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0],
                                [4.0, -4.0], [5.0, -5.0]]]]> : tensor<1x1x6x2xf32>
  %k4, %v4, %i4 = snapkv.select %qb, %kb, %vb window 1 capacity 2 kernel 3 gqa max scale 1.0
    : (tensor<1x2x1x2xf32>, tensor<1x1x6x2xf32>, tensor<1x1x6x2xf32>)
    -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2xi64>)
  // CHECK: sizes = [1, 1, 2]
  // CHECK-NEXT: {{^\[\[\[}}3, 5]]]
  %i4u = tensor.cast %i4 : tensor<1x1x2xi64> to tensor<*xi64>
  call @print_i64(%i4u) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}3, -3],
  // CHECK-NEXT: {{^}}   [5, -5]]]]
  %v4u = tensor.cast %v4 : tensor<1x1x2x2xf32> to tensor<*xf32>
  call @print_f32(%v4u) : (tensor<*xf32>) -> ()
  return
}
