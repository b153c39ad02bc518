// RUN: snapkv-opt %s | FileCheck %s
// Round trip through the generic form must give the same pretty form back.
// RUN: snapkv-opt %s --mlir-print-op-generic | snapkv-opt | FileCheck %s
// RUN: snapkv-opt %s --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

// Defaults are omitted from the printed form.
// CHECK-LABEL: func.func @defaults
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 32 capacity 1024 :
// CHECK-SAME: (tensor<1x32x32x128xf16>, tensor<1x8x?x128xf16>, tensor<1x8x?x128xf16>) -> (tensor<1x32x?x128xf16>, tensor<1x32x?x128xf16>, tensor<1x32x?xi64>)
// GENERIC-LABEL: sym_name = "defaults"
// Enums are dialect attributes: named, not numbered, in the generic form.
// GENERIC: "snapkv.select"(%{{.*}}, %{{.*}}, %{{.*}}) <{block = 1 : i64, capacity = 1024 : i64, gqa = #snapkv<gqa expand>, kernel = 5 : i64, order = #snapkv<order position>, pooling = #snapkv<pooling avg>, scoring = #snapkv<scoring votes>, window = 32 : i64}>
func.func @defaults(%q: tensor<1x32x32x128xf16>, %k: tensor<1x8x?x128xf16>, %v: tensor<1x8x?x128xf16>)
    -> (tensor<1x32x?x128xf16>, tensor<1x32x?x128xf16>, tensor<1x32x?xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 32 capacity 1024 kernel 5 pooling avg gqa expand order position
      : (tensor<1x32x32x128xf16>, tensor<1x8x?x128xf16>, tensor<1x8x?x128xf16>)
      -> (tensor<1x32x?x128xf16>, tensor<1x32x?x128xf16>, tensor<1x32x?xi64>)
  return %ko, %vo, %idx : tensor<1x32x?x128xf16>, tensor<1x32x?x128xf16>, tensor<1x32x?xi64>
}

// Every non-default clause is printed, in the documented order.
// CHECK-LABEL: func.func @all_clauses
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 5 kernel 3 pooling max gqa mean order score scale 2.500000e-01 :
// CHECK-SAME: (tensor<2x4x2x8xbf16>, tensor<2x2x16x8xbf16>, tensor<2x2x16x8xbf16>) -> (tensor<2x2x5x8xbf16>, tensor<2x2x5x8xbf16>, tensor<2x2x5xi64>)
// GENERIC-LABEL: sym_name = "all_clauses"
// GENERIC: "snapkv.select"(%{{.*}}, %{{.*}}, %{{.*}}) <{block = 1 : i64, capacity = 5 : i64, gqa = #snapkv<gqa mean>, kernel = 3 : i64, order = #snapkv<order score>, pooling = #snapkv<pooling max>, scale = 2.500000e-01 : f32, scoring = #snapkv<scoring votes>, window = 2 : i64}>
func.func @all_clauses(%q: tensor<2x4x2x8xbf16>, %k: tensor<2x2x16x8xbf16>, %v: tensor<2x2x16x8xbf16>)
    -> (tensor<2x2x5x8xbf16>, tensor<2x2x5x8xbf16>, tensor<2x2x5xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3 pooling max gqa mean order score scale 0.25
      : (tensor<2x4x2x8xbf16>, tensor<2x2x16x8xbf16>, tensor<2x2x16x8xbf16>)
      -> (tensor<2x2x5x8xbf16>, tensor<2x2x5x8xbf16>, tensor<2x2x5xi64>)
  return %ko, %vo, %idx : tensor<2x2x5x8xbf16>, tensor<2x2x5x8xbf16>, tensor<2x2x5xi64>
}

// gqa max keeps Hkv heads; a short static prompt keeps S = L < capacity.
// CHECK-LABEL: func.func @short_prompt_gqa_max
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 4 capacity 64 kernel 1 gqa max :
// CHECK-SAME: -> (tensor<1x2x10x16xf32>, tensor<1x2x10x16xf32>, tensor<1x2x10xi64>)
func.func @short_prompt_gqa_max(%q: tensor<1x6x4x16xf32>, %k: tensor<1x2x10x16xf32>, %v: tensor<1x2x10x16xf32>)
    -> (tensor<1x2x10x16xf32>, tensor<1x2x10x16xf32>, tensor<1x2x10xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 64 kernel 1 gqa max
      : (tensor<1x6x4x16xf32>, tensor<1x2x10x16xf32>, tensor<1x2x10x16xf32>)
      -> (tensor<1x2x10x16xf32>, tensor<1x2x10x16xf32>, tensor<1x2x10xi64>)
  return %ko, %vo, %idx : tensor<1x2x10x16xf32>, tensor<1x2x10x16xf32>, tensor<1x2x10xi64>
}

