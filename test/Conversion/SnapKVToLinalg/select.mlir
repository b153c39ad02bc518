// RUN: snapkv-opt %s --convert-snapkv-to-linalg --split-input-file | FileCheck %s --implicit-check-not="= snapkv."
// Every loop outside a structured op has a small constant trip count (the
// 32-step threshold search): nothing iterates over positions or heads on the
// host of an IREE-style compiler.
// RUN: snapkv-opt %s --convert-snapkv-to-linalg --split-input-file | %python %S/Inputs/check_host_loops.py --max-trips 32 | FileCheck %s --check-prefix=HOST
// HOST: ok:
// The checker does fail on a loop over a dynamic size:
// RUN: not %python %S/Inputs/check_host_loops.py < %S/Inputs/host-loop.mlir

// Static shapes, expand policy: L = 16, W = 4 (P = 12), C = 8 (K = 4 kept
// prefix positions), D = 8, Hq = 4, Hkv = 2 (G = 2), kernel 5, avg. One key
// tile of 16 keys; one compaction chunk of 16 positions.
// CHECK-LABEL: func.func @static_expand
// Q per kv head, transposed so that a query head's W = 4 window rows are
// innermost (contiguous over D).
// CHECK: %[[QT:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<1x2x2x4x8xf32>) outs(%{{.*}} : tensor<1x2x2x8x4xf32>)
// CHECK: %[[KT:.*]] = tensor.expand_shape {{.*}} into tensor<1x2x1x16x8xf32>
// Logits of the tile: f32 multiply-add over D.
// CHECK: %[[L1:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[QT]], %[[KT]] : {{.*}}) outs(%{{.*}} : tensor<1x2x1x16x2x4xf32>)
// CHECK: arith.mulf {{.*}} fastmath<contract> : f32
// Tile maximum over the causally visible columns: column n*16 + jt is
// visible to window row w when it is at most P + w = 12 + w (the column
// offsets 0..15 and the row limits 12 + w are i32 inputs).
// CHECK: %[[OFFSETS:.*]] = arith.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]> : tensor<16xi32>
// CHECK: %[[LIMITS:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<4xi32>)
// CHECK: linalg.index 0
// CHECK: %[[TMAX:.*]] = linalg.generic {{.*}} ins(%[[L1]], %[[OFFSETS]], %[[LIMITS]] : tensor<1x2x1x16x2x4xf32>, tensor<16xi32>, tensor<4xi32>) outs(%{{.*}} : tensor<1x2x1x2x4xf32>)
// CHECK: arith.muli %{{.*}}, %c16_i32
// CHECK: arith.cmpi sle
// CHECK: arith.mulf %{{.*}}, %cst{{.*}} : f32
// CHECK: arith.maximumf
// Tile sum of exp(x - max) over the same columns (a column equal to the
// maximum gets exponent 0).
// CHECK: %[[TSUM:.*]] = linalg.generic {{.*}} ins(%[[L1]], %[[TMAX]], %[[OFFSETS]], %[[LIMITS]] :
// CHECK: arith.cmpf oeq
// CHECK: math.exp
// CHECK: arith.cmpi sle
// Row statistics: the maximum over tiles, and the FULL denominator (prefix
// and window columns) as sum(tileSum * exp(tileMax - rowMax)).
// CHECK: %[[RMAX:.*]] = linalg.generic {{.*}} ins(%[[TMAX]] : tensor<1x2x1x2x4xf32>) outs(%{{.*}} : tensor<1x2x2x4xf32>)
// CHECK: %[[RSUM:.*]] = linalg.generic {{.*}} ins(%[[TMAX]], %[[TSUM]], %[[RMAX]] :
// CHECK: math.exp
// CHECK: %[[RINV:.*]] = linalg.generic {{.*}} ins(%[[RSUM]] :
// CHECK: arith.divf %cst{{.*}}, %{{.*}} : f32
// The logits again (recomputed, not stored), and the votes: probabilities
// summed over the window rows w.
// CHECK: %[[L2:.*]] = linalg.generic {{.*}} ins(%[[QT]], %[[KT]] :
// CHECK: %[[VOTES:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[L2]], %[[RMAX]], %[[RINV]] : {{.*}}) outs(%{{.*}} : tensor<1x2x2x1x16xf32>)
// CHECK: math.exp
// expand: one selection per query head; the 12 prefix columns are kept.
// CHECK: %[[V:.*]] = tensor.collapse_shape %[[VOTES]] {{.*}} into tensor<1x4x16xf32>
// CHECK: tensor.extract_slice %[[V]][0, 0, 0] [1, 4, 12]
// avg pooling: zero padding of kernel/2 = 2 on each side (plus the chunk
// padding to 16), then the division by 5.
// CHECK: tensor.pad %{{.*}} low[0, 0, 2] high[0, 0, 6]
// CHECK-NEXT: ^bb0
// CHECK-NEXT: tensor.yield %cst{{.*}} : f32
// CHECK: arith.addf
// CHECK: arith.divf %{{.*}}, %cst{{.*}} : f32
// Order-preserving keys: NaN, and the padding past P = 12, map to 0 (below
// every number).
// CHECK: %[[KEYS:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x4x16xi32>)
// CHECK: arith.bitcast {{.*}} : f32 to i32
// CHECK: arith.cmpf uno
// CHECK: arith.cmpi slt, %{{.*}}, %{{.*}} : i32
// Bitwise threshold search: 32 counting passes, a candidate survives when at
// least K = 4 keys reach it.
// CHECK: %[[THR:.*]] = scf.for %{{.*}} = %{{.*}} to %c32 step %c1
// CHECK: arith.cmpi uge
// CHECK: arith.cmpi sge, %{{.*}}, %c4_i32
// Keys strictly above the threshold.
// CHECK: %[[ABOVE:.*]] = linalg.generic {{.*}} ins(%[[KEYS]], %[[THR]] :
// CHECK: arith.cmpi ugt
// Per chunk: keys above and equal to the threshold; exclusive prefix sums.
// CHECK: %[[CNT:.*]]:2 = linalg.generic {{.*}} outs(%{{.*}}, %{{.*}} : tensor<1x4x1xi32>, tensor<1x4x1xi32>)
// CHECK: %[[PRE:.*]]:2 = linalg.generic {{.*}} ins(%[[CNT]]#0, %[[CNT]]#1 :
// CHECK: arith.cmpi ult
// Per output slot: a binary search over the chunks, then a scan of one chunk
// in which equal keys are taken while fewer than K - above ties are taken.
// CHECK: %[[SLOTS:.*]]:2 = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[THR]], %[[ABOVE]] : {{.*}}) outs(%{{.*}}, %{{.*}} : tensor<1x4x4xi64>, tensor<1x4x4xi32>)
// CHECK: arith.subi %c4_i32{{.*}}, %{{.*}} : i32
// CHECK: scf.for
// CHECK: arith.minsi
// CHECK: scf.for
// CHECK: arith.cmpi ugt
// CHECK: arith.cmpi eq
// CHECK: arith.cmpi slt
// Indices: the kept prefix positions, then the window P .. P+3. The positions
// are read through an indexing map (padded to C), not by tensor.extract.
// CHECK: %[[PADDED:.*]] = tensor.pad %[[SLOTS]]#0 low[0, 0, 0] high[0, 0, 4]
// CHECK: %[[IDX:.*]] = linalg.generic {{.*}} ins(%[[PADDED]] : tensor<1x4x8xi64>) outs(%{{.*}} : tensor<1x4x8xi64>)
// CHECK-NOT: tensor.extract
// CHECK: arith.cmpi ult, %{{.*}}, %c4
// CHECK: arith.select %{{.*}}, %in, %{{.*}} : i64
// CHECK: linalg.yield
// The same index list gathers K and V; query head h reads kv head h / 2.
// CHECK: %[[KO:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x4x8x8xf32>)
// CHECK: arith.divui %{{.*}}, %c2
// CHECK: tensor.extract %[[IDX]]
// CHECK: tensor.extract %arg1
// CHECK: %[[VO:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x4x8x8xf32>)
// CHECK: tensor.extract %[[IDX]]
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
// kept positions and places each at its rank.
// CHECK-LABEL: func.func @mean_max_score
// Aggregation of the votes over g (mean accumulates v / G).
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}} : tensor<1x2x2x1x16xf32>) outs(%{{.*}} : tensor<1x2x1x16xf32>)
// CHECK: arith.divf %{{.*}}, %cst{{.*}} : f32
// CHECK: arith.addf
// CHECK: tensor.pad {{.*}} low[0, 0, 1] high[0, 0, 5]
// CHECK-NEXT: ^bb0
// CHECK-NEXT: tensor.yield %cst{{.*}} : f32
// CHECK: arith.maximumf
// CHECK: scf.for %{{.*}} = %{{.*}} to %c32 step %c1
// Ranks: a higher key, or an equal key at an earlier position.
// CHECK: %[[RANK:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<1x2x5xi32>, tensor<1x2x5xi32>)
// CHECK: arith.cmpi ugt
// CHECK: arith.cmpi eq
// CHECK: arith.cmpi ult
// Each slot takes the position whose rank it is.
// CHECK: linalg.generic {{.*}} ins(%[[RANK]], %{{.*}} : tensor<1x2x5xi32>, tensor<1x2x5xi64>)
// CHECK: arith.cmpi eq
// mean/max keep Hkv heads: no head division in the gathers.
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

