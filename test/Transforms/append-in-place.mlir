// A decode step that appends one row to each cache and returns the longer
// tensors takes the caches as caller-owned buffers plus the number of valid
// rows of each (one i64 per buffer: layers may keep different lengths): the
// row is written in place, attention reads one row more, and the caches are
// no longer results. Anything else is left unchanged with a
// warning that says why.
// RUN: snapkv-opt %s --split-input-file --snapkv-append-in-place --verify-diagnostics | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --snapkv-append-in-place --verify-diagnostics --snapkv-append-in-place 2>&1 | FileCheck %s --check-prefix=TWICE

// CHECK-LABEL: func.func @decode(
// CHECK-SAME:    %[[K:.*]]: memref<1x2x?x4xf32>, %[[V:.*]]: memref<1x2x?x4xf32>,
// CHECK-SAME:    %[[X:.*]]: tensor<1x2x1x4xf32>, %[[ROWS:.*]]: tensor<2xi64>,
// CHECK-SAME:    %[[W:.*]]: tensor<4xf32> {snapkv.weight = "w"}) -> tensor<1x2x?x4xf32>
// CHECK-SAME:    attributes {snapkv.append_in_place = {buffers = [0, 1], dim = 2 : i64, rows = 3 : i64}}
// CHECK:         %[[R64:.*]] = tensor.extract %[[ROWS]][%c0]
// CHECK:         %[[R:.*]] = arith.index_cast %[[R64]] : i64 to index
// CHECK:         %[[N:.*]] = arith.addi %[[R]], %c1
// CHECK:         cf.assert {{.*}}"append in place: a row count is negative"
// CHECK:         %[[KT:.*]] = bufferization.to_tensor %[[K]] restrict writable
// CHECK:         cf.assert {{.*}}"append in place: the cache buffer has no room for the new row
// CHECK:         %[[VR64:.*]] = tensor.extract %[[ROWS]][%c1
// CHECK:         %[[VR:.*]] = arith.index_cast %[[VR64]] : i64 to index
// CHECK:         %[[VN:.*]] = arith.addi %[[VR]], %c1
// CHECK:         %[[VT:.*]] = bufferization.to_tensor %[[V]] restrict writable
// CHECK:         %[[KW:.*]] = tensor.insert_slice %[[X]] into %[[KT]][0, 0, %[[R]], 0] [1, 2, 1, 4] [1, 1, 1, 1]
// CHECK:         %[[KS:.*]] = tensor.extract_slice %[[KW]][0, 0, 0, 0] [1, 2, %[[N]], 4] [1, 1, 1, 1]
// CHECK:         %[[VW:.*]] = tensor.insert_slice %[[X]] into %[[VT]][0, 0, %[[VR]], 0]
// CHECK:         %[[VS:.*]] = tensor.extract_slice %[[VW]][0, 0, 0, 0] [1, 2, %[[VN]], 4]
// CHECK:         tensor.empty(%[[R]])
// CHECK:         linalg.add ins(%[[KS]], %[[VS]]
// CHECK:         bufferization.materialize_in_destination %[[KW]] in restrict writable %[[K]]
// CHECK:         bufferization.materialize_in_destination %[[VW]] in restrict writable %[[V]]
// CHECK:         return %{{.*}} : tensor<1x2x?x4xf32>
// TWICE-NOT: warning
func.func @decode(%k: tensor<1x2x?x4xf32>, %v: tensor<1x2x?x4xf32>, %x: tensor<1x2x1x4xf32>,
                  %w: tensor<4xf32> {snapkv.weight = "w"})
    -> (tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) {
  %c2 = arith.constant 2 : index
  %n = tensor.dim %k, %c2 : tensor<1x2x?x4xf32>
  %ks = tensor.concat dim(2) %k, %x : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  %vs = tensor.concat dim(2) %v, %x : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  %e = tensor.empty(%n) : tensor<1x2x?x4xf32>
  %m = tensor.dim %ks, %c2 : tensor<1x2x?x4xf32>
  %e2 = tensor.empty(%m) : tensor<1x2x?x4xf32>
  %sum = linalg.add ins(%ks, %vs : tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) outs(%e2 : tensor<1x2x?x4xf32>) -> tensor<1x2x?x4xf32>
  return %sum, %ks, %vs : tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>
}

