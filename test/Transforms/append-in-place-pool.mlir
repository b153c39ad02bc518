// layout=pool: a batched decode step (one sequence per batch row) writes
// into one pool per cache shared by all the sequences: each (sequence, head)
// is a segment with its own start, length and capacity (rows [P, 3, B, Hc]),
// the new rows go at start + length, and each batch row's attention is a
// snapkv.ragged_attention over its own segments.
// RUN: snapkv-opt %s --split-input-file --snapkv-append-in-place="func=decode_batch layout=pool" --verify-diagnostics | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --snapkv-append-in-place="func=decode_batch layout=pool" | snapkv-opt --split-input-file --snapkv-append-in-place="func=decode_batch layout=pool" 2>&1 >/dev/null | FileCheck %s --check-prefix=TWICE
// RUN: not snapkv-opt %s --split-input-file --snapkv-append-in-place="func=decode_batch layout=paged" 2>&1 | FileCheck %s --check-prefix=BAD

// Run again, only the unchanged module warns again.
// TWICE-NOT: warning
// TWICE: warning: {{.*}}argument 0's append is not read by a snapkv.attention
// TWICE-NOT: warning
// BAD: layout must be uniform or pool, got 'paged'

// CHECK-LABEL: func.func @decode_batch(
// CHECK-SAME:    %[[Q:.*]]: tensor<3x4x1x8xf32>, %[[K:.*]]: memref<1x?x8xf32>, %[[V:.*]]: memref<1x?x8xf32>,
// CHECK-SAME:    %[[KR:.*]]: tensor<3x2x1x8xf32>, %[[VR:.*]]: tensor<3x2x1x8xf32>, %[[ROWS:.*]]: tensor<1x3x3x2xi64>,
// CHECK-SAME:    %{{.*}}: tensor<8xf32> {snapkv.weight = "w"}) -> tensor<3x4x1x8xf32>
// CHECK-SAME:    attributes {snapkv.append_in_place = {buffers = [1, 2], dim = 1 : i64, layout = "pool", rows = [5]}}
// CHECK:         %[[STARTS:.*]] = tensor.extract_slice %[[ROWS]][0, 0, 0, 0] [1, 1, 3, 2] [1, 1, 1, 1] : tensor<1x3x3x2xi64> to tensor<3x2xi64>
// CHECK:         %[[LENGTHS:.*]] = tensor.extract_slice %[[ROWS]][0, 1, 0, 0] [1, 1, 3, 2]
// CHECK:         %[[CAPS:.*]] = tensor.extract_slice %[[ROWS]][0, 2, 0, 0] [1, 1, 3, 2]
// CHECK:         %[[KT:.*]] = bufferization.to_tensor %[[K]] restrict writable : memref<1x?x8xf32> to tensor<1x?x8xf32>
// CHECK:         %[[VT:.*]] = bufferization.to_tensor %[[V]] restrict writable
// CHECK:         %[[TOTAL:.*]] = tensor.dim %[[KT]], %{{.*}} : tensor<1x?x8xf32>
// CHECK:         %[[W:.*]]:2 = scf.for %[[B:.*]] = %c0 to %c3 step %c1 iter_args(%[[KA:.*]] = %[[KT]], %[[VA:.*]] = %[[VT]])
// CHECK:           scf.for %[[C:.*]] = %c0 to %c2 step %c1 iter_args(%[[KB:.*]] = %[[KA]], %[[VB:.*]] = %[[VA]])
// CHECK:             %[[S64:.*]] = tensor.extract %[[STARTS]][%[[B]], %[[C]]]
// CHECK:             %[[S:.*]] = arith.index_cast %[[S64]]
// CHECK:             %[[N64:.*]] = tensor.extract %[[LENGTHS]][%[[B]], %[[C]]]
// CHECK:             %[[N:.*]] = arith.index_cast %[[N64]]
// CHECK:             %[[CAP64:.*]] = tensor.extract %[[CAPS]][%[[B]], %[[C]]]
// CHECK:             %[[CAP:.*]] = arith.index_cast %[[CAP64]]
// CHECK:             cf.assert {{.*}}"append in place: a segment's start or length is negative"
// CHECK:             arith.cmpi slt, %[[N]], %[[CAP]]
// CHECK:             %[[END:.*]] = arith.addi %[[S]], %[[CAP]]
// CHECK:             arith.cmpi sle, %[[END]], %[[TOTAL]]
// CHECK:             cf.assert {{.*}}"append in place: a segment has no room for the new row (its length reaches its capacity, or it ends past the pool)"
// CHECK:             %[[AT:.*]] = arith.addi %[[S]], %[[N]]
// CHECK:             %[[KROW:.*]] = tensor.extract_slice %[[KR]][%[[B]], %[[C]], 0, 0] [1, 1, 1, 8]
// CHECK:             tensor.insert_slice %[[KROW]] into %[[KB]][0, %[[AT]], 0] [1, 1, 8]
// CHECK:             %[[VROW:.*]] = tensor.extract_slice %[[VR]][%[[B]], %[[C]], 0, 0] [1, 1, 1, 8]
// CHECK:             tensor.insert_slice %[[VROW]] into %[[VB]][0, %[[AT]], 0] [1, 1, 8]
// CHECK:         %[[GROWN:.*]] = linalg.generic {{.*}} ins(%[[LENGTHS]] : tensor<3x2xi64>)
// CHECK:           arith.addi
// CHECK:         %[[OUT:.*]] = scf.for %[[R:.*]] = %c0 to %c3 step %c1 iter_args(%[[ACC:.*]] = %{{.*}}) -> (tensor<3x4x1x8xf32>)
// CHECK:           %[[QR:.*]] = tensor.extract_slice %[[Q]][%[[R]], 0, 0, 0] [1, 4, 1, 8] [1, 1, 1, 1] : tensor<3x4x1x8xf32> to tensor<1x4x1x8xf32>
// CHECK:           %[[SR:.*]] = tensor.extract_slice %[[STARTS]][%[[R]], 0] [1, 2] [1, 1] : tensor<3x2xi64> to tensor<1x2xi64>
// CHECK:           %[[NR:.*]] = tensor.extract_slice %[[GROWN]][%[[R]], 0] [1, 2] [1, 1]
// CHECK:           %[[O:.*]] = snapkv.ragged_attention %[[QR]], %[[W]]#0, %[[W]]#1 rows(%[[SR]], %[[NR]]) scale 2.500000e-01 : tensor<1x4x1x8xf32>, tensor<1x?x8xf32>, tensor<1x?x8xf32>, tensor<1x2xi64> -> tensor<1x4x1x8xf32>
// CHECK:           tensor.insert_slice %[[O]] into %[[ACC]][%[[R]], 0, 0, 0] [1, 4, 1, 8]
// CHECK:         bufferization.materialize_in_destination %[[W]]#0 in restrict writable %[[K]]
// CHECK:         bufferization.materialize_in_destination %[[W]]#1 in restrict writable %[[V]]
// CHECK:         return %[[OUT]] : tensor<3x4x1x8xf32>