// A static prompt shorter than the capacity bypasses selection entirely:
// indices 0 .. L-1 and the gathers, nothing else.
// CHECK-LABEL: func.func @static_bypass
// CHECK-NOT: math.exp
// CHECK-NOT: scf.for
// CHECK: linalg.index 2
// CHECK: arith.index_cast {{.*}} : index to i64
// CHECK-NOT: math.exp
// CHECK-NOT: scf.for
// CHECK: tensor.extract %arg1
// CHECK-NOT: math.exp
// CHECK-NOT: scf.for
// CHECK: tensor.extract %arg2
// CHECK-NOT: math.exp
// CHECK-NOT: scf.for
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
// The keys are whole tiles of 64 as a view plus one zero-padded tail tile;
// f16 inputs are extended to f32 for arithmetic.
// CHECK-LABEL: func.func @dynamic_length
// CHECK: %[[L:.*]] = tensor.dim %arg1, %c2
// CHECK: %[[LV:.*]] = tensor.dim %arg2, %c2
// CHECK: %[[SAME:.*]] = arith.cmpi eq, %[[L]], %[[LV]]
// CHECK: cf.assert %[[SAME]], "snapkv.select: prompt length of 'values' differs from 'keys'"
// CHECK: %[[LONG:.*]] = arith.cmpi sge, %[[L]], %c4
// CHECK: cf.assert %[[LONG]], "snapkv.select: prompt length (keys dim 2) is shorter than window 4"
// CHECK: %[[SMALL:.*]] = arith.cmpi slt, %[[L]], %c2147483647
// CHECK: cf.assert %[[SMALL]], "snapkv.select: prompt length (keys dim 2) must be below 2^31 - 1"
// CHECK: %[[SHORT:.*]] = arith.cmpi slt, %[[L]], %c8
// CHECK: scf.if %[[SHORT]] -> (tensor<1x2x?x8xf16>, tensor<1x2x?x8xf16>, tensor<1x2x?xi64>)
// CHECK: } else {
// CHECK: tensor.expand_shape {{.*}} into tensor<1x2x?x64x8xf16>
// CHECK: tensor.pad
// CHECK: into tensor<1x2x1x64x8xf16>
// CHECK: arith.extf {{.*}} : f16 to f32
// CHECK: tensor.concat dim(2)
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
// and pooling, no threshold search or gather. A dynamic L is checked at run
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
  %s1_c2 = arith.constant 2 : index
  %s1_w = arith.constant 4 : index
  %s1_l = tensor.dim %k, %s1_c2 : tensor<1x2x?x8xf32>
  %s1_p = arith.subi %s1_l, %s1_w : index
  %s1_votes = tensor.empty(%s1_p) : tensor<1x2x?xf32>
  %s1_pooled = tensor.empty(%s1_p) : tensor<1x2x?xf32>
  %v, %p = snapkv.score %q, %k window 4 kernel 3 gqa max
      outs(%s1_votes, %s1_pooled : tensor<1x2x?xf32>, tensor<1x2x?xf32>)
      : (tensor<1x4x4x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x2x?xf32>, tensor<1x2x?xf32>)
  return %v, %p : tensor<1x2x?xf32>, tensor<1x2x?xf32>
}
