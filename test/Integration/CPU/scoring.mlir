// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// The comparison scorings of snapkv.select.

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}

func.func @print(%idx: tensor<1x2x5xi64>) {
  %m = bufferization.to_buffer %idx : tensor<1x2x5xi64> to memref<1x2x5xi64>
  %u = memref.cast %m : memref<1x2x5xi64> to memref<*xi64>
  call @printMemrefI64(%u) : (memref<*xi64>) -> ()
  return
}

func.func @main() {
  // prefix_votes on the counter-example of counter_example.mlir (L = 4, W = 2, one prefix
  // position kept): with the window columns left out of the denominator, A = 0.9 + 0.25 >
  // B = 0.1 + 0.75, so position 0 is kept where the full softmax keeps 1.
  %q = arith.constant dense<[[[[1.0, 0.0], [0.0, 1.0]]]]> : tensor<1x1x2x2xf32>
  %k = arith.constant dense<[[[[2.19722458, 2.19722458], [0.0, 3.29583687],
                               [4.49980967, 0.69314718], [0.0, 0.69314718]]]]> : tensor<1x1x4x2xf32>
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 3 kernel 1 scale 1.0 scoring prefix_votes
    : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>)
    -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  %im = bufferization.to_buffer %idx : tensor<1x1x3xi64> to memref<1x1x3xi64>
  %iu = memref.cast %im : memref<1x1x3xi64> to memref<*xi64>
  // CHECK: sizes = [1, 1, 3]
  // CHECK-NEXT: {{^\[\[\[}}0, 2, 3]]]
  call @printMemrefI64(%iu) : (memref<*xi64>) -> ()

  // L = 8, W = 2 (P = 6), C = 5 (three prefix positions kept), two query heads.
  %q2 = arith.constant dense<1.0> : tensor<1x2x2x4xf32>
  %k2 = arith.constant dense<1.0> : tensor<1x2x8x4xf32>

  // recent, sinks 1: position 0 and the two most recent prefix positions, then the window.
  // CHECK: sizes = [1, 2, 5]
  // CHECK-NEXT: {{^\[\[\[}}0, 4, 5, 6, 7],
  // CHECK-NEXT: {{^}}  [0, 4, 5, 6, 7]]]
  %a:3 = snapkv.select %q2, %k2, %k2 window 2 capacity 5 scoring recent sinks 1
    : (tensor<1x2x2x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
    -> (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5xi64>)
  call @print(%a#2) : (tensor<1x2x5xi64>) -> ()

  // recent with the default sinks, more than the K = 2 kept prefix positions: the sinks
  // are capped at K, so the prefix keeps positions 0 and 1.
  // CHECK: sizes = [1, 2, 4]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 6, 7],
  %small:3 = snapkv.select %q2, %k2, %k2 window 2 capacity 4 scoring recent
    : (tensor<1x2x2x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
    -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4xi64>)
  %sm = bufferization.to_buffer %small#2 : tensor<1x2x4xi64> to memref<1x2x4xi64>
  %su = memref.cast %sm : memref<1x2x4xi64> to memref<*xi64>
  call @printMemrefI64(%su) : (memref<*xi64>) -> ()

  // recent, no sinks: the last C positions.
  // CHECK: sizes = [1, 2, 5]
  // CHECK-NEXT: {{^\[\[\[}}3, 4, 5, 6, 7],
  %b:3 = snapkv.select %q2, %k2, %k2 window 2 capacity 5 scoring recent sinks 0
    : (tensor<1x2x2x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
    -> (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5xi64>)
  call @print(%b#2) : (tensor<1x2x5xi64>) -> ()

  // random, seed 3: each head its own draw (snapkv.reference.random_keys(3, 1, 2, 6) ranks
  // [0, 3, 5] for head 0 and [0, 2, 3] for head 1), in position order...
  // CHECK: sizes = [1, 2, 5]
  // CHECK-NEXT: {{^\[\[\[}}0, 3, 5, 6, 7],
  // CHECK-NEXT: {{^}}  [0, 2, 3, 6, 7]]]
  %c:3 = snapkv.select %q2, %k2, %k2 window 2 capacity 5 scoring random seed 3
    : (tensor<1x2x2x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
    -> (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5xi64>)
  call @print(%c#2) : (tensor<1x2x5xi64>) -> ()

  // ... and in key order; seed 0 draws differently.
  // CHECK: sizes = [1, 2, 5]
  // CHECK-NEXT: {{^\[\[\[}}0, 5, 3, 6, 7],
  // CHECK-NEXT: {{^}}  [3, 0, 2, 6, 7]]]
  %d:3 = snapkv.select %q2, %k2, %k2 window 2 capacity 5 order score scoring random seed 3
    : (tensor<1x2x2x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
    -> (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5xi64>)
  call @print(%d#2) : (tensor<1x2x5xi64>) -> ()
  // CHECK: sizes = [1, 2, 5]
  // CHECK-NEXT: {{^\[\[\[}}0, 1, 2, 6, 7],
  // CHECK-NEXT: {{^}}  [0, 2, 3, 6, 7]]]
  %e:3 = snapkv.select %q2, %k2, %k2 window 2 capacity 5 scoring random
    : (tensor<1x2x2x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
    -> (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5xi64>)
  call @print(%e#2) : (tensor<1x2x5xi64>) -> ()
  return
}
