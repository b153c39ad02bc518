// RUN: snapkv-opt %s --split-input-file --convert-snapkv-to-linalg="key-tile=8" --canonicalize --cse | FileCheck %s

// Untiled (no #snapkv.lowering_config, tiling=none): snapkv.attention as the
// form IREE takes. One scf.for over key tiles of 8 (the keys and values
// zero-padded to whole tiles), each step linalg ops over every (kv head,
// group head, row) that sees the tile, rows from max(k0 - offset, 0); the
// GQA group is a dimension of the queries' view [B, Hkv, G, L, D], no copy.
// No scf.forall, nothing [L, L].
// CHECK-LABEL: func.func @prefill
// CHECK-NOT: scf.forall
// CHECK: cf.assert {{.*}} "snapkv.attention: length of 'values' differs from 'keys'"
// CHECK: %[[Q:.*]] = tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2], [3], [4]] {{.*}} : tensor<1x4x?x16xf32> into tensor<1x2x2x?x16xf32>
// CHECK: %[[TILES:.*]] = arith.ceildivsi %{{.*}}, %c8
// CHECK: tensor.pad
// CHECK: tensor.pad
// CHECK: scf.for %[[T:.*]] = %c0 to %[[TILES]] step %c1 iter_args({{.*}}) -> (tensor<1x2x2x?xf32>, tensor<1x2x2x?xf32>, tensor<1x2x2x?x16xf32>)
// CHECK: %[[K0:.*]] = arith.muli %[[T]], %c8
// CHECK: %[[FROM:.*]] = arith.maxsi
// CHECK: %[[ROW0:.*]] = arith.minsi %[[FROM]]
// CHECK: tensor.extract_slice %{{.*}}[0, 0, %[[K0]], 0] [1, 2, 8, 16]
// CHECK: tensor.extract_slice %[[Q]][0, 0, 0, %[[ROW0]], 0]
// The logits contract D with the tile's keys; the mask compares key k0 + j with
// row row0 + i + offset and with the key count.
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]} ins({{.*}} : tensor<1x2x2x?x16xf32>, tensor<1x2x8x16xf32>) outs({{.*}} : tensor<1x2x2x?x8xf32>)
// CHECK: linalg.index 3
// CHECK: linalg.index 4
// CHECK: arith.cmpi sle
// CHECK: arith.cmpi slt
// CHECK: arith.select {{.*}} %cst_{{[0-9]+}} : f32
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: tensor.insert_slice
// CHECK: scf.yield
// CHECK: tensor.collapse_shape {{.*}} into tensor<1x4x?x16xf32>
// CHECK-NOT: scf.forall
// CHECK: return
func.func @prefill(%q: tensor<1x4x?x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>) -> tensor<1x4x?x16xf32> {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x?x16xf32>) : tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x?x16xf32>
  return %o : tensor<1x4x?x16xf32>
}

// -----

// A decode step (one static query row) at an explicit position: every key in
// one step, no loop, no padding; f16 operands widened to f32 and the result
// narrowed back.
// CHECK-LABEL: func.func @decode
// CHECK-NOT: scf.for
// CHECK-NOT: tensor.pad
// CHECK: arith.extf
// CHECK: math.exp
// CHECK: arith.truncf
// CHECK: tensor.collapse_shape {{.*}} into tensor<1x4x1x16xf16>
// CHECK-NOT: scf.forall
func.func @decode(%q: tensor<1x4x1x16xf16>, %k: tensor<1x2x?x16xf16>, %v: tensor<1x2x?x16xf16>, %pos: index) -> tensor<1x4x1x16xf16> {
  %o = snapkv.attention %q, %k, %v offset %pos outs(%q : tensor<1x4x1x16xf16>) : tensor<1x4x1x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16> -> tensor<1x4x1x16xf16>
  return %o : tensor<1x4x1x16xf16>
}
