// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// kernel 1 means no pooling (docs/semantics.md, step 3): the raw votes are ranked, for avg (divide by 1) and
// max (maximum of one element) alike.
//
// W = 1 (query at position 6, sees every column), L = 7, P = 6, C = 4 (three prefix positions
// kept), D = 2, `scale 1.0`, q = [1, 0], keys[j] = [ln w_j, 0], exp-weights
// w = [1, 7, 1, 9, 5, 2 | 1] (sum 26), votes = w / 26; values[j] = [j, -j].
// kernel 1:  ranking 3 (9) > 1 (7) > 4 (5) > 5 (2)  -> position [1, 3, 4, 6], score [3, 1, 4, 6]
// A lowering that ignores the clause and pools anyway picks something else:
//   avg kernel 3: [8, 9, 17, 15, 16, 7]/3  -> [2, 3, 4]
//   avg kernel 5 (the default): [9, 18, 23, 24, 17, 16]/5 -> [1, 2, 3]
//   max kernel 3: [7, 7, 9, 9, 9, 5]       -> [2, 3, 4]

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print(%idx: tensor<1x1x4xi64>, %vo: tensor<1x1x4x2xf32>) {
  %im = bufferization.to_buffer %idx : tensor<1x1x4xi64> to memref<1x1x4xi64>
  %iu = memref.cast %im : memref<1x1x4xi64> to memref<*xi64>
  call @printMemrefI64(%iu) : (memref<*xi64>) -> ()
  %vm = bufferization.to_buffer %vo : tensor<1x1x4x2xf32> to memref<1x1x4x2xf32>
  %vu = memref.cast %vm : memref<1x1x4x2xf32> to memref<*xf32>
  call @printMemrefF32(%vu) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %q = arith.constant dense<[[[[1.0, 0.0]]]]> : tensor<1x1x1x2xf32>
  // ln 7 = 1.94591015, ln 9 = 2.19722458, ln 5 = 1.60943791, ln 2 = 0.69314718
  %k = arith.constant dense<[[[[0.0, 0.0], [1.94591015, 0.0], [0.0, 0.0], [2.19722458, 0.0],
                               [1.60943791, 0.0], [0.69314718, 0.0], [0.0, 0.0]]]]> : tensor<1x1x7x2xf32>
  %v = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0],
                               [4.0, -4.0], [5.0, -5.0], [6.0, -6.0]]]]> : tensor<1x1x7x2xf32>

  %k1, %v1, %i1 = snapkv.select %q, %k, %v window 1 capacity 4 kernel 1 scale 1.0
    : (tensor<1x1x1x2xf32>, tensor<1x1x7x2xf32>, tensor<1x1x7x2xf32>)
    -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  // CHECK: sizes = [1, 1, 4]
  // CHECK-NEXT: {{^\[\[\[}}1, 3, 4, 6]]]
  // CHECK: sizes = [1, 1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1, -1],
  // CHECK-NEXT: {{^}}   [3, -3],
  // CHECK-NEXT: {{^}}   [4, -4],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  call @print(%i1, %v1) : (tensor<1x1x4xi64>, tensor<1x1x4x2xf32>) -> ()

  %k2, %v2, %i2 = snapkv.select %q, %k, %v window 1 capacity 4 kernel 1 pooling max order score scale 1.0
    : (tensor<1x1x1x2xf32>, tensor<1x1x7x2xf32>, tensor<1x1x7x2xf32>)
    -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  // CHECK: sizes = [1, 1, 4]
  // CHECK-NEXT: {{^\[\[\[}}3, 1, 4, 6]]]
  // CHECK: sizes = [1, 1, 4, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}3, -3],
  // CHECK-NEXT: {{^}}   [1, -1],
  // CHECK-NEXT: {{^}}   [4, -4],
  // CHECK-NEXT: {{^}}   [6, -6]]]]
  call @print(%i2, %v2) : (tensor<1x1x4xi64>, tensor<1x1x4x2xf32>) -> ()
  return
}