// `block`: printed when not 1 (the default, omitted even when written).
// CHECK-LABEL: func.func @blocks
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 10 kernel 3 block 4 :
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 10 :
// CHECK: snapkv.score %{{.*}}, %{{.*}} window 2 block 4 outs(
// GENERIC-LABEL: sym_name = "blocks"
// GENERIC: "snapkv.select"(%{{.*}}, %{{.*}}, %{{.*}}) <{block = 4 : i64, capacity = 10 : i64,
// GENERIC: "snapkv.score"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{block = 4 : i64,
func.func @blocks(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>)
    -> (tensor<1x4x10xi64>, tensor<1x4x10xi64>, tensor<1x4x14xf32>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 2 capacity 10 kernel 3 block 4
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x10x8xf32>, tensor<1x4x10x8xf32>, tensor<1x4x10xi64>)
  %ko1, %vo1, %idx1 = snapkv.select %q, %k, %v window 2 capacity 10 block 1
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x10x8xf32>, tensor<1x4x10x8xf32>, tensor<1x4x10xi64>)
  %vi = tensor.empty() : tensor<1x4x14xf32>
  %pi = tensor.empty() : tensor<1x4x14xf32>
  %sv, %sp = snapkv.score %q, %k window 2 block 4
      outs(%vi, %pi : tensor<1x4x14xf32>, tensor<1x4x14xf32>)
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x14xf32>, tensor<1x4x14xf32>)
  return %idx, %idx1, %sp : tensor<1x4x10xi64>, tensor<1x4x10xi64>, tensor<1x4x14xf32>
}

// snapkv.score: votes and pooled scores over the P = L - W prefix positions.
// CHECK-LABEL: func.func @score
// CHECK: snapkv.score %{{.*}}, %{{.*}} window 2 kernel 3 pooling max gqa mean scale 5.000000e-01 outs(%{{.*}}, %{{.*}} : tensor<1x2x?xf32>, tensor<1x2x?xf32>) :
// CHECK-SAME: (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x2x?xf32>, tensor<1x2x?xf32>)
// CHECK: snapkv.score %{{.*}}, %{{.*}} window 2 outs(
// CHECK-SAME: -> (tensor<1x4x14xf32>, tensor<1x4x14xf32>)
// GENERIC-LABEL: sym_name = "score"
// GENERIC: "snapkv.score"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{block = 1 : i64, gqa = #snapkv<gqa mean>, kernel = 3 : i64, pooling = #snapkv<pooling max>, scale = 5.000000e-01 : f32, scoring = #snapkv<scoring votes>, window = 2 : i64}>
func.func @score(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x?x8xf32>, %ks: tensor<1x2x16x8xf32>)
    -> (tensor<1x2x?xf32>, tensor<1x2x?xf32>, tensor<1x4x14xf32>, tensor<1x4x14xf32>) {
  %s1_c2 = arith.constant 2 : index
  %s1_w = arith.constant 2 : index
  %s1_l = tensor.dim %k, %s1_c2 : tensor<1x2x?x8xf32>
  %s1_p = arith.subi %s1_l, %s1_w : index
  %s1_votes = tensor.empty(%s1_p) : tensor<1x2x?xf32>
  %s1_pooled = tensor.empty(%s1_p) : tensor<1x2x?xf32>
  %v, %p = snapkv.score %q, %k window 2 kernel 3 pooling max gqa mean scale 0.5
      outs(%s1_votes, %s1_pooled : tensor<1x2x?xf32>, tensor<1x2x?xf32>)
      : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x2x?xf32>, tensor<1x2x?xf32>)
  %s2_votes = tensor.empty() : tensor<1x4x14xf32>
  %s2_pooled = tensor.empty() : tensor<1x4x14xf32>
  %v2, %p2 = snapkv.score %q, %ks window 2
      outs(%s2_votes, %s2_pooled : tensor<1x4x14xf32>, tensor<1x4x14xf32>)
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x14xf32>, tensor<1x4x14xf32>)
  return %v, %p, %v2, %p2 : tensor<1x2x?xf32>, tensor<1x2x?xf32>, tensor<1x4x14xf32>, tensor<1x4x14xf32>
}

