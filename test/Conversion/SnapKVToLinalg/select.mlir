// RUN: snapkv-opt %s --convert-snapkv-to-linalg --split-input-file | FileCheck %s

// Static shapes, expand policy: L = 16, W = 4 (P = 12), C = 8, D = 8,
// Hq = 4, Hkv = 2 (G = 2), kernel 5, avg.
// CHECK-LABEL: func.func @static_expand
// CHECK-NOT: snapkv.select
// Logits: K packed into 16-key panels, f32 multiply-add over D.
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]
// CHECK: arith.mulf {{.*}} fastmath<contract> : f32
// CHECK: %[[LOGITS:.*]] = tensor.collapse_shape {{.*}} into tensor<1x2x2x4x16xf32>
// Row max over the causally visible columns j <= P + t of the FULL row.
// CHECK: %[[MAX:.*]] = linalg.generic {{.*}} ins(%[[LOGITS]] : tensor<1x2x2x4x16xf32>) outs({{.*}} : tensor<1x2x2x4xf32>)
// CHECK: %[[T:.*]] = linalg.index 3
// CHECK: %[[J:.*]] = linalg.index 4
// CHECK: %[[LAST:.*]] = arith.addi %c12, %[[T]]
// CHECK: arith.cmpi ule, %[[J]], %[[LAST]]
// CHECK: arith.maximumf
// The softmax denominator sums all 16 columns (prefix AND window), masked.
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[LOGITS]], %[[MAX]] : tensor<1x2x2x4x16xf32>, tensor<1x2x2x4xf32>)
// CHECK: arith.cmpi ule
// CHECK: math.exp
// Votes: only the 12 prefix columns, each probability divided by its row sum.
// CHECK: %[[PREFIX:.*]] = tensor.extract_slice %[[LOGITS]][0, 0, 0, 0, 0] [1, 2, 2, 4, 12]
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction", "parallel"]} ins(%[[PREFIX]], %[[MAX]], %[[SUM]] :
// CHECK: math.exp
// CHECK: arith.divf
// expand: one selection per query head.
// CHECK: tensor.collapse_shape {{.*}} into tensor<1x4x12xf32>
// avg pooling: zero padding of kernel/2 on each side, then division by 5.
// CHECK: tensor.pad {{.*}} low[0, 0, 2] high[0, 0, 2]
// CHECK: tensor.yield %cst{{.*}} : f32
// CHECK: arith.divf %{{.*}}, %cst{{.*}} : f32
// Order-preserving keys: NaN maps to 0, below every number.
// CHECK: arith.bitcast {{.*}} : f32 to i32
// CHECK: arith.cmpf uno
// Bitwise threshold search: 32 counting passes.
// CHECK: scf.for %{{.*}} = %c0 to %c32 step %c1
// CHECK: arith.cmpi uge
// CHECK: arith.cmpi sge, %{{.*}}, %c4_i32
// Compaction in position order; keys equal to the threshold are kept
// lowest position first.
// CHECK: scf.for
// CHECK: scf.for
// CHECK: scf.for
// CHECK: arith.cmpi ugt
// CHECK: arith.cmpi eq
// CHECK: arith.cmpi ult
// Indices: kept prefix then the window, same list for K and V; query head h
// reads kv head h / 2.
// CHECK: tensor.insert_slice {{.*}}[0, 0, 0] [1, 4, 4] [1, 1, 1] : tensor<1x4x4xi64> into tensor<1x4x8xi64>
// CHECK: %[[IDX:.*]] = tensor.insert_slice {{.*}}[0, 0, 4] [1, 4, 4] [1, 1, 1] : tensor<1x4x4xi64> into tensor<1x4x8xi64>
// CHECK: %[[KO:.*]] = linalg.generic {{.*}} ins(%[[IDX]] : tensor<1x4x8xi64>)
// CHECK: arith.divui %{{.*}}, %c2
// CHECK: tensor.extract %arg1
// CHECK: %[[VO:.*]] = linalg.generic {{.*}} ins(%[[IDX]] : tensor<1x4x8xi64>)
// CHECK: tensor.extract %arg2
// CHECK: return %[[KO]], %[[VO]], %[[IDX]]
func.func @static_expand(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>)
    -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 4 capacity 8
      : (tensor<1x4x4x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8xi64>)
  return %a, %b, %c : tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8xi64>
}

// -----

