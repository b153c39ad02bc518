// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-vectorize{vector-bits=256},canonicalize,cse))" | FileCheck %s
// The end-to-end numbers: the whole CPU pipeline, run.
// RUN: snapkv-opt %s --split-input-file --snapkv-cpu-pipeline | FileCheck %s --check-prefix=LOWERED

// Upstream's N-D tensor.extract vectorisation (LLVM 22) flattens the indices
// with the logical shape [2, 16], but the slice is rows 17 apart once
// bufferised: the gather read top[0, 0, 16] for chosen[1, 0]
// (docs/reliability.md, F8). Such a read stays scalar.
// CHECK-LABEL: func.func @strided_rows
// CHECK-NOT: vector.gather
// CHECK: tensor.extract %{{.*}} : tensor<2x16xi64>
// LOWERED-LABEL: llvm.func @strided_rows
func.func @strided_rows(%top: tensor<2x1x17xi64>, %n: index) -> tensor<2x4xi64> {
  %chosen = tensor.extract_slice %top[0, 0, 0] [2, 1, 16] [1, 1, 1]
      : tensor<2x1x17xi64> to tensor<2x16xi64>
  %e = tensor.empty() : tensor<2x4xi64>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      outs(%e : tensor<2x4xi64>) {
  ^bb0(%o: i64):
    %i0 = linalg.index 0 : index
    %i1 = linalg.index 1 : index
    %c3 = arith.constant 3 : index
    %k0 = arith.muli %i1, %c3 : index
    %k = arith.addi %k0, %n : index
    %x = tensor.extract %chosen[%i0, %k] : tensor<2x16xi64>
    linalg.yield %x : i64
  } -> tensor<2x4xi64>
  return %r : tensor<2x4xi64>
}

// -----

// Whole inner rows of a leading slice stay packed: vectorised as before.
// CHECK-LABEL: func.func @packed_rows
// CHECK: vector.gather
// LOWERED-LABEL: llvm.func @packed_rows
func.func @packed_rows(%top: tensor<4x16xi64>, %n: index) -> tensor<2x4xi64> {
  %chosen = tensor.extract_slice %top[1, 0] [2, 16] [1, 1]
      : tensor<4x16xi64> to tensor<2x16xi64>
  %e = tensor.empty() : tensor<2x4xi64>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      outs(%e : tensor<2x4xi64>) {
  ^bb0(%o: i64):
    %i0 = linalg.index 0 : index
    %i1 = linalg.index 1 : index
    %c3 = arith.constant 3 : index
    %k0 = arith.muli %i1, %c3 : index
    %k = arith.addi %k0, %n : index
    %x = tensor.extract %chosen[%i0, %k] : tensor<2x16xi64>
    linalg.yield %x : i64
  } -> tensor<2x4xi64>
  return %r : tensor<2x4xi64>
}
