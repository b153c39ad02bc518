// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// Defined behaviour on hostile values (docs/hostile-values.md). One head per
// case, L = 6, W = 2 (prefix 0..3), C = 4 (two prefix positions kept),
// kernel 1, scale 1, D = 2.

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}

func.func @run(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x6x2xf32>) {
  %s1_votes = tensor.empty() : tensor<1x1x4xf32>
  %s1_pooled = tensor.empty() : tensor<1x1x4xf32>
  %v, %p = snapkv.score %q, %k window 2 kernel 1 scale 1.0
      outs(%s1_votes, %s1_pooled : tensor<1x1x4xf32>, tensor<1x1x4xf32>)
      : (tensor<1x1x2x2xf32>, tensor<1x1x6x2xf32>) -> (tensor<1x1x4xf32>, tensor<1x1x4xf32>)
  %m = bufferization.to_buffer %v : tensor<1x1x4xf32> to memref<1x1x4xf32>
  %u = memref.cast %m : memref<1x1x4xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 4 kernel 1 scale 1.0
      : (tensor<1x1x2x2xf32>, tensor<1x1x6x2xf32>, tensor<1x1x6x2xf32>)
      -> (tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4xi64>)
  %mi = bufferization.to_buffer %idx : tensor<1x1x4xi64> to memref<1x1x4xi64>
  %ui = memref.cast %mi : memref<1x1x4xi64> to memref<*xi64>
  call @printMemrefI64(%ui) : (memref<*xi64>) -> ()
  return
}

func.func @main() {
  // +inf logit at position 2 (1e30 * 1e30 overflows f32): max-subtraction
  // without care would compute inf - inf = NaN. Each window query puts all
  // its mass on position 2, so votes are exactly [0, 0, 2, 0]; position 2
  // wins and the zero-vote tie goes to the lowest position, 0.
  // CHECK: [0, 0, 2, 0]
  // CHECK: [0, 2, 4, 5]
  %q1 = arith.constant dense<[[[[1.0e30, 0.0], [1.0e30, 0.0]]]]> : tensor<1x1x2x2xf32>
  %k1 = arith.constant dense<[[[[0.0, 0.0], [0.0, 0.0], [1.0e30, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]]]> : tensor<1x1x6x2xf32>
  call @run(%q1, %k1) : (tensor<1x1x2x2xf32>, tensor<1x1x6x2xf32>) -> ()

  // Very large finite logits (1e30): max-subtraction keeps them finite; the
  // largest logit (position 3) takes all the mass in both rows.
  // CHECK: [0, 0, 0, 2]
  // CHECK: [0, 3, 4, 5]
  %q2 = arith.constant dense<[[[[1.0e15, 0.0], [1.0e15, 0.0]]]]> : tensor<1x1x2x2xf32>
  %k2 = arith.constant dense<[[[[1.0e15, 0.0], [-1.0e15, 0.0], [5.0e14, 0.0], [2.0e15, 0.0], [0.0, 0.0], [0.0, 0.0]]]]> : tensor<1x1x6x2xf32>
  call @run(%q2, %k2) : (tensor<1x1x2x2xf32>, tensor<1x1x6x2xf32>) -> ()

  // -inf logits (position 1) get probability 0; the rest is ordinary:
  // logits [0, -inf, ln 3, 0 | 0, 0] give row sums 3 + 3 = 6 (query 4 sees
  // positions 0..4) and 7 (query 5 sees 0..5), votes [1/6+1/7, 0, 3/6+3/7,
  // 1/6+1/7]: position 2 first, then the 0/3 tie goes to 0.
  // CHECK: [0.309524, 0, {{0.92857[12]}}, 0.309524]
  // CHECK: [0, 2, 4, 5]
  %q3 = arith.constant dense<[[[[1.0, 1.0e30], [1.0, 1.0e30]]]]> : tensor<1x1x2x2xf32>
  %k3 = arith.constant dense<[[[[0.0, 0.0], [0.0, -1.0e30], [1.0986123, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]]]> : tensor<1x1x6x2xf32>
  call @run(%q3, %k3) : (tensor<1x1x2x2xf32>, tensor<1x1x6x2xf32>) -> ()

  // A NaN input poisons its rows' softmax (NaN votes everywhere); NaN
  // scores rank below every number and tie among themselves, so the lowest
  // positions are kept and nothing reads out of bounds.
  // CHECK: [nan, nan, nan, nan]
  // CHECK: [0, 1, 4, 5]
  %q4 = arith.constant dense<[[[[1.0, 0.0], [1.0, 0.0]]]]> : tensor<1x1x2x2xf32>
  %k4 = arith.constant dense<[[[[0.0, 0.0], [0.0, 0.0], [0x7FC00000, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]]]> : tensor<1x1x6x2xf32>
  call @run(%q4, %k4) : (tensor<1x1x2x2xf32>, tensor<1x1x6x2xf32>) -> ()

  // NaNs of both signs (+NaN at position 2, -NaN at 3): the votes are NaNs whose sign bits
  // differ between positions (which ones is up to the hardware), yet every NaN ranks the
  // same, so the tie still keeps the lowest positions. Ranking NaNs by their bits would
  // keep a +NaN position ahead of the -NaN ones.
  // CHECK: {{\[\[\[-?nan, +-?nan, +-?nan, +-?nan\]\]\]}}
  // CHECK: [0, 1, 4, 5]
  %k5 = arith.constant dense<[[[[0.0, 0.0], [0.0, 0.0], [0x7FC00000, 0.0], [0xFFC00000, 0.0], [0.0, 0.0], [0.0, 0.0]]]]> : tensor<1x1x6x2xf32>
  call @run(%q4, %k5) : (tensor<1x1x2x2xf32>, tensor<1x1x6x2xf32>) -> ()
  return
}
