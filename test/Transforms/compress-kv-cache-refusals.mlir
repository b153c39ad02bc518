// Near misses: inputs the model rewrite must leave unchanged, each with a
// warning naming the function and the reason. FileCheck confirms that no
// split was rewritten.
// RUN: snapkv-opt %s -split-input-file -verify-diagnostics \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 kernel=3" | FileCheck %s

// CHECK-NOT: snapkv.select
// CHECK-NOT: tensor<1x4x6x4xf32>

// Attention without a softmax: the second batch_matmul reads the masked scores.
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
// expected-warning@+1 {{is not part of a recognised attention: attention probabilities are not a softmax (no row-sum division)}}
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %masked [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %out, %k, %v : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// K/V do not reach a result: nothing to cache.
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
// expected-warning@+1 {{@prefill: layer 0: the keys this attention reads are not returned exactly once}}
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %xe = tensor.empty() : tensor<1x4x8xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x8x8xf32>) outs(%xf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %ze = tensor.empty() : tensor<1x4x8x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x8x8xf32>) outs(%zf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %out : tensor<1x4x8x4xf32>
}

// -----

// A mask that is not causal (key > query).
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
// expected-warning@+1 {{@prefill: layer 0: the mask condition is not `key position <= query position`}}
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sgt, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %xe = tensor.empty() : tensor<1x4x8xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x8x8xf32>) outs(%xf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %ze = tensor.empty() : tensor<1x4x8x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x8x8xf32>) outs(%zf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %out, %k, %v : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// Two attentions read the same K/V: one cache cannot serve both.
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
// expected-warning@+1 {{@prefill: layer 1: its keys or values are also read by another attention}}
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %xe = tensor.empty() : tensor<1x4x8xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x8x8xf32>) outs(%xf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %ze = tensor.empty() : tensor<1x4x8x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x8x8xf32>) outs(%zf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  %bbe = tensor.empty() : tensor<1x1x8x8xi1>
  %bcond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%bbe : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %bme = tensor.empty() : tensor<1x1x8x8xf32>
  %bmask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%bcond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%bme : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %bre = tensor.empty() : tensor<1x2x2x8x4xf32>
  %bkr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%bre : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %bkrc = tensor.collapse_shape %bkr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %bvr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%bre : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %bte = tensor.empty() : tensor<1x4x4x8xf32>
  %bkt = linalg.transpose ins(%bkrc : tensor<1x4x8x4xf32>) outs(%bte : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %bqc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %bktc = tensor.collapse_shape %bkt [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %bse = tensor.empty() : tensor<4x8x8xf32>
  %bsf = linalg.fill ins(%zero : f32) outs(%bse : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %bs = linalg.batch_matmul ins(%bqc, %bktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%bsf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %bs4 = tensor.expand_shape %bs [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %bae = tensor.empty() : tensor<1x4x8x8xf32>
  %bscaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%bs4 : tensor<1x4x8x8xf32>) outs(%bae : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %bmasked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%bscaled, %bmask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%bae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %bxe = tensor.empty() : tensor<1x4x8xf32>
  %bxf = linalg.fill ins(%ninf : f32) outs(%bxe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %bmax = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%bmasked : tensor<1x4x8x8xf32>) outs(%bxf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %bmaxe = tensor.expand_shape %bmax [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %bsub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%bmasked, %bmaxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%bae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %bexp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%bsub : tensor<1x4x8x8xf32>) outs(%bae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %bze = tensor.empty() : tensor<1x4x8x1xf32>
  %bzf = linalg.fill ins(%zero : f32) outs(%bze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %bsum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%bexp : tensor<1x4x8x8xf32>) outs(%bzf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %bp = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%bexp, %bsum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%bae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %bpc = tensor.collapse_shape %bp [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %bvc = tensor.collapse_shape %bvr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %boe = tensor.empty() : tensor<4x8x4xf32>
  %bof = linalg.fill ins(%zero : f32) outs(%boe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %bpv = linalg.batch_matmul ins(%bpc, %bvc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%bof : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %bout = tensor.expand_shape %bpv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %bout, %k, %v : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// Decode computes its RoPE position from the physical cache length.
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %xe = tensor.empty() : tensor<1x4x8xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x8x8xf32>) outs(%xf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %ze = tensor.empty() : tensor<1x4x8x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x8x8xf32>) outs(%zf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %out, %k, %v : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}
// expected-warning@+1 {{@decode: the RoPE position is computed from cache argument %arg4 (its physical length), not from the logical position argument}}
func.func @decode(%pos_arg: tensor<1xi64>, %qin: tensor<1x4x1x4xf32>, %knew: tensor<1x2x1x4xf32>, %vnew: tensor<1x2x1x4xf32>, %kcache: tensor<1x2x8x4xf32>, %vcache: tensor<1x2x8x4xf32>) -> (tensor<1x4x1x4xf32>, tensor<1x2x9x4xf32>, tensor<1x2x9x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %c2 = arith.constant 2 : index
  %plen_d = tensor.dim %kcache, %c2 : tensor<1x2x8x4xf32>
  %plen_i = arith.index_cast %plen_d : index to i64
  %plen = tensor.from_elements %plen_i : tensor<1xi64>
  %c0_i64 = arith.constant 0 : i64
  %cq_i64 = arith.constant 8 : i64
  %pfe = tensor.empty() : tensor<1xf32>
  %cosp = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%plen : tensor<1xi64>) outs(%pfe : tensor<1xf32>) {
  ^bb0(%in: i64, %o: f32):
    %f = arith.sitofp %in : i64 to f32
    %c = math.cos %f : f32
    linalg.yield %c : f32
  } -> tensor<1xf32>
  %cos4 = tensor.expand_shape %cosp [[0, 1, 2, 3]] output_shape [1, 1, 1, 1] : tensor<1xf32> into tensor<1x1x1x1xf32>
  %qe = tensor.empty() : tensor<1x4x1x4xf32>
  %q = linalg.generic {indexing_maps = [#id4, #all, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%qin, %cos4 : tensor<1x4x1x4xf32>, tensor<1x1x1x1xf32>) outs(%qe : tensor<1x4x1x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.mulf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x4xf32>
  %qp0e = tensor.empty() : tensor<1xi64>
  %qp0 = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%qp0e : tensor<1xi64>) {
  ^bb0(%o: i64):
    linalg.yield %c0_i64 : i64
  } -> tensor<1xi64>
  %qp = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%qp0 : tensor<1xi64>) outs(%qp0e : tensor<1xi64>) {
  ^bb0(%in: i64, %o: i64):
    %r = arith.addi %in, %cq_i64 : i64
    linalg.yield %r : i64
  } -> tensor<1xi64>
  %kp_e = tensor.empty() : tensor<9xi64>
  %kp = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%kp_e : tensor<9xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<9xi64>
  %kpos = tensor.expand_shape %kp [[0, 1, 2, 3]] output_shape [1, 1, 1, 9] : tensor<9xi64> into tensor<1x1x1x9xi64>
  %qpos = tensor.expand_shape %qp [[0, 1, 2, 3]] output_shape [1, 1, 1, 1] : tensor<1xi64> into tensor<1x1x1x1xi64>
  %kall = tensor.concat dim(2) %kcache, %knew : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x9x4xf32>
  %vall = tensor.concat dim(2) %vcache, %vnew : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x9x4xf32>
  %be = tensor.empty() : tensor<1x1x1x9xi1>
  %cond = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x9xi64>, tensor<1x1x1x1xi64>) outs(%be : tensor<1x1x1x9xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x1x9xi1>
  %me = tensor.empty() : tensor<1x1x1x9xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x1x9xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x1x9xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x1x9xf32>
  %re = tensor.empty() : tensor<1x2x2x9x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%kall : tensor<1x2x9x4xf32>) outs(%re : tensor<1x2x2x9x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x9x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x9x4xf32> into tensor<1x4x9x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%vall : tensor<1x2x9x4xf32>) outs(%re : tensor<1x2x2x9x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x9x4xf32>
  %te = tensor.empty() : tensor<1x4x4x9xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x9x4xf32>) outs(%te : tensor<1x4x4x9xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x1x4xf32> into tensor<4x1x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x9xf32> into tensor<4x4x9xf32>
  %se = tensor.empty() : tensor<4x1x9xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x1x9xf32>) -> tensor<4x1x9xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x1x4xf32>, tensor<4x4x9xf32>) outs(%sf : tensor<4x1x9xf32>) -> tensor<4x1x9xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 1, 9] : tensor<4x1x9xf32> into tensor<1x4x1x9xf32>
  %ae = tensor.empty() : tensor<1x4x1x9xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x1x9xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x1x9xf32>, tensor<1x1x1x9xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %xe = tensor.empty() : tensor<1x4x1xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x1xf32>) -> tensor<1x4x1xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x1x9xf32>) outs(%xf : tensor<1x4x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 1, 1] : tensor<1x4x1xf32> into tensor<1x4x1x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x1x9xf32>, tensor<1x4x1x1xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x1x9xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %ze = tensor.empty() : tensor<1x4x1x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x1x1xf32>) -> tensor<1x4x1x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x1x9xf32>) outs(%zf : tensor<1x4x1x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x1x9xf32>, tensor<1x4x1x1xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x1x9xf32> into tensor<4x1x9xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x9x4xf32> into tensor<4x9x4xf32>
  %oe = tensor.empty() : tensor<4x1x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x1x4xf32>) -> tensor<4x1x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x1x9xf32>, tensor<4x9x4xf32>) outs(%of : tensor<4x1x4xf32>) -> tensor<4x1x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 1, 4] : tensor<4x1x4xf32> into tensor<1x4x1x4xf32>
  return %out, %kall, %vall : tensor<1x4x1x4xf32>, tensor<1x2x9x4xf32>, tensor<1x2x9x4xf32>
}

// -----

// Decode's mask hides the keys after position 3 of a 9-key cache: it cannot be
// rebuilt for logical positions.
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %xe = tensor.empty() : tensor<1x4x8xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x8x8xf32>) outs(%xf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %ze = tensor.empty() : tensor<1x4x8x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x8x8xf32>) outs(%zf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %out, %k, %v : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}
// expected-warning@+1 {{@decode: layer 0: the mask's query position is not the cache length or the position argument}}
func.func @decode(%pos_arg: tensor<1xi64>, %qin: tensor<1x4x1x4xf32>, %knew: tensor<1x2x1x4xf32>, %vnew: tensor<1x2x1x4xf32>, %kcache: tensor<1x2x8x4xf32>, %vcache: tensor<1x2x8x4xf32>) -> (tensor<1x4x1x4xf32>, tensor<1x2x9x4xf32>, tensor<1x2x9x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %c0_i64 = arith.constant 0 : i64
  %cq_i64 = arith.constant 3 : i64
  %pfe = tensor.empty() : tensor<1xf32>
  %cosp = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%pos_arg : tensor<1xi64>) outs(%pfe : tensor<1xf32>) {
  ^bb0(%in: i64, %o: f32):
    %f = arith.sitofp %in : i64 to f32
    %c = math.cos %f : f32
    linalg.yield %c : f32
  } -> tensor<1xf32>
  %cos4 = tensor.expand_shape %cosp [[0, 1, 2, 3]] output_shape [1, 1, 1, 1] : tensor<1xf32> into tensor<1x1x1x1xf32>
  %qe = tensor.empty() : tensor<1x4x1x4xf32>
  %q = linalg.generic {indexing_maps = [#id4, #all, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%qin, %cos4 : tensor<1x4x1x4xf32>, tensor<1x1x1x1xf32>) outs(%qe : tensor<1x4x1x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.mulf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x4xf32>
  %qp0e = tensor.empty() : tensor<1xi64>
  %qp0 = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%qp0e : tensor<1xi64>) {
  ^bb0(%o: i64):
    linalg.yield %c0_i64 : i64
  } -> tensor<1xi64>
  %qp = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%qp0 : tensor<1xi64>) outs(%qp0e : tensor<1xi64>) {
  ^bb0(%in: i64, %o: i64):
    %r = arith.addi %in, %cq_i64 : i64
    linalg.yield %r : i64
  } -> tensor<1xi64>
  %kp_e = tensor.empty() : tensor<9xi64>
  %kp = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%kp_e : tensor<9xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<9xi64>
  %kpos = tensor.expand_shape %kp [[0, 1, 2, 3]] output_shape [1, 1, 1, 9] : tensor<9xi64> into tensor<1x1x1x9xi64>
  %qpos = tensor.expand_shape %qp [[0, 1, 2, 3]] output_shape [1, 1, 1, 1] : tensor<1xi64> into tensor<1x1x1x1xi64>
  %kall = tensor.concat dim(2) %kcache, %knew : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x9x4xf32>
  %vall = tensor.concat dim(2) %vcache, %vnew : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x9x4xf32>
  %be = tensor.empty() : tensor<1x1x1x9xi1>
  %cond = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x9xi64>, tensor<1x1x1x1xi64>) outs(%be : tensor<1x1x1x9xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x1x9xi1>
  %me = tensor.empty() : tensor<1x1x1x9xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x1x9xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x1x9xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x1x9xf32>
  %re = tensor.empty() : tensor<1x2x2x9x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%kall : tensor<1x2x9x4xf32>) outs(%re : tensor<1x2x2x9x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x9x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x9x4xf32> into tensor<1x4x9x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%vall : tensor<1x2x9x4xf32>) outs(%re : tensor<1x2x2x9x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x9x4xf32>
  %te = tensor.empty() : tensor<1x4x4x9xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x9x4xf32>) outs(%te : tensor<1x4x4x9xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x1x4xf32> into tensor<4x1x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x9xf32> into tensor<4x4x9xf32>
  %se = tensor.empty() : tensor<4x1x9xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x1x9xf32>) -> tensor<4x1x9xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x1x4xf32>, tensor<4x4x9xf32>) outs(%sf : tensor<4x1x9xf32>) -> tensor<4x1x9xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 1, 9] : tensor<4x1x9xf32> into tensor<1x4x1x9xf32>
  %ae = tensor.empty() : tensor<1x4x1x9xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x1x9xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x1x9xf32>, tensor<1x1x1x9xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %xe = tensor.empty() : tensor<1x4x1xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x1xf32>) -> tensor<1x4x1xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x1x9xf32>) outs(%xf : tensor<1x4x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 1, 1] : tensor<1x4x1xf32> into tensor<1x4x1x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x1x9xf32>, tensor<1x4x1x1xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x1x9xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %ze = tensor.empty() : tensor<1x4x1x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x1x1xf32>) -> tensor<1x4x1x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x1x9xf32>) outs(%zf : tensor<1x4x1x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x1x9xf32>, tensor<1x4x1x1xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x1x9xf32> into tensor<4x1x9xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x9x4xf32> into tensor<4x9x4xf32>
  %oe = tensor.empty() : tensor<4x1x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x1x4xf32>) -> tensor<4x1x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x1x9xf32>, tensor<4x9x4xf32>) outs(%of : tensor<4x1x4xf32>) -> tensor<4x1x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 1, 4] : tensor<4x1x4xf32> into tensor<1x4x1x4xf32>
  return %out, %kall, %vall : tensor<1x4x1x4xf32>, tensor<1x2x9x4xf32>, tensor<1x2x9x4xf32>
}

