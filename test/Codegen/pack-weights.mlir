// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-pack-weights,canonicalize))" | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-pack-weights{panel=32 min-columns=64},canonicalize))" | FileCheck %s --check-prefix=SMALL
// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-pack-weights,canonicalize,snapkv-parallelize,canonicalize))" | FileCheck %s --check-prefix=PAR

// A prefill projection with a wide weight (N = 4096 >= min-columns): the weight
// is copied into 64 panels of [K, 64], the product runs over (panel, row,
// column, k) into a panel-major result, which one transpose turns back into [M, N].
// CHECK-LABEL: func.func @wide
// CHECK-SAME: (%[[X:.*]]: tensor<?x512xf32>, %[[W:.*]]: tensor<512x4096xf32>)
// CHECK: %[[PANELS:.*]] = tensor.empty() : tensor<64x512x64xf32>
// CHECK: %[[SPLIT:.*]] = tensor.expand_shape %[[W]] {{\[}}[0], [1, 2]] output_shape [512, 64, 64]
// CHECK: %[[PACKED:.*]] = linalg.transpose ins(%[[SPLIT]] : tensor<512x64x64xf32>) outs(%[[PANELS]] : tensor<64x512x64xf32>) permutation = [1, 0, 2]
// CHECK: %[[ZERO:.*]] = linalg.fill {{.*}} -> tensor<64x?x64xf32>
// CHECK: %[[PRODUCT:.*]] = linalg.generic {indexing_maps = [#[[A:.*]], #[[B:.*]], #[[C:.*]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[X]], %[[PACKED]] : tensor<?x512xf32>, tensor<64x512x64xf32>) outs(%[[ZERO]] : tensor<64x?x64xf32>)
// CHECK: %[[ROWS:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2]] {{.*}} into tensor<?x64x64xf32>
// CHECK: %[[BACK:.*]] = linalg.transpose ins(%[[PRODUCT]] : tensor<64x?x64xf32>) outs(%[[ROWS]] : tensor<?x64x64xf32>) permutation = [1, 0, 2]
// CHECK: %[[R:.*]] = tensor.collapse_shape %[[BACK]] {{\[}}[0], [1, 2]] : tensor<?x64x64xf32> into tensor<?x4096xf32>
// CHECK: return %[[R]]
// snapkv-parallelize gives the panels to the threads and fuses the weight's
// transpose into that loop: each thread packs the panel it multiplies into a
// panel-sized tensor; the whole packed weight is never allocated.
// PAR-LABEL: func.func @wide
// PAR-NOT: tensor<64x512x64xf32>
// PAR: scf.forall (%[[P:.*]]) in (64)
// PAR: %[[PANEL:.*]] = tensor.empty() : tensor<1x512x64xf32>
// PAR: %[[PACKED:.*]] = linalg.transpose ins(%{{.*}} : tensor<512x1x64xf32>) outs(%[[PANEL]] : tensor<1x512x64xf32>) permutation = [1, 0, 2]
// PAR: linalg.generic {{.*}} ins(%{{.*}}, %[[PACKED]] : tensor<?x512xf32>, tensor<1x512x64xf32>)
// PAR-NOT: tensor<64x512x64xf32>
func.func @wide(%x: tensor<?x512xf32>, %w: tensor<512x4096xf32>) -> tensor<?x4096xf32> {
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x512xf32>
  %e = tensor.empty(%n) : tensor<?x4096xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x4096xf32>) -> tensor<?x4096xf32>
  %r = linalg.matmul ins(%x, %w : tensor<?x512xf32>, tensor<512x4096xf32>) outs(%f : tensor<?x4096xf32>) -> tensor<?x4096xf32>
  return %r : tensor<?x4096xf32>
}

// -----

// Left alone: a decode step's one-row product (it reads each weight once), a
// weight narrower than min-columns (SmolLM2's 576 x 1536), one that is not whole
// panels, and a matmul on integers.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: linalg.transpose
// CHECK-NOT: linalg.generic
// CHECK-COUNT-4: linalg.matmul
// With 32-column panels from 64 columns up, SmolLM2's 576 x 1536 is packed; the
// others are still left alone.
// SMALL-LABEL: func.func @left_alone
// SMALL: linalg.matmul ins(%{{.*}} : tensor<1x576xf32>, tensor<576x4096xf32>)
// SMALL: linalg.transpose {{.*}} outs(%{{.*}} : tensor<48x576x32xf32>)
// SMALL: linalg.matmul ins(%{{.*}} : tensor<?x576xf32>, tensor<576x2100xf32>)
// SMALL: linalg.matmul ins(%{{.*}} : tensor<?x576xi32>, tensor<576x2048xi32>)
func.func @left_alone(%x1: tensor<1x576xf32>, %w1: tensor<576x4096xf32>, %o1: tensor<1x4096xf32>,
                      %x: tensor<?x576xf32>, %w2: tensor<576x1536xf32>, %o2: tensor<?x1536xf32>,
                      %w3: tensor<576x2100xf32>, %o3: tensor<?x2100xf32>,
                      %xi: tensor<?x576xi32>, %w4: tensor<576x2048xi32>, %o4: tensor<?x2048xi32>)
    -> (tensor<1x4096xf32>, tensor<?x1536xf32>, tensor<?x2100xf32>, tensor<?x2048xi32>) {
  %r1 = linalg.matmul ins(%x1, %w1 : tensor<1x576xf32>, tensor<576x4096xf32>) outs(%o1 : tensor<1x4096xf32>) -> tensor<1x4096xf32>
  %r2 = linalg.matmul ins(%x, %w2 : tensor<?x576xf32>, tensor<576x1536xf32>) outs(%o2 : tensor<?x1536xf32>) -> tensor<?x1536xf32>
  %r3 = linalg.matmul ins(%x, %w3 : tensor<?x576xf32>, tensor<576x2100xf32>) outs(%o3 : tensor<?x2100xf32>) -> tensor<?x2100xf32>
  %r4 = linalg.matmul ins(%xi, %w4 : tensor<?x576xi32>, tensor<576x2048xi32>) outs(%o4 : tensor<?x2048xi32>) -> tensor<?x2048xi32>
  return %r1, %r2, %r3, %r4 : tensor<1x4096xf32>, tensor<?x1536xf32>, tensor<?x2100xf32>, tensor<?x2048xi32>
}
