// RUN: snapkv-opt %s --split-input-file --convert-snapkv-to-linalg="tiling=cpu query-tile=4 key-tile=8" --canonicalize --cse | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --convert-snapkv-to-linalg="tiling=gpu" -verify-diagnostics -o /dev/null

// snapkv.attention as a tiled online softmax: the queries padded to whole
// tiles of 4 rows and transposed once, the keys and values padded to at
// least one tile of 8; an scf.forall over (query head, row tile) (the unit
// batch drops out), in each an scf.for over the visible key tiles carrying
// the row maximum, the row sum and the [4, D] accumulator, with static
// [8, 4] logits (rows innermost: the reductions over keys run across
// vectors) and [8, D] key and value tiles (the GQA repeat is the kv head
// index h / 2, no copy). Nothing [L, L] is built.
// CHECK-LABEL: func.func @attention
// CHECK-NOT: tensor<?x?xf32>
// CHECK: tensor.pad %arg0 low[0, 0, 0, 0] high[0, 0, %{{.*}}, 0]
// CHECK: tensor.pad %arg1
// CHECK: tensor.pad %arg2
// CHECK: %[[QT:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<1x4x?x16xf32>) outs(%{{.*}} : tensor<1x4x16x?xf32>)
// CHECK: scf.forall (%[[H:.*]], %[[T:.*]]) in (4, %{{.*}}) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x4x?x16xf32>)
// CHECK: %[[KV:.*]] = arith.divui %[[H]], %c2
// CHECK: tensor.extract_slice %[[QT]][0, %[[H]], 0, %{{.*}}] [1, 1, 16, 4] [1, 1, 1, 1] : tensor<1x4x16x?xf32> to tensor<16x4xf32>
// CHECK: scf.for %{{.*}} = %c0 to %{{.*}} step %c1 iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (tensor<4xf32>, tensor<4xf32>, tensor<4x16xf32>)
// CHECK: tensor.extract_slice %{{.*}}[0, %[[KV]], %{{.*}}, 0] [1, 1, 8, 16] [1, 1, 1, 1] : tensor<1x2x?x16xf32> to tensor<8x16xf32>
// CHECK: tensor.extract_slice %{{.*}}[0, %[[KV]], %{{.*}}, 0] [1, 1, 8, 16] [1, 1, 1, 1] : tensor<1x2x?x16xf32> to tensor<8x16xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<8x16xf32>, tensor<16x4xf32>) outs(%{{.*}} : tensor<8x4xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction", "parallel"]} ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<8x4xf32>, tensor<8xi32>, tensor<4xi32>) outs(%{{.*}} : tensor<4xf32>)
// CHECK: math.exp
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<8x4xf32>, tensor<8x16xf32>) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK: scf.yield
// CHECK: arith.divf
// CHECK: tensor.parallel_insert_slice %{{.*}} into %{{.*}}[0, %[[H]], %{{.*}}, 0] [1, 1, 4, 16]
// CHECK: tensor.extract_slice %{{.*}}[0, 0, 0, 0] [1, 4, %{{.*}}, 16] [1, 1, 1, 1] : tensor<1x4x?x16xf32> to tensor<1x4x?x16xf32>
func.func @attention(%q: tensor<1x4x?x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>) -> tensor<1x4x?x16xf32> {
  // expected-error @+1 {{'snapkv.attention' op has no GPU lowering (tiling=gpu); fuse attention only for the CPU}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x?x16xf32>) : tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x?x16xf32>
  return %o : tensor<1x4x?x16xf32>
}

// -----

// f16 operands: products in f32 (extf), the result truncated back.
// CHECK-LABEL: func.func @half
// CHECK: arith.extf
// CHECK: arith.truncf
// CHECK: return %{{.*}} : tensor<1x2x8x16xf16>
func.func @half(%q: tensor<1x2x8x16xf16>, %k: tensor<1x1x8x16xf16>, %v: tensor<1x1x8x16xf16>) -> tensor<1x2x8x16xf16> {
  // expected-error @+1 {{has no GPU lowering}}
  %o = snapkv.attention %q, %k, %v scale 0.5 outs(%q : tensor<1x2x8x16xf16>) : tensor<1x2x8x16xf16>, tensor<1x1x8x16xf16>, tensor<1x1x8x16xf16> -> tensor<1x2x8x16xf16>
  return %o : tensor<1x2x8x16xf16>
}

// -----

