// RUN: snapkv-opt %s --snapkv-cpu-pipeline="asserts=report" | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s
// RUN: snapkv-opt %s --snapkv-cpu-pipeline="asserts=report" | mlir-runner -e main_ok -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s --check-prefix=OK
// RUN: snapkv-opt %s --snapkv-cpu-pipeline="asserts=report" | mlir-runner -e main_shared -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s --check-prefix=SHARED

// The run-time check of runtime_check.mlir (dynamic L shorter than the window)
// compiled with asserts=report: the failing select's function returns at once
// and so does @main, which called it, so the process ends normally (no
// `not --crash`), and nothing after the failing call runs. With a long enough
// prompt the same code runs to the end.

// CHECK: calling select
// CHECK-NOT: after select

// OK: calling select
// OK-NEXT: Unranked Memref
// OK-NEXT: {{\[\[\[}}0,   1,   2,   3,   4]]]
// OK-NEXT: after select

// A select that shares its function with other code (as in a model's layer)
// is moved into a function of its own by the pipeline; its failing check
// still stops the layer at the call: nothing after it runs.
// SHARED: calling layer
// SHARED-NOT: layer after select

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}

func.func @select_dyn(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x?x2xf32>, %v: tensor<1x1x?x2xf32>)
    -> tensor<1x1x?xi64> {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3
    : (tensor<1x1x2x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>)
    -> (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?xi64>)
  return %idx : tensor<1x1x?xi64>
}

func.func @run(%k: tensor<1x1x?x2xf32>, %v: tensor<1x1x?x2xf32>) {
  %q = arith.constant dense<[[[[1.0, 0.0], [0.0, 1.0]]]]> : tensor<1x1x2x2xf32>
  vector.print str "calling select\n"
  %idx = call @select_dyn(%q, %k, %v)
    : (tensor<1x1x2x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>) -> tensor<1x1x?xi64>
  %u = tensor.cast %idx : tensor<1x1x?xi64> to tensor<*xi64>
  %m = bufferization.to_buffer %u : tensor<*xi64> to memref<*xi64>
  call @printMemrefI64(%m) : (memref<*xi64>) -> ()
  vector.print str "after select\n"
  return
}

func.func @main() {
  %k = arith.constant dense<[[[[0.5, 0.25]]]]> : tensor<1x1x1x2xf32>
  %kd = tensor.cast %k : tensor<1x1x1x2xf32> to tensor<1x1x?x2xf32>
  call @run(%kd, %kd) : (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>) -> ()
  return
}

func.func @main_ok() {
  %k = arith.constant dense<1.0> : tensor<1x1x5x2xf32>
  %kd = tensor.cast %k : tensor<1x1x5x2xf32> to tensor<1x1x?x2xf32>
  call @run(%kd, %kd) : (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>) -> ()
  return
}

func.func @layer(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x?x2xf32>, %v: tensor<1x1x?x2xf32>) {
  %k2 = arith.addf %k, %k : tensor<1x1x?x2xf32>
  %ko, %vo, %idx = snapkv.select %q, %k2, %v window 2 capacity 5 kernel 3
    : (tensor<1x1x2x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>)
    -> (tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?xi64>)
  vector.print str "layer after select\n"
  return
}

func.func @main_shared() {
  %q = arith.constant dense<[[[[1.0, 0.0], [0.0, 1.0]]]]> : tensor<1x1x2x2xf32>
  %k = arith.constant dense<[[[[0.5, 0.25]]]]> : tensor<1x1x1x2xf32>
  %kd = tensor.cast %k : tensor<1x1x1x2xf32> to tensor<1x1x?x2xf32>
  vector.print str "calling layer\n"
  call @layer(%q, %kd, %kd) : (tensor<1x1x2x2xf32>, tensor<1x1x?x2xf32>, tensor<1x1x?x2xf32>) -> ()
  return
}