// mean / max aggregate the G query heads of a kv head before pooling; max
// pooling pads with -inf (in-range neighbours only); score order ranks the
// kept positions and scatters them.
// CHECK-LABEL: func.func @mean_max_score
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction", "parallel"]} ins(%{{.*}} : tensor<1x2x2x12xf32>) outs(%{{.*}} : tensor<1x2x12xf32>)
// CHECK: arith.divf %{{.*}}, %cst{{.*}} : f32
// CHECK: arith.addf
// CHECK: tensor.pad {{.*}} low[0, 0, 1] high[0, 0, 1]
// CHECK-NEXT: ^bb0
// CHECK-NEXT: tensor.yield %cst{{.*}} : f32
// CHECK: arith.maximumf
// CHECK: scf.for %{{.*}} = %c0 to %c32 step %c1
// Ranks: higher key, or equal key at an earlier position.
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<1x2x5xi32>, tensor<1x2x5xi32>)
// CHECK: arith.cmpi ugt
// CHECK: arith.cmpi eq
// CHECK: arith.cmpi ult
// CHECK: tensor.insert %{{.*}} into %{{.*}} : tensor<1x2x5xi64>
// mean/max keep Hkv heads: no head division in the gather.
// CHECK-NOT: arith.divui
// CHECK: return
func.func @mean_max_score(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>)
    -> (tensor<1x2x9x8xf32>, tensor<1x2x9x8xf32>, tensor<1x2x9xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 4 capacity 9 kernel 3 pooling max gqa mean order score
      : (tensor<1x4x4x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x2x9x8xf32>, tensor<1x2x9x8xf32>, tensor<1x2x9xi64>)
  return %a, %b, %c : tensor<1x2x9x8xf32>, tensor<1x2x9x8xf32>, tensor<1x2x9xi64>
}

// -----

// A static prompt shorter than the capacity bypasses selection entirely.
// CHECK-LABEL: func.func @static_bypass
// CHECK-NOT: math.exp
// CHECK-NOT: scf.for
// CHECK: linalg.index 2
// CHECK: arith.index_cast {{.*}} : index to i64
// CHECK: tensor.extract %arg1
// CHECK: tensor.extract %arg2
// CHECK: return
func.func @static_bypass(%q: tensor<1x2x4x8xf16>, %k: tensor<1x2x6x8xf16>, %v: tensor<1x2x6x8xf16>)
    -> (tensor<1x2x6x8xf16>, tensor<1x2x6x8xf16>, tensor<1x2x6xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 4 capacity 8
      : (tensor<1x2x4x8xf16>, tensor<1x2x6x8xf16>, tensor<1x2x6x8xf16>)
      -> (tensor<1x2x6x8xf16>, tensor<1x2x6x8xf16>, tensor<1x2x6xi64>)
  return %a, %b, %c : tensor<1x2x6x8xf16>, tensor<1x2x6x8xf16>, tensor<1x2x6xi64>
}

// -----

// Dynamic L: run-time checks, then a branch between bypass and selection.
// f16 inputs are extended to f32 for arithmetic.
// CHECK-LABEL: func.func @dynamic_length
// CHECK: %[[L:.*]] = tensor.dim %arg1, %c2
// CHECK: %[[LV:.*]] = tensor.dim %arg2, %c2
// CHECK: %[[SAME:.*]] = arith.cmpi eq, %[[L]], %[[LV]]
// CHECK: cf.assert %[[SAME]], "snapkv.select: prompt length of 'values' differs from 'keys'"
// CHECK: %[[LONG:.*]] = arith.cmpi sge, %[[L]], %c4
// CHECK: cf.assert %[[LONG]], "snapkv.select: prompt length (keys dim 2) is shorter than window 4"
// CHECK: %[[SHORT:.*]] = arith.cmpi slt, %[[L]], %c8
// CHECK: scf.if %[[SHORT]] -> (tensor<1x2x?x8xf16>, tensor<1x2x?x8xf16>, tensor<1x2x?xi64>)
// CHECK: } else {
// K is zero-padded to whole 16-key panels.
// CHECK: tensor.pad %arg1
// CHECK: arith.extf {{.*}} : f16 to f32
// CHECK: tensor.cast {{.*}} : tensor<1x2x8x8xf16> to tensor<1x2x?x8xf16>
func.func @dynamic_length(%q: tensor<1x2x4x8xf16>, %k: tensor<1x2x?x8xf16>, %v: tensor<1x2x?x8xf16>)
    -> (tensor<1x2x?x8xf16>, tensor<1x2x?x8xf16>, tensor<1x2x?xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 4 capacity 8
      : (tensor<1x2x4x8xf16>, tensor<1x2x?x8xf16>, tensor<1x2x?x8xf16>)
      -> (tensor<1x2x?x8xf16>, tensor<1x2x?x8xf16>, tensor<1x2x?xi64>)
  return %a, %b, %c : tensor<1x2x?x8xf16>, tensor<1x2x?x8xf16>, tensor<1x2x?xi64>
}

// -----

// snapkv.score is the first half of the selection: votes, GQA aggregation
// and pooling, no threshold search or gather. Dynamic L is checked at run
// time with the score op's own message.
// CHECK-LABEL: func.func @score
// CHECK: cf.assert %{{.*}}, "snapkv.score: prompt length (keys dim 2) is shorter than window 4"
// CHECK-NOT: "snapkv.score: prompt length of 'values'
// CHECK: math.exp
// CHECK: arith.maximumf
// CHECK-NOT: scf.for
// CHECK-NOT: tensor.extract %
// CHECK: return %{{.*}}, %{{.*}} : tensor<1x2x?xf32>, tensor<1x2x?xf32>
func.func @score(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x?x8xf32>) -> (tensor<1x2x?xf32>, tensor<1x2x?xf32>) {
  %v, %p = snapkv.score %q, %k window 4 kernel 3 gqa max
      : (tensor<1x4x4x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x2x?xf32>, tensor<1x2x?xf32>)
  return %v, %p : tensor<1x2x?xf32>, tensor<1x2x?xf32>
}
