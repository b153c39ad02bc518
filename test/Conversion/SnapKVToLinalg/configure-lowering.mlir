// snapkv-configure-lowering writes each op's lowering for a target as data
// (#snapkv.lowering_config); convert-snapkv-to-linalg lowers every op as its own
// configuration says. The pipelines run the two. The conversion's tiling=cpu|gpu is
// an alias for the strategy (with no CPU features) on the ops without a configuration,
// so the two give exactly the same, with the sizes the strategy chose (the 24-position
// prompts here: key tiles of at most 24 keys, chunks of 16) or the ones given.
// RUN: snapkv-opt %s --snapkv-configure-lowering="key-tile=8" | FileCheck %s
// RUN: snapkv-opt %s --snapkv-configure-lowering="target=gpu chunk=16" | FileCheck %s --check-prefix=GPU
// RUN: snapkv-opt %s --snapkv-configure-lowering --convert-snapkv-to-linalg -o %t.configured
// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=cpu -o %t.option
// RUN: diff %t.configured %t.option
// RUN: snapkv-opt %s --snapkv-configure-lowering="key-tile=8 chunk=4 keep-logits=false cpu-features=" --convert-snapkv-to-linalg -o %t.configured-sized
// RUN: snapkv-opt %s --convert-snapkv-to-linalg="tiling=cpu key-tile=8 chunk=4 keep-logits=false" -o %t.option-sized
// RUN: diff %t.configured-sized %t.option-sized
// RUN: snapkv-opt %s --snapkv-configure-lowering=target=gpu --convert-snapkv-to-linalg -o %t.configured-gpu
// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=gpu -o %t.option-gpu
// RUN: diff %t.configured-gpu %t.option-gpu
// RUN: not snapkv-opt %s --convert-snapkv-to-linalg="tiling=cpu key-tile=-1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: convert-snapkv-to-linalg: key-tile, query-tile and chunk must be non-negative (0: chosen per op)
// One op's own configuration wins over the pass's target: @mixed's second select
// is laid out for GPU blocks with 4-key tiles, its first for forall loops.
// RUN: snapkv-opt %s --snapkv-configure-lowering --convert-snapkv-to-linalg | FileCheck %s --check-prefix=MIXED
// The ops the conversion makes of an op inherit its configuration: @adaptive's stages
// (score, top_positions, gathers) and the parts between them are all GPU blocks.
// RUN: snapkv-opt %s --snapkv-configure-lowering --convert-snapkv-to-linalg | FileCheck %s --check-prefix=ADAPTIVE

// CHECK-LABEL: func.func @select
// CHECK: snapkv.select {{.*}} {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 8, query_tile = 32, chunk = 16, keep_logits = true>}
// CHECK: snapkv.score {{.*}} {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 8, query_tile = 32, chunk = 16, keep_logits = true>}
// GPU-LABEL: func.func @select
// GPU: snapkv.select {{.*}} {snapkv.lowering_config = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 24, query_tile = 32, chunk = 16, keep_logits = false, threads = 128, tensor_cores = true>}
func.func @select(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x24x4xf32>, %v: tensor<1x2x24x4xf32>)
    -> (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6xi64>, tensor<1x2x22xf32>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 6
      : (tensor<1x2x2x4xf32>, tensor<1x2x24x4xf32>, tensor<1x2x24x4xf32>)
      -> (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6xi64>)
  %e = tensor.empty() : tensor<1x2x22xf32>
  %votes, %pooled = snapkv.score %q, %k window 2 outs(%e, %e : tensor<1x2x22xf32>, tensor<1x2x22xf32>)
      : (tensor<1x2x2x4xf32>, tensor<1x2x24x4xf32>) -> (tensor<1x2x22xf32>, tensor<1x2x22xf32>)
  return %a, %b, %c, %pooled : tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6xi64>, tensor<1x2x22xf32>
}

// The first select takes the pass's configuration, the second keeps its own.
// CHECK-LABEL: func.func @mixed
// CHECK: snapkv.select {{.*}} {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 8,
// CHECK: snapkv.select {{.*}} {snapkv.lowering_config = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 4,
// The first select as its stage ops tiled over the (batch, head) rows, then the
// second's key tiles: 24 / 4 = 6 staged tiles of 4 keys, in GPU blocks.
// MIXED-LABEL: func.func @mixed
// MIXED-NOT: mapping = gpu_blocks
// MIXED: scf.forall (%{{.*}}, %{{.*}}) in (1, 2) shared_outs
// MIXED-NOT: mapping = gpu_blocks
// MIXED: tensor<1x2x6x4x4xf32>
// MIXED: mapping = gpu_blocks
// MIXED: return
func.func @mixed(%q: tensor<1x2x2x4xf32>, %k: tensor<1x2x24x4xf32>, %v: tensor<1x2x24x4xf32>)
    -> (tensor<1x2x6xi64>, tensor<1x2x6xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 6
      : (tensor<1x2x2x4xf32>, tensor<1x2x24x4xf32>, tensor<1x2x24x4xf32>)
      -> (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6xi64>)
  %d, %e, %f = snapkv.select %q, %k, %v window 2 capacity 6
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 4, query_tile = 32, chunk = 0, keep_logits = false, threads = 64, tensor_cores = false>}
      : (tensor<1x2x2x4xf32>, tensor<1x2x24x4xf32>, tensor<1x2x24x4xf32>)
      -> (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6xi64>)
  return %c, %f : tensor<1x2x6xi64>, tensor<1x2x6xi64>
}

// ADAPTIVE-LABEL: func.func @adaptive
// ADAPTIVE-NOT: mapping = forall
// ADAPTIVE: mapping = gpu_blocks
// ADAPTIVE-NOT: mapping = forall
// ADAPTIVE: return
func.func @adaptive(%q: tensor<1x2x1x2xf32>, %k: tensor<1x2x6x2xf32>, %v: tensor<1x2x6x2xf32>)
    -> tensor<1x3xi64> {
  %ka, %va, %ia, %oa = snapkv.select_adaptive %q, %k, %v window 1 capacity 3 kernel 1 scale 1.0
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 4, query_tile = 32, chunk = 0, keep_logits = false, threads = 64, tensor_cores = true>}
      : (tensor<1x2x1x2xf32>, tensor<1x2x6x2xf32>, tensor<1x2x6x2xf32>)
      -> (tensor<1x6x2xf32>, tensor<1x6x2xf32>, tensor<1x6xi64>, tensor<1x3xi64>)
  return %oa : tensor<1x3xi64>
}
