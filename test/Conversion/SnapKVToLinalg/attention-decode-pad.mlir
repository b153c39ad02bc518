// RUN: snapkv-opt %s --convert-snapkv-to-linalg="tiling=cpu query-tile=4 key-tile=8" --canonicalize --cse | FileCheck %s

// A decode step pads its keys and values to one key tile only when the cache
// is shorter than a tile: a pad by nothing would allocate, zero-fill and copy
// the whole cache at every step. The long branch reads the caches in place.
// CHECK-LABEL: func.func @decode
// CHECK: %[[LEN:.*]] = tensor.dim %arg1, %c2
// CHECK: %[[LONG:.*]] = arith.cmpi sge, %[[LEN]], %c8
// CHECK: scf.if %[[LONG]]
// CHECK-NOT: tensor.pad
// CHECK: } else {
// CHECK: tensor.pad
// CHECK: tensor.pad
// CHECK: return
func.func @decode(%q: tensor<1x4x1x32xf32>, %k: tensor<1x2x?x32xf32>, %v: tensor<1x2x?x32xf32>) -> tensor<1x4x1x32xf32> {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x1x32xf32>) : tensor<1x4x1x32xf32>, tensor<1x2x?x32xf32>, tensor<1x2x?x32xf32> -> tensor<1x4x1x32xf32>
  return %o : tensor<1x4x1x32xf32>
}