func.func @decode_batch(%q: tensor<3x4x1x8xf32>, %k: tensor<3x2x?x8xf32>, %v: tensor<3x2x?x8xf32>,
                        %kr: tensor<3x2x1x8xf32>, %vr: tensor<3x2x1x8xf32>,
                        %w: tensor<8xf32> {snapkv.weight = "w"})
    -> (tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>) {
  %ks = tensor.concat dim(2) %k, %kr : (tensor<3x2x?x8xf32>, tensor<3x2x1x8xf32>) -> tensor<3x2x?x8xf32>
  %vs = tensor.concat dim(2) %v, %vr : (tensor<3x2x?x8xf32>, tensor<3x2x1x8xf32>) -> tensor<3x2x?x8xf32>
  %e = tensor.empty() : tensor<3x4x1x8xf32>
  %o = snapkv.attention %q, %ks, %vs scale 0.25 outs(%e : tensor<3x4x1x8xf32>) : tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32> -> tensor<3x4x1x8xf32>
  return %o, %ks, %vs : tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>
}

// -----

// An entry point calling one function per layer gets one rows argument per
// call, passed through: the entry point stays glue (no slices of its own).
// CHECK-LABEL: func.func private @layer(
// CHECK-SAME:    %{{.*}}: tensor<3x4x1x8xf32>, %{{.*}}: memref<1x?x8xf32>, %{{.*}}: memref<1x?x8xf32>, %{{.*}}: tensor<3x2x1x8xf32>, %{{.*}}: tensor<3x2x1x8xf32>, %{{.*}}: tensor<1x3x3x2xi64>) -> tensor<3x4x1x8xf32>
// CHECK-SAME:    snapkv.append_in_place = {buffers = [1, 2], dim = 1 : i64, layout = "pool", rows = [5]}
// CHECK:         snapkv.ragged_attention
// CHECK-LABEL: func.func @decode_batch(
// CHECK-SAME:    %[[Q:.*]]: tensor<3x4x1x8xf32>, %[[K0:.*]]: memref<1x?x8xf32>, %[[V0:.*]]: memref<1x?x8xf32>, %[[K1:.*]]: memref<1x?x8xf32>, %[[V1:.*]]: memref<1x?x8xf32>,
// CHECK-SAME:    %[[KR:.*]]: tensor<3x2x1x8xf32>, %[[VR:.*]]: tensor<3x2x1x8xf32>, %[[R0:.*]]: tensor<1x3x3x2xi64>, %[[R1:.*]]: tensor<1x3x3x2xi64>) -> tensor<3x4x1x8xf32>
// CHECK-SAME:    snapkv.append_in_place = {buffers = [1, 2, 3, 4], dim = 1 : i64, layout = "pool", rows = [7, 8]}
// CHECK-NEXT:    %[[A:.*]] = call @layer(%[[Q]], %[[K0]], %[[V0]], %[[KR]], %[[VR]], %[[R0]])
// CHECK-NEXT:    %[[B:.*]] = call @layer(%[[A]], %[[K1]], %[[V1]], %[[KR]], %[[VR]], %[[R1]])
// CHECK-NEXT:    return %[[B]] : tensor<3x4x1x8xf32>
func.func private @layer(%q: tensor<3x4x1x8xf32>, %k: tensor<3x2x?x8xf32>, %v: tensor<3x2x?x8xf32>,
                         %kr: tensor<3x2x1x8xf32>, %vr: tensor<3x2x1x8xf32>)
    -> (tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>) {
  %ks = tensor.concat dim(2) %k, %kr : (tensor<3x2x?x8xf32>, tensor<3x2x1x8xf32>) -> tensor<3x2x?x8xf32>
  %vs = tensor.concat dim(2) %v, %vr : (tensor<3x2x?x8xf32>, tensor<3x2x1x8xf32>) -> tensor<3x2x?x8xf32>
  %e = tensor.empty() : tensor<3x4x1x8xf32>
  %o = snapkv.attention %q, %ks, %vs outs(%e : tensor<3x4x1x8xf32>) : tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32> -> tensor<3x4x1x8xf32>
  return %o, %ks, %vs : tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>
}