// -----

// A cache argument is read by something other than the append.
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %xe = tensor.empty() : tensor<1x4x8xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x8x8xf32>) outs(%xf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %ze = tensor.empty() : tensor<1x4x8x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x8x8xf32>) outs(%zf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %out, %k, %v : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}
// expected-warning@+1 {{@decode: layer 0: cache argument %arg4 has a use other than the append and tensor.dim (arith.negf)}}
func.func @decode(%pos_arg: tensor<1xi64>, %qin: tensor<1x4x1x4xf32>, %knew: tensor<1x2x1x4xf32>, %vnew: tensor<1x2x1x4xf32>, %kcache: tensor<1x2x8x4xf32>, %vcache: tensor<1x2x8x4xf32>) -> (tensor<1x4x1x4xf32>, tensor<1x2x9x4xf32>, tensor<1x2x9x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %c0_i64 = arith.constant 0 : i64
  %cq_i64 = arith.constant 8 : i64
  %pfe = tensor.empty() : tensor<1xf32>
  %cosp = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%pos_arg : tensor<1xi64>) outs(%pfe : tensor<1xf32>) {
  ^bb0(%in: i64, %o: f32):
    %f = arith.sitofp %in : i64 to f32
    %c = math.cos %f : f32
    linalg.yield %c : f32
  } -> tensor<1xf32>
  %cos4 = tensor.expand_shape %cosp [[0, 1, 2, 3]] output_shape [1, 1, 1, 1] : tensor<1xf32> into tensor<1x1x1x1xf32>
  %qe = tensor.empty() : tensor<1x4x1x4xf32>
  %q = linalg.generic {indexing_maps = [#id4, #all, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%qin, %cos4 : tensor<1x4x1x4xf32>, tensor<1x1x1x1xf32>) outs(%qe : tensor<1x4x1x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.mulf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x4xf32>
  %qp0e = tensor.empty() : tensor<1xi64>
  %qp0 = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%qp0e : tensor<1xi64>) {
  ^bb0(%o: i64):
    linalg.yield %c0_i64 : i64
  } -> tensor<1xi64>
  %qp = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%qp0 : tensor<1xi64>) outs(%qp0e : tensor<1xi64>) {
  ^bb0(%in: i64, %o: i64):
    %r = arith.addi %in, %cq_i64 : i64
    linalg.yield %r : i64
  } -> tensor<1xi64>
  %kp_e = tensor.empty() : tensor<9xi64>
  %kp = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%kp_e : tensor<9xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<9xi64>
  %kpos = tensor.expand_shape %kp [[0, 1, 2, 3]] output_shape [1, 1, 1, 9] : tensor<9xi64> into tensor<1x1x1x9xi64>
  %qpos = tensor.expand_shape %qp [[0, 1, 2, 3]] output_shape [1, 1, 1, 1] : tensor<1xi64> into tensor<1x1x1x1xi64>
  %kall = tensor.concat dim(2) %kcache, %knew : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x9x4xf32>
  %vall = tensor.concat dim(2) %vcache, %vnew : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x9x4xf32>
  %be = tensor.empty() : tensor<1x1x1x9xi1>
  %cond = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x9xi64>, tensor<1x1x1x1xi64>) outs(%be : tensor<1x1x1x9xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x1x9xi1>
  %me = tensor.empty() : tensor<1x1x1x9xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x1x9xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x1x9xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x1x9xf32>
  %re = tensor.empty() : tensor<1x2x2x9x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%kall : tensor<1x2x9x4xf32>) outs(%re : tensor<1x2x2x9x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x9x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x9x4xf32> into tensor<1x4x9x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%vall : tensor<1x2x9x4xf32>) outs(%re : tensor<1x2x2x9x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x9x4xf32>
  %te = tensor.empty() : tensor<1x4x4x9xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x9x4xf32>) outs(%te : tensor<1x4x4x9xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x1x4xf32> into tensor<4x1x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x9xf32> into tensor<4x4x9xf32>
  %se = tensor.empty() : tensor<4x1x9xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x1x9xf32>) -> tensor<4x1x9xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x1x4xf32>, tensor<4x4x9xf32>) outs(%sf : tensor<4x1x9xf32>) -> tensor<4x1x9xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 1, 9] : tensor<4x1x9xf32> into tensor<1x4x1x9xf32>
  %ae = tensor.empty() : tensor<1x4x1x9xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x1x9xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x1x9xf32>, tensor<1x1x1x9xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %xe = tensor.empty() : tensor<1x4x1xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x1xf32>) -> tensor<1x4x1xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x1x9xf32>) outs(%xf : tensor<1x4x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 1, 1] : tensor<1x4x1xf32> into tensor<1x4x1x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x1x9xf32>, tensor<1x4x1x1xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x1x9xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %ze = tensor.empty() : tensor<1x4x1x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x1x1xf32>) -> tensor<1x4x1x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x1x9xf32>) outs(%zf : tensor<1x4x1x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x1x9xf32>, tensor<1x4x1x1xf32>) outs(%ae : tensor<1x4x1x9xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x1x9xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x1x9xf32> into tensor<4x1x9xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x9x4xf32> into tensor<4x9x4xf32>
  %oe = tensor.empty() : tensor<4x1x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x1x4xf32>) -> tensor<4x1x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x1x9xf32>, tensor<4x9x4xf32>) outs(%of : tensor<4x1x4xf32>) -> tensor<4x1x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 1, 4] : tensor<4x1x4xf32> into tensor<1x4x1x4xf32>
  %kneg = arith.negf %kcache : tensor<1x2x8x4xf32>
  return %out, %kall, %vall : tensor<1x4x1x4xf32>, tensor<1x2x9x4xf32>, tensor<1x2x9x4xf32>
}

