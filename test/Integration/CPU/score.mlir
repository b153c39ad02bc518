// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// snapkv.score on the seed's worked example (L=8, W=2, D=2, kernel 3): the
// logits of query 6 and 7 are ln a_j and ln b_j with
//   a = [1, 2, 10, 8, 1, 1, 2, -], b = [1, 1, 8, 12, 1, 1, 1, 1],
// so the full-softmax denominators are 25 and 26 (window columns included)
// and votes[j] = a_j/25 + b_j/26 over the prefix j < 6:
//   [0.078462, 0.118462, 0.707692, 0.781538, 0.078462, 0.078462].
// avg pooling (kernel 3, zero padding, always / 3):
//   [0.065641, 0.301538, 0.535897, 0.522564, 0.312821, 0.052308];
// max pooling (in-range neighbours):
//   [0.118462, 0.707692, 0.781538, 0.781538, 0.781538, 0.078462].
// A prefix-only softmax (denominators 22 and 24) would give votes[2] =
// 10/22 + 8/24 = 0.787879 instead.

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print(%t: tensor<1x1x6xf32>) {
  %m = bufferization.to_buffer %t : tensor<1x1x6xf32> to memref<1x1x6xf32>
  %u = memref.cast %m : memref<1x1x6xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %q = arith.constant dense<[[[[1.4142135623730951, 0.0], [0.0, 1.4142135623730951]]]]> : tensor<1x1x2x2xf32>
  %k = arith.constant dense<[[[[0.0, 0.0], [0.6931471805599453, 0.0], [2.302585092994046, 2.0794415416798357], [2.0794415416798357, 2.4849066497880004], [0.0, 0.0], [0.0, 0.0], [0.6931471805599453, 0.0], [0.0, 0.0]]]]> : tensor<1x1x8x2xf32>
  %s1_votes = tensor.empty() : tensor<1x1x6xf32>
  %s1_pooled = tensor.empty() : tensor<1x1x6xf32>
  %v, %p = snapkv.score %q, %k window 2 kernel 3
      outs(%s1_votes, %s1_pooled : tensor<1x1x6xf32>, tensor<1x1x6xf32>)
      : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>) -> (tensor<1x1x6xf32>, tensor<1x1x6xf32>)
  %s2_votes = tensor.empty() : tensor<1x1x6xf32>
  %s2_pooled = tensor.empty() : tensor<1x1x6xf32>
  %v2, %p2 = snapkv.score %q, %k window 2 kernel 3 pooling max
      outs(%s2_votes, %s2_pooled : tensor<1x1x6xf32>, tensor<1x1x6xf32>)
      : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>) -> (tensor<1x1x6xf32>, tensor<1x1x6xf32>)
  // CHECK: [0.0784615, 0.118462, 0.707692, 0.781539, 0.0784615, 0.0784615]
  call @print(%v) : (tensor<1x1x6xf32>) -> ()
  // CHECK: [0.065641, 0.301538, 0.535897, 0.522564, 0.312821, 0.0523077]
  call @print(%p) : (tensor<1x1x6xf32>) -> ()
  // CHECK: [0.118462, 0.707692, 0.781539, 0.781539, 0.781539, 0.0784615]
  call @print(%p2) : (tensor<1x1x6xf32>) -> ()
  return
}