// A decode step (one static query row per head, D a multiple of 16): the
// tile's rows are the two query heads of one kv head, so each key and value
// tile is read once for both; the logits are dot products along D, as
// 16-lane partial sums (lanes the vector, each key row read whole) reduced
// over the lanes; the key tiles are split four ways (FlashDecoding), each
// split's running maximum, sum and accumulator combined after the forall.
// CHECK-LABEL: func.func @decode
// CHECK: scf.forall (%[[KV:.*]], %[[S:.*]]) in (2, 4) shared_outs({{.*}}) -> (tensor<1x2x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x2x32xf32>)
// CHECK: %[[H:.*]] = arith.muli %[[KV]], %c2
// CHECK: tensor.extract_slice %{{.*}}[0, %[[H]], 0, 0] [1, 2, 32, 1] [1, 1, 1, 1] : tensor<1x4x32x1xf32> to tensor<1x2x32x1xf32>
// CHECK: tensor.collapse_shape %{{.*}} {{\[}}[0, 1], [2, 3]] : tensor<1x2x32x1xf32> into tensor<2x32xf32>
// CHECK: %[[PER:.*]] = arith.ceildivsi %{{.*}}, %c4
// CHECK: scf.for
// CHECK: tensor.extract_slice %{{.*}}[0, %[[KV]], %{{.*}}, 0] [1, 1, 8, 32]
// CHECK: tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2]] output_shape [8, 2, 16] : tensor<8x32xf32> into tensor<8x2x16xf32>
// CHECK: tensor.expand_shape %{{.*}} {{\[}}[0], [1, 2]] output_shape [2, 2, 16] : tensor<2x32xf32> into tensor<2x2x16xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<8x2x16xf32>, tensor<2x2x16xf32>) outs(%{{.*}} : tensor<8x2x16xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}} : tensor<8x2x16xf32>) outs(%{{.*}} : tensor<8x2xf32>)
// CHECK: tensor.parallel_insert_slice %{{.*}} into %{{.*}}[0, %[[KV]], %[[S]], 0, 0] [1, 1, 1, 2, 32]
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}} : tensor<1x2x4x2xf32>) outs(%{{.*}} : tensor<1x2x2xf32>)
// CHECK: math.exp
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<1x2x4x2x32xf32>, tensor<1x2x4x2xf32>, tensor<1x2x2xf32>)
// CHECK: arith.divf
// CHECK: tensor.collapse_shape %{{.*}} {{\[}}[0], [1, 2], [3]] : tensor<1x2x2x32xf32> into tensor<1x4x32xf32>
// CHECK: tensor.expand_shape %{{.*}} {{\[}}[0], [1], [2, 3]] output_shape [1, 4, 1, 32]
func.func @decode(%q: tensor<1x4x1x32xf32>, %k: tensor<1x2x?x32xf32>, %v: tensor<1x2x?x32xf32>) -> tensor<1x4x1x32xf32> {
  // expected-error @+1 {{has no GPU lowering}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x1x32xf32>) : tensor<1x4x1x32xf32>, tensor<1x2x?x32xf32>, tensor<1x2x?x32xf32> -> tensor<1x4x1x32xf32>
  return %o : tensor<1x4x1x32xf32>
}

// -----

// A ragged cache: per (batch, cache head) the head's rows checked against the
// cache and sliced, then a snapkv.attention of its query heads over them
// (lowered as a decode step), written into the result.
// CHECK-LABEL: func.func @ragged
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x1x8xf32>, %[[K:.*]]: tensor<2x?x8xf32>, %[[V:.*]]: tensor<2x?x8xf32>, %[[S:.*]]: tensor<2x2xi64>, %[[L:.*]]: tensor<2x2xi64>)
// CHECK: scf.for %[[B:[a-z0-9]+]] =
// CHECK: scf.for %[[H:[a-z0-9]+]] =
// CHECK: tensor.extract %[[S]][%[[B]], %[[H]]]
// CHECK: tensor.extract %[[L]][%[[B]], %[[H]]]
// CHECK: cf.assert %{{.*}}, "snapkv.ragged_attention: a head has no rows"
// CHECK: cf.assert %{{.*}}, "snapkv.ragged_attention: a head's rows start before row 0"
// CHECK: cf.assert %{{.*}}, "snapkv.ragged_attention: a head's rows end past the cache"
// CHECK: tensor.extract_slice %[[K]][%[[B]], %{{.*}}, 0] [1, %{{.*}}, 8] [1, 1, 1]
// CHECK: tensor.extract_slice %[[V]][%[[B]], %{{.*}}, 0] [1, %{{.*}}, 8] [1, 1, 1]
// CHECK: tensor.extract_slice %[[Q]][%[[B]], %{{.*}}, 0, 0] [1, 2, 1, 8] [1, 1, 1, 1]
// CHECK: scf.forall
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[%[[B]], %{{.*}}, 0, 0] [1, 2, 1, 8] [1, 1, 1, 1]
// expected-error @+2 {{'snapkv.ragged_attention' op has no GPU lowering (tiling=gpu); ragged attention is lowered for the CPU only}}
func.func @ragged(%q: tensor<2x4x1x8xf32>, %k: tensor<2x?x8xf32>, %v: tensor<2x?x8xf32>, %s: tensor<2x2xi64>, %l: tensor<2x2xi64>) -> tensor<2x4x1x8xf32> {
  %o = snapkv.ragged_attention %q, %k, %v rows(%s, %l) : tensor<2x4x1x8xf32>, tensor<2x?x8xf32>, tensor<2x?x8xf32>, tensor<2x2xi64> -> tensor<2x4x1x8xf32>
  return %o : tensor<2x4x1x8xf32>
}