// The comparison scorings and their parameters.
// CHECK-LABEL: func.func @scorings
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 5 scoring prefix_votes :
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 5 scoring recent :
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 5 scoring recent sinks 1 :
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 5 scoring random seed 7 :
// GENERIC-LABEL: sym_name = "scorings"
// GENERIC: scoring = #snapkv<scoring prefix_votes>
// GENERIC: scoring = #snapkv<scoring recent>
// GENERIC: scoring = #snapkv<scoring recent>, sinks = 1 : i64
// GENERIC: scoring = #snapkv<scoring random>, seed = 7 : i64
func.func @scorings(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) {
  %a:3 = snapkv.select %q, %k, %v window 2 capacity 5 scoring prefix_votes
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  %b:3 = snapkv.select %q, %k, %v window 2 capacity 5 scoring recent
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  %c:3 = snapkv.select %q, %k, %v window 2 capacity 5 scoring recent sinks 1
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  %d:3 = snapkv.select %q, %k, %v window 2 capacity 5 scoring random seed 7
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// The accumulated scorings take the last Q >= window prompt queries, Q static
// or dynamic (a prompt chunk's); block and the other vote clauses apply.
// CHECK-LABEL: func.func @accumulated
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 6 scoring sum : (tensor<1x4x16x8xf32>,
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 6 kernel 3 gqa mean scoring norm_sum block 2 : (tensor<1x4x?x8xf32>,
// CHECK: snapkv.score %{{.*}}, %{{.*}} window 2 scoring norm_sum outs(
// GENERIC-LABEL: sym_name = "accumulated"
// GENERIC: scoring = #snapkv<scoring sum>
// GENERIC: scoring = #snapkv<scoring norm_sum>
func.func @accumulated(%q: tensor<1x4x16x8xf32>, %qd: tensor<1x4x?x8xf32>,
                       %k: tensor<1x2x16x8xf32>, %kd: tensor<1x2x?x8xf32>,
                       %s: tensor<1x4x14xf32>) {
  %a:3 = snapkv.select %q, %k, %k window 2 capacity 6 scoring sum
      : (tensor<1x4x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
      -> (tensor<1x4x6x8xf32>, tensor<1x4x6x8xf32>, tensor<1x4x6xi64>)
  %b:3 = snapkv.select %qd, %kd, %kd window 2 capacity 6 kernel 3 gqa mean scoring norm_sum block 2
      : (tensor<1x4x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?xi64>)
  %c:2 = snapkv.score %q, %k window 2 scoring norm_sum outs(%s, %s : tensor<1x4x14xf32>, tensor<1x4x14xf32>)
      : (tensor<1x4x16x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x14xf32>, tensor<1x4x14xf32>)
  return
}

// scoring keydiff: the window's queries (not read), pooled like the votes.
// CHECK-LABEL: func.func @keydiff
// CHECK: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 6 kernel 1 gqa mean scoring keydiff : (tensor<1x4x2x8xf32>,
// GENERIC-LABEL: sym_name = "keydiff"
// GENERIC: scoring = #snapkv<scoring keydiff>
func.func @keydiff(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x?x8xf32>) {
  %a:3 = snapkv.select %q, %k, %k window 2 capacity 6 kernel 1 gqa mean scoring keydiff
      : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?xi64>)
  return
}

// snapkv.attention: the offset and the scale are printed only when given;
// f16 and a decode step's single query row (Lq = 1 against a dynamic cache)
// are accepted.
// CHECK-LABEL: func.func @attention
// CHECK: snapkv.attention %{{.*}}, %{{.*}}, %{{.*}} outs(%{{.*}} : tensor<1x4x?x8xf32>) : tensor<1x4x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32> -> tensor<1x4x?x8xf32>
// CHECK: snapkv.attention %{{.*}}, %{{.*}}, %{{.*}} offset %{{.*}} scale 2.500000e-01 outs(%{{.*}} : tensor<1x4x1x8xf16>) : tensor<1x4x1x8xf16>, tensor<1x2x?x8xf16>, tensor<1x2x?x8xf16> -> tensor<1x4x1x8xf16>
// CHECK: snapkv.attention %{{.*}}, %{{.*}}, %{{.*}} softcap 5.000000e+01 sliding_window 4 outs(%{{.*}} : tensor<1x4x?x8xf32>)
// GENERIC-LABEL: sym_name = "attention"
// GENERIC: "snapkv.attention"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<1x4x?x8xf32>
// GENERIC: "snapkv.attention"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{scale = 2.500000e-01 : f32}>
// GENERIC: "snapkv.attention"(%{{.*}}) <{sliding_window = 4 : i64, softcap = 5.000000e+01 : f32}>
func.func @attention(%q: tensor<1x4x?x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>,
                     %q1: tensor<1x4x1x8xf16>, %k1: tensor<1x2x?x8xf16>, %v1: tensor<1x2x?x8xf16>,
                     %pos: index)
    -> (tensor<1x4x?x8xf32>, tensor<1x4x1x8xf16>, tensor<1x4x?x8xf32>) {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x?x8xf32>)
      : tensor<1x4x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32> -> tensor<1x4x?x8xf32>
  %o1 = snapkv.attention %q1, %k1, %v1 offset %pos scale 0.25 outs(%q1 : tensor<1x4x1x8xf16>)
      : tensor<1x4x1x8xf16>, tensor<1x2x?x8xf16>, tensor<1x2x?x8xf16> -> tensor<1x4x1x8xf16>
  %o2 = snapkv.attention %q, %k, %v softcap 50.0 sliding_window 4 outs(%q : tensor<1x4x?x8xf32>)
      : tensor<1x4x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32> -> tensor<1x4x?x8xf32>
  return %o, %o1, %o2 : tensor<1x4x?x8xf32>, tensor<1x4x1x8xf16>, tensor<1x4x?x8xf32>
}

// The stage ops of a decomposed select: a score with scoring prefix_votes,
// top_positions (dynamic prefix, order score) and gather (grouped heads, a
// dynamic source and slot count), destination-style.
// CHECK-LABEL: func.func @stages
// CHECK: snapkv.score %{{.*}}, %{{.*}} window 2 scoring prefix_votes outs(
// CHECK: snapkv.top_positions %{{.*}} window 2 capacity 5 outs(%{{.*}} : tensor<1x4x5xi64>) : tensor<1x4x14xf32> -> tensor<1x4x5xi64>
// CHECK: snapkv.top_positions %{{.*}} window 2 capacity 5 order score outs(%{{.*}} : tensor<1x2x5xi64>) : tensor<1x2x?xf32> -> tensor<1x2x5xi64>
// CHECK: snapkv.gather %{{.*}}[%{{.*}}] outs(%{{.*}} : tensor<1x4x5x8xf32>) : tensor<1x2x16x8xf32>, tensor<1x4x5xi64> -> tensor<1x4x5x8xf32>
// CHECK: snapkv.gather %{{.*}}[%{{.*}}] outs(%{{.*}} : tensor<1x2x?x8xbf16>) : tensor<1x2x?x8xbf16>, tensor<1x2x?xi64> -> tensor<1x2x?x8xbf16>
// GENERIC-LABEL: sym_name = "stages"
// GENERIC: "snapkv.top_positions"(%{{.*}}, %{{.*}}) <{capacity = 5 : i64, order = #snapkv<order position>, window = 2 : i64}>
// GENERIC: "snapkv.gather"(%{{.*}}, %{{.*}}, %{{.*}}) : (tensor<1x2x16x8xf32>, tensor<1x4x5xi64>, tensor<1x4x5x8xf32>) -> tensor<1x4x5x8xf32>
func.func @stages(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>,
                  %pooled: tensor<1x2x?xf32>, %kd: tensor<1x2x?x8xbf16>,
                  %idx: tensor<1x2x?xi64>, %rows: tensor<1x2x?x8xbf16>)
    -> (tensor<1x4x5xi64>, tensor<1x2x5xi64>, tensor<1x4x5x8xf32>, tensor<1x2x?x8xbf16>) {
  %s3_votes = tensor.empty() : tensor<1x4x14xf32>
  %s3_pooled = tensor.empty() : tensor<1x4x14xf32>
  %v, %p = snapkv.score %q, %k window 2 scoring prefix_votes
      outs(%s3_votes, %s3_pooled : tensor<1x4x14xf32>, tensor<1x4x14xf32>)
      : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x14xf32>, tensor<1x4x14xf32>)
  %i0 = tensor.empty() : tensor<1x4x5xi64>
  %t = snapkv.top_positions %p window 2 capacity 5
      outs(%i0 : tensor<1x4x5xi64>) : tensor<1x4x14xf32> -> tensor<1x4x5xi64>
  %i1 = tensor.empty() : tensor<1x2x5xi64>
  %t2 = snapkv.top_positions %pooled window 2 capacity 5 order score
      outs(%i1 : tensor<1x2x5xi64>) : tensor<1x2x?xf32> -> tensor<1x2x5xi64>
  %r0 = tensor.empty() : tensor<1x4x5x8xf32>
  %g = snapkv.gather %k[%t] outs(%r0 : tensor<1x4x5x8xf32>)
      : tensor<1x2x16x8xf32>, tensor<1x4x5xi64> -> tensor<1x4x5x8xf32>
  %g2 = snapkv.gather %kd[%idx] outs(%rows : tensor<1x2x?x8xbf16>)
      : tensor<1x2x?x8xbf16>, tensor<1x2x?xi64> -> tensor<1x2x?x8xbf16>
  return %t, %t2, %g, %g2 : tensor<1x4x5xi64>, tensor<1x2x5xi64>, tensor<1x4x5x8xf32>, tensor<1x2x?x8xbf16>
}

// The adaptive select: packed rows [B, Hc x min(L, C), D] and offsets
// [B, Hc + 1]; `floor` printed only when given.
// CHECK-LABEL: func.func @adaptive
// CHECK: snapkv.select_adaptive %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 10 floor 3 kernel 3 gqa mean : (tensor<1x4x2x8xf32>, tensor<1x2x20x8xf32>, tensor<1x2x20x8xf32>) -> (tensor<1x20x8xf32>, tensor<1x20x8xf32>, tensor<1x20xi64>, tensor<1x3xi64>)
// CHECK: snapkv.select_adaptive %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 10 scoring prefix_votes : (tensor<1x4x2x8xbf16>, tensor<1x2x?x8xbf16>, tensor<1x2x?x8xbf16>) -> (tensor<1x?x8xbf16>, tensor<1x?x8xbf16>, tensor<1x?xi64>, tensor<1x5xi64>)
// GENERIC-LABEL: sym_name = "adaptive"
// GENERIC: "snapkv.select_adaptive"(%{{.*}}, %{{.*}}, %{{.*}}) <{capacity = 10 : i64, floor = 3 : i64, gqa = #snapkv<gqa mean>, kernel = 3 : i64, pooling = #snapkv<pooling avg>, scoring = #snapkv<scoring votes>, window = 2 : i64}>
func.func @adaptive(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x20x8xf32>,
                    %qb: tensor<1x4x2x8xbf16>, %kb: tensor<1x2x?x8xbf16>) {
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10 floor 3 kernel 3 gqa mean
      : (tensor<1x4x2x8xf32>, tensor<1x2x20x8xf32>, tensor<1x2x20x8xf32>)
      -> (tensor<1x20x8xf32>, tensor<1x20x8xf32>, tensor<1x20xi64>, tensor<1x3xi64>)
  %b:4 = snapkv.select_adaptive %qb, %kb, %kb window 2 capacity 10 scoring prefix_votes
      : (tensor<1x4x2x8xbf16>, tensor<1x2x?x8xbf16>, tensor<1x2x?x8xbf16>)
      -> (tensor<1x?x8xbf16>, tensor<1x?x8xbf16>, tensor<1x?xi64>, tensor<1x5xi64>)
  return
}

// CHECK-LABEL: func.func @ragged_attention
// CHECK: snapkv.ragged_attention %{{.*}}, %{{.*}}, %{{.*}} rows(%{{.*}}, %{{.*}}) scale 1.250000e-01 : tensor<1x9x1x64xf32>, tensor<1x?x64xf32>, tensor<1x?x64xf32>, tensor<1x3xi64> -> tensor<1x9x1x64xf32>
func.func @ragged_attention(%q: tensor<1x9x1x64xf32>, %k: tensor<1x?x64xf32>,
                            %s: tensor<1x3xi64>, %l: tensor<1x3xi64>) -> tensor<1x9x1x64xf32> {
  %o = snapkv.ragged_attention %q, %k, %k rows(%s, %l) scale 0.125
      : tensor<1x9x1x64xf32>, tensor<1x?x64xf32>, tensor<1x?x64xf32>, tensor<1x3xi64>
      -> tensor<1x9x1x64xf32>
  return %o : tensor<1x9x1x64xf32>
}
