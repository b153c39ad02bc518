// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// A gather-like read from a slice whose rows are 17 apart once bufferised
// (docs/reliability.md, F8): upstream's N-D tensor.extract vectorisation
// read top[0, 0, 16] = 16 for chosen[1, 0]; the right values are
// 100 x b + 3 x j.
// CHECK: [0,   3,   6,   9]
// CHECK-NEXT: [100,   103,   106,   109]

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}

func.func @compute(%n: index) -> tensor<2x4xi64> {
  %e3 = tensor.empty() : tensor<2x1x17xi64>
  %top = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                         iterator_types = ["parallel", "parallel", "parallel"]}
      outs(%e3 : tensor<2x1x17xi64>) {
  ^bb0(%o: i64):
    %b = linalg.index 0 : index
    %k = linalg.index 2 : index
    %c100 = arith.constant 100 : index
    %m = arith.muli %b, %c100 : index
    %v = arith.addi %m, %k : index
    %vi = arith.index_cast %v : index to i64
    linalg.yield %vi : i64
  } -> tensor<2x1x17xi64>
  %chosen = tensor.extract_slice %top[0, 0, 0] [2, 1, 16] [1, 1, 1]
      : tensor<2x1x17xi64> to tensor<2x16xi64>
  %e2 = tensor.empty() : tensor<2x4xi64>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      outs(%e2 : tensor<2x4xi64>) {
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

func.func @main() {
  %c0 = arith.constant 0 : index
  %r = call @compute(%c0) : (index) -> tensor<2x4xi64>
  %m = bufferization.to_buffer %r : tensor<2x4xi64> to memref<2x4xi64>
  %u = memref.cast %m : memref<2x4xi64> to memref<*xi64>
  call @printMemrefI64(%u) : (memref<*xi64>) -> ()
  return
}
