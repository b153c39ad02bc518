// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// Exact ties go to the lower position (docs/semantics.md, step 4), in the top-k and, with `order score`, in the
// order of the kept prefix (docs/semantics.md, step 5). Ties are made exact by identical key rows: identical
// logits give bit-identical probabilities and votes at every position, whatever tile or vector
// lane the column falls in. A top-k that lets the higher position win, or an unstable order,
// fails here. All cases: `scale 1.0`, D = 2, keys[j] = [ln w_j, 0] (exp-weight w_j for a query
// [1, 0]), values[j] = [j, -j].

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

// values[0, 0, j] = [j, -j] (row 0 prints as [0, -0]).
func.func @iota_values7() -> tensor<1x1x7x2xf32> {
  %t = tensor.generate {
  ^bb0(%b: index, %h: index, %j: index, %d: index):
    %ji = arith.index_cast %j : index to i64
    %jf = arith.sitofp %ji : i64 to f32
    %c0 = arith.constant 0 : index
    %first = arith.cmpi eq, %d, %c0 : index
    %neg = arith.negf %jf : f32
    %r = arith.select %first, %jf, %neg : f32
    tensor.yield %r : f32
  } : tensor<1x1x7x2xf32>
  return %t : tensor<1x1x7x2xf32>
}

func.func @iota_values40() -> tensor<1x1x40x2xf32> {
  %t = tensor.generate {
  ^bb0(%b: index, %h: index, %j: index, %d: index):
    %ji = arith.index_cast %j : index to i64
    %jf = arith.sitofp %ji : i64 to f32
    %c0 = arith.constant 0 : index
    %first = arith.cmpi eq, %d, %c0 : index
    %neg = arith.negf %jf : f32
    %r = arith.select %first, %jf, %neg : f32
    tensor.yield %r : f32
  } : tensor<1x1x40x2xf32>
  return %t : tensor<1x1x40x2xf32>
}

