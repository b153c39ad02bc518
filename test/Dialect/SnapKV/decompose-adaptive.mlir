// snapkv-decompose-select splits snapkv.select_adaptive into the stage ops
// (SelectAdaptiveOp::decomposeOperation): the scores, the floor (each
// head's best positions raised to +inf), one top_positions over the layer's
// flattened [Hc x P] scores, linalg ops that count and place each head's
// rows, and one gather each for the keys and values from [1, Hkv x L] rows.
// RUN: snapkv-opt %s --split-input-file --snapkv-decompose-select | FileCheck %s
// With adaptive=false (what the GPU pipeline runs) the op stays for
// convert-snapkv-to-linalg, which splits it itself.
// RUN: snapkv-opt %s --split-input-file --snapkv-decompose-select=adaptive=false | FileCheck %s --check-prefix=KEEP
// KEEP-LABEL: func.func @long
// KEEP: snapkv.select_adaptive
// KEEP-NOT: snapkv.top_positions
// KEEP-LABEL: func.func @no_floor
// KEEP: snapkv.select_adaptive

// CHECK-LABEL: func.func @long
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x2x8xf32>, %[[K:.*]]: tensor<1x2x20x8xf32>, %[[V:.*]]: tensor<1x2x20x8xf32>)
// CHECK: %{{.*}}, %[[POOLED:.*]] = snapkv.score %[[Q]], %[[K]] window 2 kernel 3 gqa mean
// CHECK-SAME: -> (tensor<1x2x18xf32>, tensor<1x2x18xf32>)
// The floor: 3 positions per head (a window of one is appended and not
// read), then each head's floor found elementwise (its last score m, the last
// position tying with m) and raised to +inf: no scatter.
// CHECK: %[[BEST:.*]] = snapkv.top_positions %[[POOLED]] window 1 capacity 4 outs(%{{.*}} : tensor<1x2x4xi64>)
// CHECK: %[[FLOORS:.*]] = tensor.extract_slice %[[BEST]][0, 0, 0] [1, 2, 3] [1, 1, 1]
// CHECK: %[[LAST:.*]] = linalg.generic {{.*}} ins(%[[FLOORS]] : tensor<1x2x3xi64>) outs(%{{.*}} : tensor<1x2xf32>)
// CHECK: %[[TIED:.*]] = linalg.generic {{.*}} ins(%[[FLOORS]], %[[LAST]] : tensor<1x2x3xi64>, tensor<1x2xf32>) outs(%{{.*}} : tensor<1x2xi64>)
// CHECK: %[[RAISED:.*]] = linalg.generic {{.*}} ins(%[[POOLED]], %[[LAST]], %[[TIED]] : tensor<1x2x18xf32>, tensor<1x2xf32>, tensor<1x2xi64>) outs(%{{.*}} : tensor<1x2x18xf32>)
// CHECK: arith.constant 0x7F800000 : f32
// The budget, Hc x (C - W) = 16, over the flattened 2 x 18 scores.
// CHECK: %[[FLAT2:.*]] = tensor.collapse_shape %[[RAISED]] {{\[}}[0], [1, 2]] : tensor<1x2x18xf32> into tensor<1x36xf32>
// CHECK: %[[FLAT:.*]] = tensor.expand_shape %[[FLAT2]] {{\[}}[0, 1], [2]] output_shape [1, 1, 36]
// CHECK: %[[TOP:.*]] = snapkv.top_positions %[[FLAT]] window 1 capacity 17 outs(%{{.*}} : tensor<1x1x17xi64>) : tensor<1x1x36xf32> -> tensor<1x1x17xi64>
// Counts per head, then offsets, then each row's head, position and source row.
// CHECK: %[[CHOSEN:.*]] = tensor.extract_slice %[[TOP]][0, 0, 0] [1, 1, 16] [1, 1, 1] : tensor<1x1x17xi64> to tensor<1x16xi64>
// CHECK: %[[COUNTS:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[CHOSEN]] : tensor<1x16xi64>) outs(%{{.*}} : tensor<1x2xi64>)
// CHECK: %[[OFFSETS:.*]] = linalg.generic {{.*}} ins(%[[COUNTS]] : tensor<1x2xi64>) outs(%{{.*}} : tensor<1x3xi64>)
// CHECK: %[[ENDS:.*]] = tensor.extract_slice %[[OFFSETS]][0, 1] [1, 2] [1, 1]
// CHECK: %[[HEAD:.*]] = linalg.generic {{.*}} ins(%[[ENDS]] : tensor<1x2xi64>) outs(%{{.*}} : tensor<1x20xi64>)
// CHECK: %[[PLACED:.*]]:2 = linalg.generic {{.*}} ins(%[[HEAD]] : tensor<1x20xi64>)
// CHECK: tensor.extract %[[OFFSETS]]
// CHECK: tensor.extract %[[COUNTS]]
// CHECK: tensor.extract %[[TOP]]
// CHECK: %[[WHERE:.*]] = tensor.expand_shape %[[PLACED]]#1 {{\[}}[0, 1], [2]] output_shape [1, 1, 20]
// CHECK: %[[KROWS:.*]] = tensor.collapse_shape %[[K]] {{\[}}[0], [1, 2], [3]] : tensor<1x2x20x8xf32> into tensor<1x40x8xf32>
// CHECK: %[[KFLAT:.*]] = tensor.expand_shape %[[KROWS]]
// CHECK: %[[KG:.*]] = snapkv.gather %[[KFLAT]][%[[WHERE]]] outs(%{{.*}} : tensor<1x1x20x8xf32>) : tensor<1x1x40x8xf32>, tensor<1x1x20xi64> -> tensor<1x1x20x8xf32>
// CHECK: %[[KS:.*]] = tensor.collapse_shape %[[KG]] {{\[}}[0, 1], [2], [3]] : tensor<1x1x20x8xf32> into tensor<1x20x8xf32>
// CHECK: %[[VROWS:.*]] = tensor.collapse_shape %[[V]]
// CHECK: snapkv.gather
// CHECK: %[[VS:.*]] = tensor.collapse_shape
// CHECK: return %[[KS]], %[[VS]], %[[PLACED]]#0, %[[OFFSETS]]
func.func @long(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x20x8xf32>, %v: tensor<1x2x20x8xf32>)
    -> (tensor<1x20x8xf32>, tensor<1x20x8xf32>, tensor<1x20xi64>, tensor<1x3xi64>) {
  %a:4 = snapkv.select_adaptive %q, %k, %v window 2 capacity 10 floor 3 kernel 3 gqa mean
      : (tensor<1x4x2x8xf32>, tensor<1x2x20x8xf32>, tensor<1x2x20x8xf32>)
      -> (tensor<1x20x8xf32>, tensor<1x20x8xf32>, tensor<1x20xi64>, tensor<1x3xi64>)
  return %a#0, %a#1, %a#2, %a#3 : tensor<1x20x8xf32>, tensor<1x20x8xf32>, tensor<1x20xi64>, tensor<1x3xi64>
}

