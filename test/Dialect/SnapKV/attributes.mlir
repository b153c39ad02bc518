// The snapkv attributes: #snapkv.tile round-trips; the discardable snapkv.* attributes are
// verified by the dialect.
// RUN: snapkv-opt %s -split-input-file -verify-diagnostics -allow-unregistered-dialect | FileCheck %s

// CHECK-LABEL: func.func @round_trip
// CHECK: snapkv.fuse = array<i64: 0, 2>
// CHECK: snapkv.tile = #snapkv.tile<group = 1, sizes = [1, 0], mapping = gpu_blocks>
// CHECK: snapkv.tile = #snapkv.tile<group = 0, sizes = [4], mapping = forall>
func.func @round_trip() attributes {snapkv.exposed_scores = ["window=2 capacity=4"]} {
  "test.a"() {snapkv.fuse = array<i64: 0, 2>} : () -> ()
  "test.b"() {snapkv.tile = #snapkv.tile<group = 1, sizes = [1, 0], mapping = gpu_blocks>} : () -> ()
  "test.c"() {snapkv.tile = #snapkv.tile<group = 0, sizes = [4], mapping = forall>} : () -> ()
  return
}

// -----

// expected-error @below {{unknown snapkv attribute 'snapkv.tiles'}}
func.func @unknown() attributes {snapkv.tiles = 1} {
  return
}

// -----

func.func @tile_not_a_tile() {
  // expected-error @below {{snapkv.tile must be a #snapkv.tile attribute}}
  "test.a"() {snapkv.tile = [1, 2]} : () -> ()
  return
}

// -----

func.func @negative_size() {
  // expected-error @below {{tile sizes must be non-negative}}
  "test.a"() {snapkv.tile = #snapkv.tile<group = 0, sizes = [1, -1], mapping = forall>} : () -> ()
  return
}

// -----

func.func @four_blocks() {
  // expected-error @below {{a gpu_blocks tile maps at most 3 loops to blocks}}
  "test.a"() {snapkv.tile = #snapkv.tile<group = 0, sizes = [1, 1, 1, 1], mapping = gpu_blocks>} : () -> ()
  return
}

// -----

func.func @bad_mapping() {
  // expected-error @below {{expected ::mlir::snapkv::TileMapping to be one of: forall, gpu_blocks}}
  // expected-error @below {{failed to parse SnapKV_TileAttr parameter 'mapping'}}
  "test.a"() {snapkv.tile = #snapkv.tile<group = 0, sizes = [1], mapping = threads>} : () -> ()
  return
}

// -----

func.func @empty_fuse() {
  // expected-error @below {{snapkv.fuse must be a non-empty array<i64> of tile groups}}
  "test.a"() {snapkv.fuse = array<i64>} : () -> ()
  return
}

// -----

// expected-error @below {{snapkv.refusal must be a dictionary with string reason, function and message, on a module}}
module attributes {snapkv.refusal = {reason = "no-attention"}} {
}

// -----

// expected-error @below {{snapkv.refusal reason 'no-atention' is not a refusal code (RefusalKind)}}
module attributes {snapkv.refusal = {function = "f", message = "m", reason = "no-atention"}} {
}

// -----

// expected-error @below {{snapkv.exposed_scores must be an array of strings}}
func.func @scores() attributes {snapkv.exposed_scores = [1]} {
  return
}

// -----

// CHECK-LABEL: func.func @in_place
// CHECK-SAME: snapkv.append_in_place = {buffers = [0, 1], dim = 2 : i64, rows = 2 : i64}
func.func @in_place(%k: memref<1x2x?x4xf32>, %v: memref<1x2x?x4xf32>, %rows: tensor<2xi64>)
    attributes {snapkv.append_in_place = {buffers = [0, 1], dim = 2, rows = 2}} {
  return
}

// -----

// A ragged cache (budget=adaptive): (keys, values) pairs of packed buffers,
// rows = [pairs, 2, B, Hc] (starts, lengths).
// CHECK-LABEL: func.func @ragged
// CHECK-SAME: snapkv.append_in_place = {buffers = [0, 1], dim = 1 : i64, layout = "ragged", rows = 2 : i64}
func.func @ragged(%k: memref<1x?x4xf32>, %v: memref<1x?x4xf32>, %rows: tensor<1x2x1x3xi64>)
    attributes {snapkv.append_in_place = {buffers = [0, 1], dim = 1, layout = "ragged", rows = 2}} {
  return
}

// -----

// A ragged rows argument must hold one (starts, lengths) per pair.
// expected-error @below {{snapkv.append_in_place must be}}
func.func @ragged(%k: memref<1x?x4xf32>, %v: memref<1x?x4xf32>, %rows: tensor<2xi64>)
    attributes {snapkv.append_in_place = {buffers = [0, 1], dim = 1, layout = "ragged", rows = 2}} {
  return
}

// -----

// An unknown layout.
// expected-error @below {{snapkv.append_in_place must be}}
func.func @ragged(%k: memref<1x?x4xf32>, %v: memref<1x?x4xf32>, %rows: tensor<2xi64>)
    attributes {snapkv.append_in_place = {buffers = [0, 1], dim = 1, layout = "paged", rows = 2}} {
  return
}

// -----

// The buffer is still a tensor.
// expected-error @below {{snapkv.append_in_place must be {rows = <argument>, buffers = [<arguments>], dim = <int>[, layout = "ragged"]} on a function whose rows argument holds one i64 per buffer (ragged: [pairs, 2, B, Hc]) and whose buffers are memrefs of rank > dim}}
func.func @in_place(%k: tensor<1x2x?x4xf32>, %rows: tensor<1xi64>)
    attributes {snapkv.append_in_place = {buffers = [0], dim = 2, rows = 1}} {
  return
}

// -----

// rows holds two row counts for one buffer.
// expected-error @below {{snapkv.append_in_place must be}}
func.func @in_place(%k: memref<1x2x?x4xf32>, %rows: tensor<2xi64>)
    attributes {snapkv.append_in_place = {buffers = [0], dim = 2, rows = 1}} {
  return
}

// -----

// dim past the buffer's rank; an argument out of range.
// expected-error @below {{snapkv.append_in_place must be}}
func.func @in_place(%k: memref<1x2x?x4xf32>, %rows: tensor<1xi64>)
    attributes {snapkv.append_in_place = {buffers = [0], dim = 4, rows = 1}} {
  return
}

// -----

// expected-error @below {{snapkv.append_in_place must be}}
func.func @in_place(%k: memref<1x2x?x4xf32>, %rows: tensor<1xi64>)
    attributes {snapkv.append_in_place = {buffers = [0], dim = 2, rows = 7}} {
  return
}

// -----

// #snapkv.lowering_config: one op's lowering (snapkv-configure-lowering writes it).
// CHECK-LABEL: func.func @lowering_config
// CHECK: snapkv.lowering_config = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 16, query_tile = 8, chunk = 32, keep_logits = false, threads = 64, tensor_cores = true>
func.func @lowering_config(%s: tensor<1x2x8xf32>, %init: tensor<1x2x5xi64>) -> tensor<1x2x5xi64> {
  %t = snapkv.top_positions %s window 2 capacity 5 outs(%init : tensor<1x2x5xi64>)
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 16, query_tile = 8, chunk = 32, keep_logits = false, threads = 64, tensor_cores = true>}
      : tensor<1x2x8xf32> -> tensor<1x2x5xi64>
  return %t : tensor<1x2x5xi64>
}

// -----

func.func @lowering_config_zero_tile() {
  // expected-error @below {{key_tile and query_tile must be positive, got 0 and 32}}
  "test.a"() {x = #snapkv.lowering_config<mapping = forall, key_tile = 0, query_tile = 32, chunk = 0, keep_logits = true>} : () -> ()
  return
}

// -----

func.func @lowering_config_negative_chunk() {
  // expected-error @below {{chunk must be non-negative (0: automatic), got -1}}
  "test.a"() {x = #snapkv.lowering_config<mapping = forall, key_tile = 8, query_tile = 32, chunk = -1, keep_logits = true>} : () -> ()
  return
}

// -----

func.func @lowering_config_gpu_keeps_no_logits() {
  // expected-error @below {{keep_logits needs mapping = forall}}
  "test.a"() {x = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 8, query_tile = 32, chunk = 0, keep_logits = true, threads = 64, tensor_cores = true>} : () -> ()
  return
}

// -----

// The microkernel of a CPU configuration (none, the default, is not printed),
// and on its own on a linalg contraction.
// CHECK-LABEL: func.func @microkernel
// CHECK: snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 64, query_tile = 32, chunk = 0, keep_logits = true, microkernel = avx512bf16>
// CHECK: snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 64, query_tile = 32, chunk = 0, keep_logits = true>}
// CHECK: linalg.matmul {snapkv.microkernel = #snapkv.microkernel<amx>}
func.func @microkernel(%q: tensor<1x2x2x4xbf16>, %k: tensor<1x2x24x4xbf16>, %v: tensor<1x2x24x4xbf16>,
                       %a: tensor<4x8xbf16>, %b: tensor<8x4xbf16>, %c: tensor<4x4xf32>)
    -> (tensor<1x2x6xi64>, tensor<1x2x6xi64>, tensor<4x4xf32>) {
  %0, %1, %2 = snapkv.select %q, %k, %v window 2 capacity 6
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 64, query_tile = 32, chunk = 0, keep_logits = true, microkernel = avx512bf16>}
      : (tensor<1x2x2x4xbf16>, tensor<1x2x24x4xbf16>, tensor<1x2x24x4xbf16>)
      -> (tensor<1x2x6x4xbf16>, tensor<1x2x6x4xbf16>, tensor<1x2x6xi64>)
  %3, %4, %5 = snapkv.select %q, %k, %v window 2 capacity 6
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 64, query_tile = 32, chunk = 0, keep_logits = true, microkernel = none>}
      : (tensor<1x2x2x4xbf16>, tensor<1x2x24x4xbf16>, tensor<1x2x24x4xbf16>)
      -> (tensor<1x2x6x4xbf16>, tensor<1x2x6x4xbf16>, tensor<1x2x6xi64>)
  %m = linalg.matmul {snapkv.microkernel = #snapkv.microkernel<amx>}
      ins(%a, %b : tensor<4x8xbf16>, tensor<8x4xbf16>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %2, %5, %m : tensor<1x2x6xi64>, tensor<1x2x6xi64>, tensor<4x4xf32>
}

// -----

func.func @lowering_config_gpu_microkernel() {
  // expected-error @below {{microkernel avx512bf16 is a CPU kernel; mapping = gpu_blocks needs none}}
  "test.a"() {x = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 8, query_tile = 32, chunk = 0, keep_logits = false, threads = 64, tensor_cores = true, microkernel = avx512bf16>} : () -> ()
  return
}

// -----

func.func @microkernel_not_on_linalg() {
  // expected-error @below {{snapkv.microkernel is for linalg ops}}
  "test.a"() {snapkv.microkernel = #snapkv.microkernel<amx>} : () -> ()
  return
}

// -----

func.func @microkernel_unknown() {
  // expected-error @below {{expected ::mlir::snapkv::Microkernel to be one of: none, avx512bf16, amx}}
  // expected-error @below {{failed to parse SnapKV_LoweringConfigAttr parameter 'microkernel'}}
  "test.a"() {x = #snapkv.lowering_config<mapping = forall, key_tile = 8, query_tile = 32, chunk = 0, keep_logits = true, microkernel = avx2>} : () -> ()
  return
}

// -----

func.func @lowering_config_not_on_a_snapkv_op() {
  // expected-error @below {{snapkv.lowering_config is for the snapkv ops that convert-snapkv-to-linalg lowers}}
  "test.a"() {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 8, query_tile = 32, chunk = 0, keep_logits = true>} : () -> ()
  return
}

// -----

func.func @lowering_config_wrong_kind() -> tensor<2xi64> {
  %c = arith.constant dense<0> : tensor<2xi64>
  // expected-error @below {{snapkv.lowering_config must be a #snapkv.lowering_config attribute}}
  "test.a"() {snapkv.lowering_config = 3 : i64} : () -> ()
  return %c : tensor<2xi64>
}

// -----

func.func @lowering_config_blocks_without_threads() {
  // expected-error @below {{mapping = gpu_blocks needs threads in [1, 1024] and tensor_cores}}
  "test.a"() {x = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 8, query_tile = 32, chunk = 0, keep_logits = false>} : () -> ()
  return
}

// -----

func.func @lowering_config_threads_for_loops() {
  // expected-error @below {{threads and tensor_cores are for mapping = gpu_blocks}}
  "test.a"() {x = #snapkv.lowering_config<mapping = forall, key_tile = 8, query_tile = 32, chunk = 0, keep_logits = true, threads = 4>} : () -> ()
  return
}

// -----

// Attention is lowered for the CPU only (the configuration pass refuses it for the GPU); a
// configuration that maps it to GPU blocks names a lowering that does not exist.
func.func @lowering_config_attention_on_blocks(%q: tensor<1x4x?x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>)
    -> tensor<1x4x?x16xf32> {
  // expected-error @+1 {{'snapkv.attention' op has no GPU lowering: its snapkv.lowering_config cannot map it to gpu_blocks}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x?x16xf32>)
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 8, query_tile = 4, chunk = 0, keep_logits = false, threads = 64, tensor_cores = true>}
      : tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x?x16xf32>
  return %o : tensor<1x4x?x16xf32>
}

// -----

// Accumulated scores (scoring sum / norm_sum) are lowered for the CPU only, too.
func.func @lowering_config_accumulated_on_blocks(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x16x4xf32>) -> tensor<1x2x6xi64> {
  // expected-error @+1 {{'snapkv.select' op has no GPU lowering: its snapkv.lowering_config cannot map it to gpu_blocks}}
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 6 scoring sum
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 8, query_tile = 32, chunk = 0, keep_logits = false, threads = 64, tensor_cores = true>}
      : (tensor<1x2x8x4xf32>, tensor<1x2x16x4xf32>, tensor<1x2x16x4xf32>) -> (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6xi64>)
  return %idx : tensor<1x2x6xi64>
}