func.func @main() {
  %q = arith.constant dense<[[[[1.0, 0.0]]]]> : tensor<1x1x1x2xf32>
  %v7 = call @iota_values7() : () -> tensor<1x1x7x2xf32>

  // Case 1: W = 1, L = 7, P = 6, C = 4 (three prefix positions kept), kernel 1.
  // w = [1, 4, 1, 4, 4, 8 | 1]: rows 1, 3, 4 are identical (weight 4).
  // Ranking: 5 (8), then the exact tie 1 = 3 = 4 -> 1, 3 (4 loses).
  //   position: [1, 3, 5, 6]          (higher-wins tie rule: [3, 4, 5, 6])
  //   score:    [5, 1, 3, 6]          (higher-first tie order: [5, 3, 1, 6] or [5, 4, 3, 6])
  // ln 4 = 1.38629436, ln 8 = 2.07944154
  %k1 = arith.constant dense<[[[[0.0, 0.0], [1.38629436, 0.0], [0.0, 0.0], [1.38629436, 0.0],
                                [1.38629436, 0.0], [2.07944154, 0.0], [0.0, 0.0]]]]> : tensor<1x1x7x2xf32>
  %ka, %va, %ia = snapkv.select %q, %k1, %v7 window 1 capacity 4 kernel 1 scale 1.0
    : (tensor<1x1x1x2xf32>, tensor<1x1x7x2xf32>, tensor<1x1x7x2xf32>)
    -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  // CHECK: sizes = [1, 1, 4]
  // CHECK-NEXT: {{^\[\[\[}}1, 3, 5, 6]]]
  %iau = tensor.cast %ia : tensor<1x1x4xi64> to tensor<*xi64>
  call @print_i64(%iau) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1, -1],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [5, -5],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  %vau = tensor.cast %va : tensor<1x1x4x2xf32> to tensor<*xf32>
  call @print_f32(%vau) : (tensor<*xf32>) -> ()
  %kb, %vb, %ib = snapkv.select %q, %k1, %v7 window 1 capacity 4 kernel 1 order score scale 1.0
    : (tensor<1x1x1x2xf32>, tensor<1x1x7x2xf32>, tensor<1x1x7x2xf32>)
    -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  // CHECK: sizes = [1, 1, 4]
  // CHECK-NEXT: {{^\[\[\[}}5, 1, 3, 6]]]
  %ibu = tensor.cast %ib : tensor<1x1x4xi64> to tensor<*xi64>
  call @print_i64(%ibu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}5, -5],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  %vbu = tensor.cast %vb : tensor<1x1x4x2xf32> to tensor<*xf32>
  call @print_f32(%vbu) : (tensor<*xf32>) -> ()

  // Case 2: all key rows identical ([0.5, 0.25]), so every vote is 1/7 (bit-identical).
  // W = 1, L = 7, P = 6, C = 4, kernel 3.
  //   avg: borders (0 + v + v)/3 = 2/21, interior (v + v + v)/3 = 1/7 at 1..4 (exact tie)
  //        -> lowest three interior positions [1, 2, 3] (higher-wins: [2, 3, 4]; dividing the
  //        borders by 2 would make all six tie and give [0, 1, 2]); score order [1, 2, 3, 6]
  //   max: all six pooled scores are v (exact tie) -> [0, 1, 2, 6] (higher-wins: [3, 4, 5])
  %k2 = arith.constant dense<[[[[0.5, 0.25], [0.5, 0.25], [0.5, 0.25], [0.5, 0.25],
                                [0.5, 0.25], [0.5, 0.25], [0.5, 0.25]]]]> : tensor<1x1x7x2xf32>
  %kc, %vc, %ic = snapkv.select %q, %k2, %v7 window 1 capacity 4 kernel 3 order score scale 1.0
    : (tensor<1x1x1x2xf32>, tensor<1x1x7x2xf32>, tensor<1x1x7x2xf32>)
    -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  // CHECK: sizes = [1, 1, 4]
  // CHECK-NEXT: {{^\[\[\[}}1, 2, 3, 6]]]
  %icu = tensor.cast %ic : tensor<1x1x4xi64> to tensor<*xi64>
  call @print_i64(%icu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  %vcu = tensor.cast %vc : tensor<1x1x4x2xf32> to tensor<*xf32>
  call @print_f32(%vcu) : (tensor<*xf32>) -> ()
  %kd, %vd, %id = snapkv.select %q, %k2, %v7 window 1 capacity 4 kernel 3 pooling max scale 1.0
    : (tensor<1x1x1x2xf32>, tensor<1x1x7x2xf32>, tensor<1x1x7x2xf32>)
    -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  // CHECK: sizes = [1, 1, 4]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 2, 6]]]
  %idu = tensor.cast %id : tensor<1x1x4xi64> to tensor<*xi64>
  call @print_i64(%idu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}0, -0],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [2, -2],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  %vdu = tensor.cast %vd : tensor<1x1x4x2xf32> to tensor<*xf32>
  call @print_f32(%vdu) : (tensor<*xf32>) -> ()

  // Case 3: ties far apart (different tiles / vector chunks of the key axis).
  // W = 2 (queries at 38 and 39, both [1, 0]), L = 40, P = 38, C = 4 (two prefix positions
  // kept), kernel 1. Rows 5, 20 and 37 are identical with weight 8, every other row weight 1;
  // query 38 sees 36 ones and three 8s (sum 60), query 39 also sees row 39 (sum 61), so the
  // votes of 5, 20, 37 are all 8/60 + 8/61 (exact tie) -> keep 5, 20 (not 37).
  //   position and score order: [5, 20, 38, 39]   (higher-wins: [20, 37, 38, 39])
  %qw = arith.constant dense<[[[[1.0, 0.0], [1.0, 0.0]]]]> : tensor<1x1x2x2xf32>
  %k3 = arith.constant dense<[[[
    [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [2.07944154, 0.0], [0.0, 0.0], [0.0, 0.0],
    [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0],
    [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [2.07944154, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0],
    [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0],
    [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [2.07944154, 0.0], [0.0, 0.0], [0.0, 0.0]
  ]]]> : tensor<1x1x40x2xf32>
  %v40 = call @iota_values40() : () -> tensor<1x1x40x2xf32>
  %ke, %ve, %ie = snapkv.select %qw, %k3, %v40 window 2 capacity 4 kernel 1 scale 1.0
    : (tensor<1x1x2x2xf32>, tensor<1x1x40x2xf32>, tensor<1x1x40x2xf32>)
    -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  // CHECK: sizes = [1, 1, 4]
  // CHECK-NEXT: {{^\[\[\[}}5, 20, 38, 39]]]
  %ieu = tensor.cast %ie : tensor<1x1x4xi64> to tensor<*xi64>
  call @print_i64(%ieu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}5, -5],
  // CHECK-NEXT: {{^}}   [20, -20],
  // CHECK-NEXT: {{^}}   [38, -38],
  // CHECK-NEXT: {{^}}   [39, -39]]]]
  %veu = tensor.cast %ve : tensor<1x1x4x2xf32> to tensor<*xf32>
  call @print_f32(%veu) : (tensor<*xf32>) -> ()
  %kf, %vf, %if = snapkv.select %qw, %k3, %v40 window 2 capacity 4 kernel 1 order score scale 1.0
    : (tensor<1x1x2x2xf32>, tensor<1x1x40x2xf32>, tensor<1x1x40x2xf32>)
    -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  // CHECK: sizes = [1, 1, 4]
  // CHECK-NEXT: {{^\[\[\[}}5, 20, 38, 39]]]
  %ifu = tensor.cast %if : tensor<1x1x4xi64> to tensor<*xi64>
  call @print_i64(%ifu) : (tensor<*xi64>) -> ()
  // CHECK: sizes = [1, 1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}5, -5],
  // CHECK-NEXT: {{^}}   [20, -20],
  // CHECK-NEXT: {{^}}   [38, -38],
  // CHECK-NEXT: {{^}}   [39, -39]]]]
  %vfu = tensor.cast %vf : tensor<1x1x4x2xf32> to tensor<*xf32>
  call @print_f32(%vfu) : (tensor<*xf32>) -> ()
  return
}
