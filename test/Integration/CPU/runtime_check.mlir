// RUN: snapkv-opt %s --snapkv-cpu-pipeline | not --crash mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime 2>&1 | FileCheck %s
// RUN: snapkv-opt %s --snapkv-cpu-pipeline | not --crash mlir-runner -e main_mismatch -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime 2>&1 | FileCheck %s --check-prefix=MISMATCH

// Dynamic L (docs/semantics.md, step 7): the verifier cannot see that L >= window, so the
// lowering inserts a runtime check. With the default asserts=abort it aborts with a clear
// message on stderr (snapkv-lower-asserts: write(2) + abort, so the message survives a pipe;
// hence `not --crash`; runtime_check_report.mlir has asserts=report). Here window = 2 and the
// keys/values passed at run time have L = 1. Nothing after the failing select may run: the
// CHECK-NOT below fails if the select silently produced a result (e.g. a missing or wrong
// check that reads out of bounds instead).

// CHECK: snapkv.select: prompt length (keys dim 2) is shorter than window 2{{$}}
// CHECK-NOT: after select

// Values shorter than keys at run time are caught the same way, before any gather.
// MISMATCH: snapkv.select: prompt length of 'values' differs from 'keys'{{$}}
// MISMATCH-NOT: after select

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}

func.func @select_dyn(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x?x2xf32>, %v: tensor<1x1x?x2xf32>)
    -> tensor<1x1x?xi64> {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3
    : (tensor<1x1x2x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>)
    -> (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?xi64>)
  return %idx : tensor<1x1x?xi64>
}

func.func @main() {
  %q = arith.constant dense<[[[[1.0, 0.0], [0.0, 1.0]]]]> : tensor<1x1x2x2xf32>
  %k = arith.constant dense<[[[[0.5, 0.25]]]]> : tensor<1x1x1x2xf32>
  %v = arith.constant dense<[[[[1.0, -1.0]]]]> : tensor<1x1x1x2xf32>
  %kd = tensor.cast %k : tensor<1x1x1x2xf32> to tensor<1x1x?x2xf32>
  %vd = tensor.cast %v : tensor<1x1x1x2xf32> to tensor<1x1x?x2xf32>
  %idx = call @select_dyn(%q, %kd, %vd)
    : (tensor<1x1x2x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>) -> tensor<1x1x?xi64>
  %u = tensor.cast %idx : tensor<1x1x?xi64> to tensor<*xi64>
  %m = bufferization.to_buffer %u : tensor<*xi64> to memref<*xi64>
  vector.print str "after select\n"
  call @printMemrefI64(%m) : (memref<*xi64>) -> ()
  return
}

func.func @main_mismatch() {
  %q = arith.constant dense<[[[[1.0, 0.0], [0.0, 1.0]]]]> : tensor<1x1x2x2xf32>
  %k = arith.constant dense<1.0> : tensor<1x1x8x2xf32>
  %v = arith.constant dense<2.0> : tensor<1x1x3x2xf32>
  %kd = tensor.cast %k : tensor<1x1x8x2xf32> to tensor<1x1x?x2xf32>
  %vd = tensor.cast %v : tensor<1x1x3x2xf32> to tensor<1x1x?x2xf32>
  %idx = call @select_dyn(%q, %kd, %vd)
    : (tensor<1x1x2x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>) -> tensor<1x1x?xi64>
  %u = tensor.cast %idx : tensor<1x1x?xi64> to tensor<*xi64>
  %m = bufferization.to_buffer %u : tensor<*xi64> to memref<*xi64>
  vector.print str "after select\n"
  call @printMemrefI64(%m) : (memref<*xi64>) -> ()
  return
}