// -----

// A dynamic head count: the cache shape cannot be derived.
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
// expected-warning@+1 {{is not part of a recognised attention: the batch, head count or head dim of the queries is dynamic}}
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qd = tensor.cast %q : tensor<1x4x8x4xf32> to tensor<1x?x8x4xf32>
  %qc = tensor.collapse_shape %qd [[0, 1], [2], [3]] : tensor<1x?x8x4xf32> into tensor<?x8x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<?x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %xe = tensor.empty() : tensor<1x4x8xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x8x8xf32>) outs(%xf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %ze = tensor.empty() : tensor<1x4x8x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x8x8xf32>) outs(%zf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %out, %k, %v : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// An unusual reshape between the GQA repeat and the attention.
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
// expected-warning@+1 {{is not part of a recognised attention: keys and values before the repeat are not 4-D tensors of one type}}
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %kr2 = tensor.collapse_shape %kr [[0, 1], [2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<2x2x8x4xf32>
  %shape = arith.constant dense<[1, 4, 8, 4]> : tensor<4xi64>
  %krc = tensor.reshape %kr2(%shape) : (tensor<2x2x8x4xf32>, tensor<4xi64>) -> tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %xe = tensor.empty() : tensor<1x4x8xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x8x8xf32>) outs(%xf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %ze = tensor.empty() : tensor<1x4x8x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x8x8xf32>) outs(%zf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %out, %k, %v : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// The scores are scaled by a function argument, not a constant.
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
// expected-warning@+1 {{is not part of a recognised attention: the scores are scaled by a factor that is not a constant}}
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>, %scale_arg: f32) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qc = tensor.collapse_shape %q [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %ktc = tensor.collapse_shape %kt [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4 : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.mulf %in, %scale_arg : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%scaled, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %xe = tensor.empty() : tensor<1x4x8xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x8x8xf32>) outs(%xf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %ze = tensor.empty() : tensor<1x4x8x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x8x8xf32>) outs(%zf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %out, %k, %v : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// SDPA's split with the Q factor negated: the scale is negative.
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
// expected-warning@+1 {{is not part of a recognised attention: the scores are not scaled by a positive finite constant (the factors multiply to -0.5}}
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %scale64 = arith.constant 0.35355339059327379 : f64
  %scale_t = arith.constant dense<5.000000e-01> : tensor<f32>
  %qroot = arith.constant -0.70710678118654757 : f64
  %kroot = arith.constant 0.70710678118654757 : f64
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qse = tensor.empty() : tensor<1x4x8x4xf32>
  %qs = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%q : tensor<1x4x8x4xf32>) outs(%qse : tensor<1x4x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    %c = arith.truncf %qroot : f64 to f32
    %r = arith.mulf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x4xf32>
  %ktse = tensor.empty() : tensor<1x4x4x8xf32>
  %kts = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kt : tensor<1x4x4x8xf32>) outs(%ktse : tensor<1x4x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %c = arith.truncf %kroot : f64 to f32
    %r = arith.mulf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<1x4x4x8xf32>
  %qc = tensor.collapse_shape %qs [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %ktc = tensor.collapse_shape %kts [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %xe = tensor.empty() : tensor<1x4x8xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x8x8xf32>) outs(%xf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %ze = tensor.empty() : tensor<1x4x8x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x8x8xf32>) outs(%zf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %out, %k, %v : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// The factor on K^T is not a constant.
#id1 = affine_map<(d0) -> (d0)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id5 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
#rep = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#heads = affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>
#row = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
#row3 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#col = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0, d3)>
#all = affine_map<(d0, d1, d2, d3) -> (0, 0, 0, 0)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>
#par4 = ["parallel", "parallel", "parallel", "parallel"]
// expected-warning@+1 {{is not part of a recognised attention: the scores are scaled by a factor that is not a constant}}
func.func @prefill(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %zero = arith.constant 0.000000e+00 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 5.000000e-01 : f32
  %vis = arith.constant dense<0.000000e+00> : tensor<f32>
  %hid = arith.constant dense<-3.40282347E+38> : tensor<f32>
  %scale64 = arith.constant 0.35355339059327379 : f64
  %scale_t = arith.constant dense<5.000000e-01> : tensor<f32>
  %qroot = arith.constant 0.70710678118654757 : f64
  %kroot = arith.constant 0.70710678118654757 : f64
  %pos_e = tensor.empty() : tensor<8xi64>
  %pos = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%pos_e : tensor<8xi64>) {
  ^bb0(%o: i64):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    linalg.yield %c : i64
  } -> tensor<8xi64>
  %kpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 1, 8] : tensor<8xi64> into tensor<1x1x1x8xi64>
  %qpos = tensor.expand_shape %pos [[0, 1, 2, 3]] output_shape [1, 1, 8, 1] : tensor<8xi64> into tensor<1x1x8x1xi64>
  %be = tensor.empty() : tensor<1x1x8x8xi1>
  %cond = linalg.generic {indexing_maps = [#col, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kpos, %qpos : tensor<1x1x1x8xi64>, tensor<1x1x8x1xi64>) outs(%be : tensor<1x1x8x8xi1>) {
  ^bb0(%a: i64, %b: i64, %o: i1):
    %c = arith.cmpi sle, %a, %b : i64
    linalg.yield %c : i1
  } -> tensor<1x1x8x8xi1>
  %me = tensor.empty() : tensor<1x1x8x8xf32>
  %mask = linalg.generic {indexing_maps = [#id4, #scalar, #scalar, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%cond, %vis, %hid : tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) outs(%me : tensor<1x1x8x8xf32>) {
  ^bb0(%c: i1, %a: f32, %b: f32, %o: f32):
    %r = arith.select %c, %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x1x8x8xf32>
  %re = tensor.empty() : tensor<1x2x2x8x4xf32>
  %kr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%k : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %krc = tensor.collapse_shape %kr [[0], [1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<1x4x8x4xf32>
  %vr = linalg.generic {indexing_maps = [#rep, #id5], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<1x2x8x4xf32>) outs(%re : tensor<1x2x2x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  } -> tensor<1x2x2x8x4xf32>
  %te = tensor.empty() : tensor<1x4x4x8xf32>
  %kt = linalg.transpose ins(%krc : tensor<1x4x8x4xf32>) outs(%te : tensor<1x4x4x8xf32>) permutation = [0, 1, 3, 2]
  %qse = tensor.empty() : tensor<1x4x8x4xf32>
  %qs = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%q : tensor<1x4x8x4xf32>) outs(%qse : tensor<1x4x8x4xf32>) {
  ^bb0(%in: f32, %o: f32):
    %c = arith.truncf %qroot : f64 to f32
    %r = arith.mulf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x4xf32>
  %ktse = tensor.empty() : tensor<1x4x4x8xf32>
  %kts = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%kt : tensor<1x4x4x8xf32>) outs(%ktse : tensor<1x4x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %c = arith.negf %o : f32
    %r = arith.mulf %in, %c : f32
    linalg.yield %r : f32
  } -> tensor<1x4x4x8xf32>
  %qc = tensor.collapse_shape %qs [[0, 1], [2], [3]] : tensor<1x4x8x4xf32> into tensor<4x8x4xf32>
  %ktc = tensor.collapse_shape %kts [[0, 1], [2], [3]] : tensor<1x4x4x8xf32> into tensor<4x4x8xf32>
  %se = tensor.empty() : tensor<4x8x8xf32>
  %sf = linalg.fill ins(%zero : f32) outs(%se : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qc, %ktc : tensor<4x8x4xf32>, tensor<4x4x8xf32>) outs(%sf : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s4 = tensor.expand_shape %s [[0, 1], [2], [3]] output_shape [1, 4, 8, 8] : tensor<4x8x8xf32> into tensor<1x4x8x8xf32>
  %ae = tensor.empty() : tensor<1x4x8x8xf32>
  %masked = linalg.generic {indexing_maps = [#id4, #heads, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%s4, %mask : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %xe = tensor.empty() : tensor<1x4x8xf32>
  %xf = linalg.fill ins(%ninf : f32) outs(%xe : tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  %max = linalg.generic {indexing_maps = [#id4, #row3], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%masked : tensor<1x4x8x8xf32>) outs(%xf : tensor<1x4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.maximumf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8xf32>
  %maxe = tensor.expand_shape %max [[0], [1], [2, 3]] output_shape [1, 4, 8, 1] : tensor<1x4x8xf32> into tensor<1x4x8x1xf32>
  %sub = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%masked, %maxe : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.subf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %exp = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%sub : tensor<1x4x8x8xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = math.exp %a : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %ze = tensor.empty() : tensor<1x4x8x1xf32>
  %zf = linalg.fill ins(%zero : f32) outs(%ze : tensor<1x4x8x1xf32>) -> tensor<1x4x8x1xf32>
  %sum = linalg.generic {indexing_maps = [#id4, #row], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%exp : tensor<1x4x8x8xf32>) outs(%zf : tensor<1x4x8x1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %r = arith.addf %in, %o : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x1xf32>
  %p = linalg.generic {indexing_maps = [#id4, #row, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%exp, %sum : tensor<1x4x8x8xf32>, tensor<1x4x8x1xf32>) outs(%ae : tensor<1x4x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.divf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1x4x8x8xf32>
  %pc = tensor.collapse_shape %p [[0, 1], [2], [3]] : tensor<1x4x8x8xf32> into tensor<4x8x8xf32>
  %vc = tensor.collapse_shape %vr [[0, 1, 2], [3], [4]] : tensor<1x2x2x8x4xf32> into tensor<4x8x4xf32>
  %oe = tensor.empty() : tensor<4x8x4xf32>
  %of = linalg.fill ins(%zero : f32) outs(%oe : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %pv = linalg.batch_matmul ins(%pc, %vc : tensor<4x8x8xf32>, tensor<4x8x4xf32>) outs(%of : tensor<4x8x4xf32>) -> tensor<4x8x4xf32>
  %out = tensor.expand_shape %pv [[0, 1], [2], [3]] output_shape [1, 4, 8, 4] : tensor<4x8x4xf32> into tensor<1x4x8x4xf32>
  return %out, %k, %v : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// Attention on buffers (after bufferization): the rewrite works on tensors.
// expected-warning@+1 {{is not part of a recognised attention: batch_matmul on buffers}}
func.func @prefill(%a: memref<4x8x4xf32>, %b: memref<4x4x8xf32>, %c: memref<4x8x8xf32>) {
  linalg.batch_matmul ins(%a, %b : memref<4x8x4xf32>, memref<4x4x8xf32>) outs(%c : memref<4x8x8xf32>)
  return
}