func.func @decode_batch(%q: tensor<3x4x1x8xf32>, %k0: tensor<3x2x?x8xf32>, %v0: tensor<3x2x?x8xf32>,
                        %k1: tensor<3x2x?x8xf32>, %v1: tensor<3x2x?x8xf32>,
                        %kr: tensor<3x2x1x8xf32>, %vr: tensor<3x2x1x8xf32>)
    -> (tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>) {
  %a:3 = call @layer(%q, %k0, %v0, %kr, %vr) : (tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x1x8xf32>, tensor<3x2x1x8xf32>) -> (tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>)
  %b:3 = call @layer(%a#0, %k1, %v1, %kr, %vr) : (tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x1x8xf32>, tensor<3x2x1x8xf32>) -> (tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>)
  return %b#0, %a#1, %a#2, %b#1, %b#2 : tensor<3x4x1x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>, tensor<3x2x?x8xf32>
}

// -----

// An appended cache that no attention reads: left unchanged.
// expected-warning @+1 {{snapkv-append-in-place left the module unchanged: @decode_batch: argument 0's append is not read by a snapkv.attention}}
func.func @decode_batch(%k: tensor<3x2x?x8xf32>, %kr: tensor<3x2x1x8xf32>) -> tensor<3x2x?x8xf32> {
  %ks = tensor.concat dim(2) %k, %kr : (tensor<3x2x?x8xf32>, tensor<3x2x1x8xf32>) -> tensor<3x2x?x8xf32>
  return %ks : tensor<3x2x?x8xf32>
}