// -----

// An entry point that passes its caches to one function per layer and
// returns their appended caches: the layer function and the entry point both
// take buffers and rows; each layer gets its own buffers' row counts.
// CHECK-LABEL: func.func private @layer(
// CHECK-SAME:    %{{.*}}: tensor<1x1x4xf32>, %{{.*}}: memref<1x2x?x4xf32>, %{{.*}}: memref<1x2x?x4xf32>, %{{.*}}: tensor<2xi64>) -> tensor<1x1x4xf32>
// CHECK-SAME:    snapkv.append_in_place = {buffers = [1, 2], dim = 2 : i64, rows = 3 : i64}
// CHECK-LABEL: func.func @decode(
// CHECK-SAME:    %[[H:.*]]: tensor<1x1x4xf32>, %[[K0:.*]]: memref<1x2x?x4xf32>, %[[V0:.*]]: memref<1x2x?x4xf32>, %[[K1:.*]]: memref<1x2x?x4xf32>, %[[V1:.*]]: memref<1x2x?x4xf32>, %[[ROWS:.*]]: tensor<4xi64>) -> tensor<1x1x4xf32>
// CHECK-SAME:    snapkv.append_in_place = {buffers = [1, 2, 3, 4], dim = 2 : i64, rows = 5 : i64}
// CHECK:         %[[L0:.*]] = tensor.extract_slice %[[ROWS]][0] [2] [1] : tensor<4xi64> to tensor<2xi64>
// CHECK:         %[[A:.*]] = call @layer(%[[H]], %[[K0]], %[[V0]], %[[L0]])
// CHECK:         %[[L1:.*]] = tensor.extract_slice %[[ROWS]][2] [2] [1] : tensor<4xi64> to tensor<2xi64>
// CHECK:         %[[B:.*]] = call @layer(%[[A]], %[[K1]], %[[V1]], %[[L1]])
// CHECK:         return %[[B]] : tensor<1x1x4xf32>
func.func private @layer(%h: tensor<1x1x4xf32>, %k: tensor<1x2x?x4xf32>, %v: tensor<1x2x?x4xf32>)
    -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) {
  %x = tensor.expand_shape %h [[0], [1, 2], [3]] output_shape [1, 1, 1, 4] : tensor<1x1x4xf32> into tensor<1x1x1x4xf32>
  %r = tensor.concat dim(1) %x, %x : (tensor<1x1x1x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x2x1x4xf32>
  %ks = tensor.concat dim(2) %k, %r : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  %vs = tensor.concat dim(2) %v, %r : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  return %h, %ks, %vs : tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>
}
func.func @decode(%h: tensor<1x1x4xf32>, %k0: tensor<1x2x?x4xf32>, %v0: tensor<1x2x?x4xf32>,
                  %k1: tensor<1x2x?x4xf32>, %v1: tensor<1x2x?x4xf32>)
    -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) {
  %a:3 = call @layer(%h, %k0, %v0) : (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>)
  %b:3 = call @layer(%a#0, %k1, %v1) : (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>)
  return %b#0, %a#1, %a#2, %b#1, %b#2 : tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>
}

// -----

// A layer's buffers that are not consecutive in the entry point (all keys
// first, then all values): its row counts are gathered one by one.
// CHECK-LABEL: func.func @decode(
// CHECK-SAME:    %[[ROWS:[^:]*]]: tensor<4xi64>) -> tensor<1x1x4xf32>
// CHECK-DAG:     %[[RK:.*]] = tensor.extract %[[ROWS]][%c0]
// CHECK-DAG:     %[[RV:.*]] = tensor.extract %[[ROWS]][%c2]
// CHECK:         tensor.from_elements %[[RK]], %[[RV]] : tensor<2xi64>
func.func private @layer(%h: tensor<1x1x4xf32>, %k: tensor<1x2x?x4xf32>, %v: tensor<1x2x?x4xf32>)
    -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) {
  %x = tensor.expand_shape %h [[0], [1, 2], [3]] output_shape [1, 1, 1, 4] : tensor<1x1x4xf32> into tensor<1x1x1x4xf32>
  %r = tensor.concat dim(1) %x, %x : (tensor<1x1x1x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x2x1x4xf32>
  %ks = tensor.concat dim(2) %k, %r : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  %vs = tensor.concat dim(2) %v, %r : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  return %h, %ks, %vs : tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>
}
func.func @decode(%h: tensor<1x1x4xf32>, %k0: tensor<1x2x?x4xf32>, %k1: tensor<1x2x?x4xf32>,
                  %v0: tensor<1x2x?x4xf32>, %v1: tensor<1x2x?x4xf32>)
    -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) {
  %a:3 = call @layer(%h, %k0, %v0) : (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>)
  %b:3 = call @layer(%a#0, %k1, %v1) : (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>)
  return %b#0, %a#1, %b#1, %a#2, %b#2 : tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>
}

// -----

// The old cache is read after the append (here: returned as it was): writing
// in place would change what that read sees.
// CHECK-LABEL: func.func @decode(%{{.*}}: tensor<1x2x?x4xf32>, %{{.*}}: tensor<1x2x1x4xf32>)
// CHECK-NOT:   snapkv.append_in_place
// expected-warning @+1 {{snapkv-append-in-place left the module unchanged: @decode: argument 0 is appended to but also used other than by tensor.dim}}
func.func @decode(%k: tensor<1x2x?x4xf32>, %x: tensor<1x2x1x4xf32>)
    -> (tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) {
  %ks = tensor.concat dim(2) %k, %x : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  return %ks, %k : tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>
}

// -----

// A static cache length leaves no room for another row.
// CHECK-LABEL: func.func @decode(%{{.*}}: tensor<1x2x8x4xf32>
// expected-warning @+1 {{argument 0 has a static length along dim 2: a buffer of that type has no room for another row}}
func.func @decode(%k: tensor<1x2x8x4xf32>, %x: tensor<1x2x1x4xf32>) -> tensor<1x2x9x4xf32> {
  %ks = tensor.concat dim(2) %k, %x : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x9x4xf32>
  return %ks : tensor<1x2x9x4xf32>
}

// -----

// Two rows at once, and an appended cache that is not returned.
// expected-warning @+1 {{argument 0 is concatenated with 2 rows (not one static row) along dim 2}}
func.func @decode(%k: tensor<1x2x?x4xf32>, %x: tensor<1x2x2x4xf32>) -> tensor<1x2x?x4xf32> {
  %ks = tensor.concat dim(2) %k, %x : (tensor<1x2x?x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x?x4xf32>
  return %ks : tensor<1x2x?x4xf32>
}

// -----

// expected-warning @+1 {{argument 0's appended cache is not returned}}
func.func @decode(%k: tensor<1x2x?x4xf32>, %x: tensor<1x2x1x4xf32>) -> index {
  %c2 = arith.constant 2 : index
  %ks = tensor.concat dim(2) %k, %x : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  %n = tensor.dim %ks, %c2 : tensor<1x2x?x4xf32>
  return %n : index
}

// -----

// A layer function called from elsewhere too cannot change its signature.
func.func private @layer(%k: tensor<1x2x?x4xf32>, %x: tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32> {
  %ks = tensor.concat dim(2) %k, %x : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  return %ks : tensor<1x2x?x4xf32>
}
// expected-warning @+1 {{as an entry point: @layer is used outside the entry point}}
func.func @decode(%k: tensor<1x2x?x4xf32>, %x: tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32> {
  %a = call @layer(%k, %x) : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  return %a : tensor<1x2x?x4xf32>
}
func.func @other(%k: tensor<1x2x?x4xf32>, %x: tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32> {
  %a = call @layer(%k, %x) : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  return %a : tensor<1x2x?x4xf32>
}

// -----

// expected-warning @+1 {{snapkv-append-in-place: no function @decode; module left unchanged}}
module {
  func.func @prefill() {
    return
  }
}
