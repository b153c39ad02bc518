// Why snapkv-parallelize splits a one-row contraction's reduction itself
// (Parallelize.cpp, splitReduction): upstream's partial-reduction tiling
// (PartialReductionOpInterface, here through the transform dialect) puts the
// parts innermost, [1, 4096, 8], so each part accumulates into a row strided
// by the number of parts. Compiled, that form read 0.2-0.7 GB/s of weights on
// SmolLM2's decode projections against 21-23 GB/s for parts outermost
// (docs/benchmarks.md). If upstream learns to put them outermost, this test
// fails and the pass can use it.
// RUN: snapkv-opt %s --transform-interpreter --canonicalize | FileCheck %s

// CHECK-LABEL: func.func @one_row
// CHECK: scf.forall {{.*}} -> (tensor<1x4096x8xf32>)
// CHECK: tensor.extract_slice %{{.*}} [1, 4096, 1] [1, 1, 1] : tensor<1x4096x8xf32> to tensor<1x4096xf32>
// CHECK: linalg.reduce ins(%{{.*}} : tensor<1x4096x8xf32>) outs(%{{.*}} : tensor<1x4096xf32>) dimensions = [2]
func.func @one_row(%x: tensor<1x4096xf32>, %w: tensor<4096x4096xf32>, %init: tensor<1x4096xf32>) -> tensor<1x4096xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<1x4096xf32>, tensor<4096x4096xf32>) outs(%init : tensor<1x4096xf32>) -> tensor<1x4096xf32>
  return %r : tensor<1x4096xf32>
}

module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %mm = transform.structured.match ops{["linalg.matmul"]} in %root : (!transform.any_op) -> !transform.any_op
    %fill, %split, %merge, %loop = transform.structured.tile_reduction_using_forall %mm
        by num_threads = [0, 0, 8] tile_sizes = [0, 0, 512]
        : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    transform.yield
  }
}
