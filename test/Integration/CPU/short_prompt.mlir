// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// Short prompts (docs/semantics.md, step 6): if L < C nothing is selected and all L positions are kept in
// ascending order (whatever `order` says), so S = min(L, C); L == C still runs the selection,
// which then keeps every position but, with `order score`, lists the prefix by descending score.
// W == L implies L < C (the verifier requires capacity > window), so it always bypasses.
// The GQA head layout is not undone by the bypass: `expand` still yields Hq heads (each query
// head copies kv head h / G), `mean` / `max` yield Hkv heads.

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
  // Case 1: L = 4 < C = 5, W = 2, Hq = 2, Hkv = 1, `order score`. If a selection ran, the
  // queries [1, 0] would rank key 1 (exp-weight 8) above key 0 (weight 1) and score order would
  // print [1, 0, 2, 3] (and a top-3 of a 2-long prefix would read out of range); the bypass
  // keeps [0, 1, 2, 3] for both query heads, keys and values copied in order.
  %q1 = arith.constant dense<[[[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]]]> : tensor<1x2x2x2xf32>
  %k1 = arith.constant dense<[[[[0.0, 0.5], [2.07944154, 1.5], [0.0, 2.5], [0.0, 3.5]]]]> : tensor<1x1x4x2xf32>
  %v1 = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0]]]]> : tensor<1x1x4x2xf32>
  %ka, %va, %ia = snapkv.select %q1, %k1, %v1 window 2 capacity 5 order score
    : (tensor<1x2x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>)
    -> (tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4xi64>)
  // CHECK: sizes = [1, 2, 4]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 2, 3],
  // CHECK-NEXT: {{^}}  [0, 1, 2, 3]]]
  %iau = tensor.cast %ia : tensor<1x2x4xi64> to tensor<*xi64>
  call @print_i64(%iau) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 2, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0.5],
  // CHECK-NEXT: {{^}}   [2.07944, 1.5],
  // CHECK-NEXT: {{^}}   [0, 2.5],
  // CHECK-NEXT: {{^}}   [0, 3.5]],
  // CHECK-NEXT: {{^}}  {{\[\[}}0, 0.5],
  // CHECK-NEXT: {{^}}   [2.07944, 1.5],
  // CHECK-NEXT: {{^}}   [0, 2.5],
  // CHECK-NEXT: {{^}}   [0, 3.5]]]]
  %kau = tensor.cast %ka : tensor<1x2x4x2xf32> to tensor<*xf32>
  call @print_f32(%kau) : (tensor<*xf32>) -> ()
  // CHECK: sizes = [1, 2, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3]],
  // CHECK-NEXT: {{^}}  {{\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3]]]]
  %vau = tensor.cast %va : tensor<1x2x4x2xf32> to tensor<*xf32>
  call @print_f32(%vau) : (tensor<*xf32>) -> ()

  // Same input, `gqa mean`: one cache head (Hkv = 1), still [0, 1, 2, 3].
  %kb, %vb, %ib = snapkv.select %q1, %k1, %v1 window 2 capacity 5 gqa mean order score
    : (tensor<1x2x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>)
    -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  // CHECK: sizes = [1, 1, 4]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 2, 3]]]
  %ibu = tensor.cast %ib : tensor<1x1x4xi64> to tensor<*xi64>
  call @print_i64(%ibu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3]]]]
  %vbu = tensor.cast %vb : tensor<1x1x4x2xf32> to tensor<*xf32>
  call @print_f32(%vbu) : (tensor<*xf32>) -> ()

  // Case 2: L == C = 5, W = 2, P = 3, kernel 1, `order score`: the selection runs and keeps
  // all three prefix positions, listed by descending vote.
  //   q3 = [1, 0], q4 = [0, 1], keys[j] = [ln w_j, ln w_j], w = [4, 1, 8, 1, 1], scale 1.0
  //   query 3: weights 4 1 8 1 (-) sum 14; query 4: 4 1 8 1 1 sum 15
  //   votes = [4/14 + 4/15, 1/14 + 1/15, 8/14 + 8/15] -> 2 > 0 > 1
  // score order: [2, 0, 1, 3, 4]; a bypass taken at L == C (`L <= C`) would print
  // [0, 1, 2, 3, 4]. `order position` prints [0, 1, 2, 3, 4] either way.
  %q2 = arith.constant dense<[[[[1.0, 0.0], [0.0, 1.0]]]]> : tensor<1x1x2x2xf32>
  %k2 = arith.constant dense<[[[[1.38629436, 1.38629436], [0.0, 0.0], [2.07944154, 2.07944154],
                                [0.0, 0.0], [0.0, 0.0]]]]> : tensor<1x1x5x2xf32>
  %v2 = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0], [4.0, -4.0]]]]> : tensor<1x1x5x2xf32>
  %kc, %vc, %ic = snapkv.select %q2, %k2, %v2 window 2 capacity 5 kernel 1 order score scale 1.0
    : (tensor<1x1x2x2xf32>, tensor<1x1x5x2xf32>, tensor<1x1x5x2xf32>)
    -> (tensor<1x1x5x2xf32>, tensor<1x1x5x2xf32>, tensor<1x1x5xi64>)
  // CHECK: sizes = [1, 1, 5]
  // CHECK-NEXT: {{^\[\[\[}}2, 0, 1, 3, 4]]]
  %icu = tensor.cast %ic : tensor<1x1x5xi64> to tensor<*xi64>
  call @print_i64(%icu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2.07944, 2.07944],
  // CHECK-NEXT: {{^}}   [1.38629, 1.38629],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  %kcu = tensor.cast %kc : tensor<1x1x5x2xf32> to tensor<*xf32>
  call @print_f32(%kcu) : (tensor<*xf32>) -> ()
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2, -2],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [4, -4]]]]
  %vcu = tensor.cast %vc : tensor<1x1x5x2xf32> to tensor<*xf32>
  call @print_f32(%vcu) : (tensor<*xf32>) -> ()
  %kd, %vd, %id = snapkv.select %q2, %k2, %v2 window 2 capacity 5 kernel 1 scale 1.0
    : (tensor<1x1x2x2xf32>, tensor<1x1x5x2xf32>, tensor<1x1x5x2xf32>)
    -> (tensor<1x1x5x2xf32>, tensor<1x1x5x2xf32>, tensor<1x1x5xi64>)
  // CHECK: sizes = [1, 1, 5]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 2, 3, 4]]]
  %idu = tensor.cast %id : tensor<1x1x5xi64> to tensor<*xi64>
  call @print_i64(%idu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, 0],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [4, -4]]]]
  %vdu = tensor.cast %vd : tensor<1x1x5x2xf32> to tensor<*xf32>
  call @print_f32(%vdu) : (tensor<*xf32>) -> ()

  // Case 3: W == L = 2 (P = 0), C = 3: bypass, [0, 1]. Hq = 2, Hkv = 1: `expand` gives two
  // heads, `max` one.
  %q3 = arith.constant dense<[[[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]]]> : tensor<1x2x2x2xf32>
  %k3 = arith.constant dense<[[[[0.25, -0.5], [0.75, 1.25]]]]> : tensor<1x1x2x2xf32>
  %v3 = arith.constant dense<[[[[10.0, -10.0], [11.0, -11.0]]]]> : tensor<1x1x2x2xf32>
  %ke, %ve, %ie = snapkv.select %q3, %k3, %v3 window 2 capacity 3 order score
    : (tensor<1x2x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>)
    -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>, tensor<1x2x2xi64>)
  // CHECK: sizes = [1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[}}0, 1],
  // CHECK-NEXT: {{^}}  [0, 1]]]
  %ieu = tensor.cast %ie : tensor<1x2x2xi64> to tensor<*xi64>
  call @print_i64(%ieu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 2, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0.25, -0.5],
  // CHECK-NEXT: {{^}}   [0.75, 1.25]],
  // CHECK-NEXT: {{^}}  {{\[\[}}0.25, -0.5],
  // CHECK-NEXT: {{^}}   [0.75, 1.25]]]]
  %keu = tensor.cast %ke : tensor<1x2x2x2xf32> to tensor<*xf32>
  call @print_f32(%keu) : (tensor<*xf32>) -> ()
  // CHECK: sizes = [1, 2, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}10, -10],
  // CHECK-NEXT: {{^}}   [11, -11]],
  // CHECK-NEXT: {{^}}  {{\[\[}}10, -10],
  // CHECK-NEXT: {{^}}   [11, -11]]]]
  %veu = tensor.cast %ve : tensor<1x2x2x2xf32> to tensor<*xf32>
  call @print_f32(%veu) : (tensor<*xf32>) -> ()
  %kf, %vf, %if = snapkv.select %q3, %k3, %v3 window 2 capacity 3 gqa max
    : (tensor<1x2x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>)
    -> (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2xi64>)
  // CHECK: sizes = [1, 1, 2]
  // CHECK-NEXT: {{^\[\[\[}}0, 1]]]
  %ifu = tensor.cast %if : tensor<1x1x2xi64> to tensor<*xi64>
  call @print_i64(%ifu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}10, -10],
  // CHECK-NEXT: {{^}}   [11, -11]]]]
  %vfu = tensor.cast %vf : tensor<1x1x2x2xf32> to tensor<*xf32>
  call @print_f32(%vfu) : (tensor<*xf32>) -> ()
  return
}
