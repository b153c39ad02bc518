// RUN: snapkv-opt %s --transform-preload-library="transform-library-paths=%p/Inputs/attention-tile-decompose.mlir" --transform-interpreter --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s
// RUN: snapkv-opt %s --snapkv-cpu-pipeline="query-tile=3 key-tile=4" | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// snapkv.attention tiled through TilingInterface and decomposed
// (AggregatedOpInterface) runs and matches its untiled decomposition and the
// float64 reference (python/snapkv/reference.py, 6 decimals): GQA 4 / 2,
// D = 8, a dynamic prompt of 7 rows in tiles of 3 (the last one partial)
// over key tiles of 4 (the last one partial), and a decode row at offset 4
// (keys 5 and 6 hidden). The first command's transform schedule,
// Inputs/attention-tile-decompose.mlir, tiles the ops marked `tile` and
// decomposes those marked `whole`, before the CPU pipeline; the second
// leaves the tiling to the pipeline (every op tiled and decomposed), checked
// against the same reference.
// Inputs: q[0, h, i, d] = sin(a * (31 h + 7 i + d) + c) with (a, c) = (0.7, 0)
// for the prompt and (1.3, 0.2) for the decode row; keys (0.9, 0.5), values
// (0.3, 1.0), in f32.
//
// Flags, 1 when the max absolute difference is below 1e-5: prompt tiled vs
// untiled, tiled vs reference, untiled vs reference; then the same for the
// decode row.
// CHECK: [1,  1,  1,  1,  1,  1]

#config = #snapkv.lowering_config<mapping = forall, key_tile = 4, query_tile = 3, chunk = 0, keep_logits = false>

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}

