// snapkv.select and snapkv.score on the SnapKV worked example, compiled for the CPU and run.
// From the repository root (after `make build`):
//
//   build/bin/snapkv-opt examples/select.mlir --snapkv-cpu-pipeline \
//     | /usr/lib/llvm-22/bin/mlir-runner -e main -entry-point-result=void \
//         -shared-libs=/usr/lib/llvm-22/lib/libmlir_runner_utils.so,/usr/lib/llvm-22/lib/libmlir_c_runner_utils.so,/usr/lib/llvm-22/lib/libomp.so
//
// prints the votes, the pooled scores and the kept positions:
//
//   [0.0784615, 0.118462, 0.707692, 0.781539, 0.0784615, 0.0784615]   votes (prefix 0..5)
//   [0.065641, 0.301538, 0.535897, 0.522564, 0.312821, 0.0523077]     pooled (avg, kernel 3)
//   [2, 3, 4, 6, 7]                                                    kept: prefix + window
//   [2, -2], [3, -3], [4, -4], [6, -6], [7, -7]                        the gathered values
//
// L = 8 prompt positions, window W = 2 (positions 6 and 7 vote and are always kept), capacity
// C = 5, head dim 2. Keys are k_j = [ln a_j, ln b_j] and the two window queries [sqrt 2, 0] and
// [0, sqrt 2], so with the default scale 1/sqrt(2) the exp-logits are exactly
//   query 6: a = 1 2 10  8 1 1 2 (7 is masked)   sum 25
//   query 7: b = 1 1  8 12 1 1 1 1                sum 26
// votes[j] = a_j/25 + b_j/26 (full causal softmax, window columns in the denominator); avg
// pooling with kernel 3 picks 2, 3, 4 where raw votes would pick 1, 2, 3. Values are [j, -j],
// so the gathered rows show which positions were kept. docs/semantics.md has the exact rules;
// test/Integration/CPU/worked_example.mlir checks the same numbers.

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}

func.func @print_f32(%t: tensor<1x1x6xf32>) {
  %m = bufferization.to_buffer %t : tensor<1x1x6xf32> to memref<1x1x6xf32>
  %u = memref.cast %m : memref<1x1x6xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @print_idx(%t: tensor<1x1x5xi64>) {
  %m = bufferization.to_buffer %t : tensor<1x1x5xi64> to memref<1x1x5xi64>
  %u = memref.cast %m : memref<1x1x5xi64> to memref<*xi64>
  call @printMemrefI64(%u) : (memref<*xi64>) -> ()
  return
}

func.func @print_rows(%t: tensor<1x1x5x2xf32>) {
  %m = bufferization.to_buffer %t : tensor<1x1x5x2xf32> to memref<1x1x5x2xf32>
  %u = memref.cast %m : memref<1x1x5x2xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %q = arith.constant dense<[[[[1.41421356, 0.0], [0.0, 1.41421356]]]]> : tensor<1x1x2x2xf32>
  %k = arith.constant dense<[[[[0.0, 0.0], [0.69314718, 0.0], [2.30258509, 2.07944154],
                               [2.07944154, 2.48490665], [0.0, 0.0], [0.0, 0.0],
                               [0.69314718, 0.0], [0.0, 0.0]]]]> : tensor<1x1x8x2xf32>
  %v = arith.constant dense<[[[[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0],
                               [4.0, -4.0], [5.0, -5.0], [6.0, -6.0], [7.0, -7.0]]]]>
      : tensor<1x1x8x2xf32>

  // What the selection ranks by: votes and pooled scores of the prefix positions 0..5.
  %s1_votes = tensor.empty() : tensor<1x1x6xf32>
  %s1_pooled = tensor.empty() : tensor<1x1x6xf32>
  %votes, %pooled = snapkv.score %q, %k window 2 kernel 3
      outs(%s1_votes, %s1_pooled : tensor<1x1x6xf32>, tensor<1x1x6xf32>)
      : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>) -> (tensor<1x1x6xf32>, tensor<1x1x6xf32>)
  call @print_f32(%votes) : (tensor<1x1x6xf32>) -> ()
  call @print_f32(%pooled) : (tensor<1x1x6xf32>) -> ()

  // The selection: the top C - W = 3 prefix positions by pooled score, plus the window.
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3 pooling avg
      : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
      -> (tensor<1x1x5x2xf32>, tensor<1x1x5x2xf32>, tensor<1x1x5xi64>)
  call @print_idx(%idx) : (tensor<1x1x5xi64>) -> ()
  call @print_rows(%vo) : (tensor<1x1x5x2xf32>) -> ()
  return
}