// -----

// Without a floor there is no per-head stage before the shared one.
// CHECK-LABEL: func.func @no_floor
// CHECK: snapkv.score
// CHECK-NOT: outs(%{{.*}} : tensor<1x4x{{[0-9]+}}xi64>)
// CHECK: snapkv.top_positions %{{.*}} window 1 capacity 33 outs(%{{.*}} : tensor<1x1x33xi64>) : tensor<1x1x72xf32>
func.func @no_floor(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x20x8xf32>)
    -> (tensor<1x40x8xf32>, tensor<1x40xi64>, tensor<1x5xi64>) {
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10
      : (tensor<1x4x2x8xf32>, tensor<1x2x20x8xf32>, tensor<1x2x20x8xf32>)
      -> (tensor<1x40x8xf32>, tensor<1x40x8xf32>, tensor<1x40xi64>, tensor<1x5xi64>)
  return %a#0, %a#2, %a#3 : tensor<1x40x8xf32>, tensor<1x40xi64>, tensor<1x5xi64>
}

// -----

// A short static prompt: every head keeps every position, row s reading
// position s mod L of kv head (s div L) / G.
// CHECK-LABEL: func.func @short
// CHECK-NOT: snapkv.score
// CHECK: %[[IDX:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x32xi64>)
// CHECK: arith.remui
// CHECK: %[[SRC:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x32xi64>)
// CHECK: arith.divui
// CHECK: %[[OFF:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x5xi64>)
// CHECK: snapkv.gather {{.*}} : tensor<1x1x16x8xf32>, tensor<1x1x32xi64> -> tensor<1x1x32x8xf32>
func.func @short(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>)
    -> (tensor<1x32x8xf32>, tensor<1x32xi64>, tensor<1x5xi64>) {
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10
      : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
      -> (tensor<1x32x8xf32>, tensor<1x32x8xf32>, tensor<1x32xi64>, tensor<1x5xi64>)
  return %a#0, %a#2, %a#3 : tensor<1x32x8xf32>, tensor<1x32xi64>, tensor<1x5xi64>
}

// -----

// A dynamic prompt: the whole op's checks (heads x L must fit i32), then the
// bypass or the selection.
// CHECK-LABEL: func.func @dynamic
// CHECK: cf.assert %{{.*}}, "snapkv.select_adaptive: prompt length of 'values' differs from 'keys'"
// CHECK: cf.assert %{{.*}}, "snapkv.select_adaptive: prompt length (keys dim 2) is shorter than window 2"
// CHECK: %[[LIMIT:.*]] = arith.constant 1073741823 : index
// CHECK: cf.assert %{{.*}}, "snapkv.select_adaptive: heads x prompt length must be below 2^31 - 1"
// CHECK: scf.if
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x?xi64>)
// CHECK: } else {
// CHECK: snapkv.score
// CHECK: snapkv.top_positions
// CHECK: tensor.cast %{{.*}} : tensor<1x20x8xf32> to tensor<1x?x8xf32>
func.func @dynamic(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>)
    -> (tensor<1x?x8xf32>, tensor<1x?xi64>, tensor<1x3xi64>) {
  %a:4 = snapkv.select_adaptive %q, %k, %v window 2 capacity 10 gqa max
      : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x?x8xf32>, tensor<1x?x8xf32>, tensor<1x?xi64>, tensor<1x3xi64>)
  return %a#0, %a#2, %a#3 : tensor<1x?x8xf32>, tensor<1x?xi64>, tensor<1x3xi64>
}