// sin(a * (31 h + 7 i + d) + c) over [1, H, L, 8].
func.func @inputs(%a: f32, %c: f32, %init: tensor<1x?x?x8xf32>) -> tensor<1x?x?x8xf32> {
  %t = linalg.generic {indexing_maps = [affine_map<(b, h, i, d) -> (b, h, i, d)>],
      iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      outs(%init : tensor<1x?x?x8xf32>) {
  ^bb0(%out: f32):
    %h = linalg.index 1 : index
    %i = linalg.index 2 : index
    %d = linalg.index 3 : index
    %c31 = arith.constant 31 : index
    %c7 = arith.constant 7 : index
    %h31 = arith.muli %h, %c31 : index
    %i7 = arith.muli %i, %c7 : index
    %s = arith.addi %h31, %i7 : index
    %n = arith.addi %s, %d : index
    %ni = arith.index_cast %n : index to i64
    %x = arith.sitofp %ni : i64 to f32
    %ax = arith.mulf %a, %x : f32
    %y = arith.addf %ax, %c : f32
    %r = math.sin %y : f32
    linalg.yield %r : f32
  } -> tensor<1x?x?x8xf32>
  return %t : tensor<1x?x?x8xf32>
}

// 1 when max |x - y| < 1e-5.
func.func @close(%x: tensor<1x4x?x8xf32>, %y: tensor<1x4x?x8xf32>) -> i64 {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %m = linalg.generic {indexing_maps = [affine_map<(b, h, i, d) -> (b, h, i, d)>,
                                        affine_map<(b, h, i, d) -> (b, h, i, d)>,
                                        affine_map<(b, h, i, d) -> ()>],
      iterator_types = ["reduction", "reduction", "reduction", "reduction"]}
      ins(%x, %y : tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) outs(%init : tensor<f32>) {
  ^bb0(%a: f32, %b: f32, %acc: f32):
    %d = arith.subf %a, %b : f32
    %ad = math.absf %d : f32
    %mx = arith.maximumf %acc, %ad : f32
    linalg.yield %mx : f32
  } -> tensor<f32>
  %v = tensor.extract %m[] : tensor<f32>
  %tol = arith.constant 1.0e-5 : f32
  %ok = arith.cmpf olt, %v, %tol : f32
  %r = arith.extui %ok : i1 to i64
  return %r : i64
}

func.func @prompt_tiled(%q: tensor<1x4x?x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>) -> tensor<1x4x?x8xf32> {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x?x8xf32>) {snapkv.lowering_config = #config, tile}
      : tensor<1x4x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32> -> tensor<1x4x?x8xf32>
  return %o : tensor<1x4x?x8xf32>
}

func.func @prompt_whole(%q: tensor<1x4x?x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>) -> tensor<1x4x?x8xf32> {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x?x8xf32>) {snapkv.lowering_config = #config, whole}
      : tensor<1x4x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32> -> tensor<1x4x?x8xf32>
  return %o : tensor<1x4x?x8xf32>
}

func.func @decode_tiled(%q: tensor<1x4x1x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>, %pos: index) -> tensor<1x4x1x8xf32> {
  %o = snapkv.attention %q, %k, %v offset %pos outs(%q : tensor<1x4x1x8xf32>) {snapkv.lowering_config = #config, tile}
      : tensor<1x4x1x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

func.func @decode_whole(%q: tensor<1x4x1x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>, %pos: index) -> tensor<1x4x1x8xf32> {
  %o = snapkv.attention %q, %k, %v offset %pos outs(%q : tensor<1x4x1x8xf32>) {snapkv.lowering_config = #config, whole}
      : tensor<1x4x1x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32> -> tensor<1x4x1x8xf32>
  return %o : tensor<1x4x1x8xf32>
}

func.func @main() {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c7 = arith.constant 7 : index
  %e1 = tensor.empty(%c4, %c7) : tensor<1x?x?x8xf32>
  %e2 = tensor.empty(%c2, %c7) : tensor<1x?x?x8xf32>
  %e3 = tensor.empty(%c4, %c1) : tensor<1x?x?x8xf32>
  %f0 = arith.constant 0.0 : f32
  %f02 = arith.constant 0.2 : f32
  %f03 = arith.constant 0.3 : f32
  %f05 = arith.constant 0.5 : f32
  %f07 = arith.constant 0.7 : f32
  %f09 = arith.constant 0.9 : f32
  %f10 = arith.constant 1.0 : f32
  %f13 = arith.constant 1.3 : f32
  %q0 = call @inputs(%f07, %f0, %e1) : (f32, f32, tensor<1x?x?x8xf32>) -> tensor<1x?x?x8xf32>
  %k0 = call @inputs(%f09, %f05, %e2) : (f32, f32, tensor<1x?x?x8xf32>) -> tensor<1x?x?x8xf32>
  %v0 = call @inputs(%f03, %f10, %e2) : (f32, f32, tensor<1x?x?x8xf32>) -> tensor<1x?x?x8xf32>
  %d0 = call @inputs(%f13, %f02, %e3) : (f32, f32, tensor<1x?x?x8xf32>) -> tensor<1x?x?x8xf32>
  %q = tensor.cast %q0 : tensor<1x?x?x8xf32> to tensor<1x4x?x8xf32>
  %k = tensor.cast %k0 : tensor<1x?x?x8xf32> to tensor<1x2x?x8xf32>
  %v = tensor.cast %v0 : tensor<1x?x?x8xf32> to tensor<1x2x?x8xf32>
  %qd = tensor.cast %d0 : tensor<1x?x?x8xf32> to tensor<1x4x1x8xf32>

  %pt = call @prompt_tiled(%q, %k, %v) : (tensor<1x4x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) -> tensor<1x4x?x8xf32>
  %pw = call @prompt_whole(%q, %k, %v) : (tensor<1x4x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) -> tensor<1x4x?x8xf32>
  %pe0 = arith.constant dense<[[
      [
       [0.841471, 0.963558, 0.999574, 0.946300, 0.808496, 0.598472, 0.334988, 0.041581],
       [0.443855, 0.357558, 0.239322, 0.099708, -0.048813, -0.192974, -0.319896, -0.418244],
       [-0.009237, -0.007959, -0.005970, -0.003447, -0.000617, 0.002269, 0.004952, 0.007193],
       [0.210592, 0.241682, 0.251184, 0.238248, 0.204030, 0.151587, 0.085603, 0.011972],
       [0.176495, 0.142086, 0.094986, 0.039401, -0.019704, -0.077049, -0.127511, -0.166583],
       [0.011802, 0.012374, 0.011840, 0.010249, 0.007743, 0.004544, 0.000940, -0.002748],
       [0.122560, 0.139677, 0.144317, 0.136065, 0.115659, 0.084922, 0.046598, 0.004113]],
      [
       [0.841471, 0.963558, 0.999574, 0.946300, 0.808496, 0.598472, 0.334988, 0.041581],
       [0.440340, 0.352201, 0.232601, 0.092223, -0.056392, -0.199970, -0.325686, -0.422309],
       [0.011006, 0.011617, 0.011190, 0.009764, 0.007465, 0.004500, 0.001132, -0.002337],
       [0.214095, 0.243466, 0.251089, 0.236283, 0.200371, 0.146560, 0.079657, 0.005638],
       [0.172644, 0.136134, 0.087465, 0.030982, -0.028269, -0.084994, -0.134127, -0.171279],
       [-0.010513, -0.009185, -0.007036, -0.004259, -0.001102, 0.002154, 0.005217, 0.007815],
       [0.123543, 0.139925, 0.143809, 0.134846, 0.113838, 0.082661, 0.044100, 0.001600]],
      [
       [-0.767686, -0.922776, -0.995436, -0.979178, -0.875452, -0.693525, -0.449647, -0.165604],
       [-0.465524, -0.392805, -0.284999, -0.151734, -0.004916, 0.142342, 0.276885, 0.386694],
       [-0.010156, -0.011184, -0.011213, -0.010240, -0.008352, -0.005718, -0.002574, 0.000801],
       [-0.196216, -0.233894, -0.250679, -0.245071, -0.217572, -0.170638, -0.108460, -0.036596],
       [-0.183553, -0.153228, -0.109215, -0.055447, 0.003275, 0.061704, 0.114621, 0.157299],
       [0.011356, 0.010407, 0.008528, 0.005887, 0.002721, -0.000689, -0.004037, -0.007024],
       [-0.113142, -0.134433, -0.143715, -0.140160, -0.124084, -0.096925, -0.061107, -0.019831]],
      [
       [-0.767686, -0.922776, -0.995436, -0.979178, -0.875452, -0.693525, -0.449647, -0.165604],
       [-0.466832, -0.395100, -0.288076, -0.155317, -0.008685, 0.138723, 0.273739, 0.384303],
       [0.012586, 0.011654, 0.009681, 0.006843, 0.003394, -0.000358, -0.004078, -0.007435],
       [-0.192937, -0.231817, -0.249990, -0.245831, -0.219714, -0.173969, -0.112684, -0.041335],
       [-0.187440, -0.160046, -0.118356, -0.066094, -0.007928, 0.050947, 0.105271, 0.150190],
       [-0.008156, -0.009168, -0.009361, -0.008718, -0.007296, -0.005222, -0.002681, 0.000098],
       [-0.110598, -0.133155, -0.143818, -0.141634, -0.126798, -0.100635, -0.065483, -0.024483]]]]> : tensor<1x4x7x8xf32>
  %pe = tensor.cast %pe0 : tensor<1x4x7x8xf32> to tensor<1x4x?x8xf32>
  %dt = call @decode_tiled(%qd, %k, %v, %c4) : (tensor<1x4x1x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, index) -> tensor<1x4x1x8xf32>
  %dw = call @decode_whole(%qd, %k, %v, %c4) : (tensor<1x4x1x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, index) -> tensor<1x4x1x8xf32>
  %de0 = arith.constant dense<[[
      [
       [0.172555, 0.136073, 0.087435, 0.030987, -0.028229, -0.084923, -0.134031, -0.171167]],
      [
       [0.176601, 0.142150, 0.095001, 0.039365, -0.019787, -0.077171, -0.127662, -0.166749]],
      [
       [-0.186032, -0.157576, -0.115044, -0.062236, -0.003868, 0.054845, 0.108659, 0.152767]],
      [
       [-0.185391, -0.156578, -0.113779, -0.060816, -0.002420, 0.056191, 0.109784, 0.153569]]]]> : tensor<1x4x1x8xf32>
  %dtc = tensor.cast %dt : tensor<1x4x1x8xf32> to tensor<1x4x?x8xf32>
  %dwc = tensor.cast %dw : tensor<1x4x1x8xf32> to tensor<1x4x?x8xf32>
  %de = tensor.cast %de0 : tensor<1x4x1x8xf32> to tensor<1x4x?x8xf32>

  %r0 = call @close(%pt, %pw) : (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) -> i64
  %r1 = call @close(%pt, %pe) : (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) -> i64
  %r2 = call @close(%pw, %pe) : (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) -> i64
  %r3 = call @close(%dtc, %dwc) : (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) -> i64
  %r4 = call @close(%dtc, %de) : (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) -> i64
  %r5 = call @close(%dwc, %de) : (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) -> i64
  %flags = tensor.from_elements %r0, %r1, %r2, %r3, %r4, %r5 : tensor<6xi64>
  %fm = bufferization.to_buffer %flags : tensor<6xi64> to memref<6xi64>
  %fu = memref.cast %fm : memref<6xi64> to memref<*xi64>
  call @printMemrefI64(%fu) : (memref<*xi64>) -> ()
  return
}
