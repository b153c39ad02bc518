// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// snapkv.select_adaptive (docs/semantics.md, "Budgets"): one budget of Hc x (C - W)
// prefix positions per layer, ranked over all heads together (ties: lower head, then lower
// position), each head's floor first; rows packed head after head, with offsets.
// Two heads (gqa expand, G = 1), W = 1, L = 6, P = 5, C = 3: budget 2 x 2 = 4, kernel 1,
// `scale 1.0`, D = 2, keys[h, j] = [ln w, 0] for the query [1, 0] (exp-weight w), so:
//   head 0: w = [1, 1, 1, 1, 1 | 1]    -> every prefix vote 1/6 (exact ties)
//   head 1: w = [20, 10, 1, 10, 1 | 1] -> votes 20/43, 10/43, 1/43, 10/43, 1/43
// values[h, j] = [10 h + j, -(10 h + j)] name the head and the position.

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

func.func @values() -> tensor<1x2x6x2xf32> {
  %t = tensor.generate {
  ^bb0(%b: index, %h: index, %j: index, %d: index):
    %c10 = arith.constant 10 : index
    %c0 = arith.constant 0 : index
    %hj = arith.muli %h, %c10 : index
    %n = arith.addi %hj, %j : index
    %ni = arith.index_cast %n : index to i64
    %nf = arith.sitofp %ni : i64 to f32
    %first = arith.cmpi eq, %d, %c0 : index
    %neg = arith.negf %nf : f32
    %r = arith.select %first, %nf, %neg : f32
    tensor.yield %r : f32
  } : tensor<1x2x6x2xf32>
  return %t : tensor<1x2x6x2xf32>
}

func.func @main() {
  %q = arith.constant dense<[[[[1.0, 0.0]], [[1.0, 0.0]]]]> : tensor<1x2x1x2xf32>
  // ln 20 = 2.99573227, ln 10 = 2.30258509
  %k = arith.constant dense<[[[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
                              [[2.99573227, 0.0], [2.30258509, 0.0], [0.0, 0.0], [2.30258509, 0.0],
                               [0.0, 0.0], [0.0, 0.0]]]]> : tensor<1x2x6x2xf32>
  %v = call @values() : () -> tensor<1x2x6x2xf32>

  // No floor: the four best of all ten scores are head 1's 0, 1, 3 (1 and 3 tie exactly)
  // and head 0's 0 (its five exact ties at 1/6 go to the lowest position). Head 0 keeps
  // [0 | 5], head 1 [0, 1, 3 | 5]: offsets [0, 2, 6]. (A per-head budget would give both
  // heads two positions: [0, 1 | 5] and [0, 1 | 5].)
  %ka, %va, %ia, %oa = snapkv.select_adaptive %q, %k, %v window 1 capacity 3 kernel 1 scale 1.0
    : (tensor<1x2x1x2xf32>, tensor<1x2x6x2xf32>, tensor<1x2x6x2xf32>)
    -> (tensor<1x6x2xf32>, tensor<1x6x2xf32>, tensor<1x6xi64>, tensor<1x3xi64>)
  // CHECK: sizes = [1, 6]
  // CHECK-NEXT: {{^\[\[}}0, 5, 0, 1, 3, 5]]
  %iau = tensor.cast %ia : tensor<1x6xi64> to tensor<*xi64>
  call @print_i64(%iau) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 3]
  // CHECK-NEXT: {{^\[\[}}0, 2, 6]]
  %oau = tensor.cast %oa : tensor<1x3xi64> to tensor<*xi64>
  call @print_i64(%oau) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 6, 2]
  // CHECK-NEXT: {{^\[\[\[}}0, -0],
  // CHECK-NEXT: {{^}}  [5, -5],
  // CHECK-NEXT: {{^}}  [10, -10],
  // CHECK-NEXT: {{^}}  [11, -11],
  // CHECK-NEXT: {{^}}  [13, -13],
  // CHECK-NEXT: {{^}}  [15, -15]]]
  %vau = tensor.cast %va : tensor<1x6x2xf32> to tensor<*xf32>
  call @print_f32(%vau) : (tensor<*xf32>) -> ()

  // Floor 2: each head's best two first (head 0: 0, 1 by position; head 1: 0, then 1 over
  // the tied 3), which is the whole budget: [0, 1 | 5] each, offsets [0, 3, 6].
  %kb, %vb, %ib, %ob = snapkv.select_adaptive %q, %k, %v window 1 capacity 3 floor 2 kernel 1 scale 1.0
    : (tensor<1x2x1x2xf32>, tensor<1x2x6x2xf32>, tensor<1x2x6x2xf32>)
    -> (tensor<1x6x2xf32>, tensor<1x6x2xf32>, tensor<1x6xi64>, tensor<1x3xi64>)
  // CHECK: sizes = [1, 6]
  // CHECK-NEXT: {{^\[\[}}0, 1, 5, 0, 1, 5]]
  %ibu = tensor.cast %ib : tensor<1x6xi64> to tensor<*xi64>
  call @print_i64(%ibu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 3]
  // CHECK-NEXT: {{^\[\[}}0, 3, 6]]
  %obu = tensor.cast %ob : tensor<1x3xi64> to tensor<*xi64>
  call @print_i64(%obu) : (tensor<*xi64>) -> ()

  // A dynamic prompt length (the run-time checks and the L < C branch around the
  // selection) gives the same rows.
  %kd = tensor.cast %k : tensor<1x2x6x2xf32> to tensor<1x2x?x2xf32>
  %vd = tensor.cast %v : tensor<1x2x6x2xf32> to tensor<1x2x?x2xf32>
  %kc, %vc, %ic, %oc = snapkv.select_adaptive %q, %kd, %vd window 1 capacity 3 kernel 1 scale 1.0
    : (tensor<1x2x1x2xf32>, tensor<1x2x?x2xf32>, tensor<1x2x?x2xf32>)
    -> (tensor<1x?x2xf32>, tensor<1x?x2xf32>, tensor<1x?xi64>, tensor<1x3xi64>)
  // CHECK: sizes = [1, 6]
  // CHECK-NEXT: {{^\[\[}}0, 5, 0, 1, 3, 5]]
  %icu = tensor.cast %ic : tensor<1x?xi64> to tensor<*xi64>
  call @print_i64(%icu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 6, 2]
  // CHECK-NEXT: {{^\[\[\[}}0, -0],
  // CHECK-NEXT: {{^}}  [5, -5],
  // CHECK-NEXT: {{^}}  [10, -10],
  // CHECK-NEXT: {{^}}  [11, -11],
  // CHECK-NEXT: {{^}}  [13, -13],
  // CHECK-NEXT: {{^}}  [15, -15]]]
  %vcu = tensor.cast %vc : tensor<1x?x2xf32> to tensor<*xf32>
  call @print_f32(%vcu) : (tensor<*xf32>) -> ()
  return
}
