// Each op's #snapkv.lowering_config reaches its kernels: the GPU pipeline (here through
// the stage ops, decompose-select=true) configures the ops that have none (threads=128, tensor cores) and keeps the one @configured has (64
// threads, no tensor cores). The block loops carry it to snapkv-gpu-distribute, so
// @configured's kernels have 64 threads and no MMA, @default's 128 threads and one
// mma.sync in each of its two kernels that compute logits (the f16 shape of
// Inputs/mha_f16.mlir). The configuration goes from the select to its stage ops
// (snapkv-decompose-select) and on to their block loops. (7 of each select's 9 kernels
// declare their block size.)
// RUN: snapkv-opt %s --snapkv-gpu-pipeline="chip=sm_80 features=+ptx80 format=isa decompose-select=true" > %t.isa.mlir
// RUN: grep -o "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" %t.isa.mlir | count 2
// RUN: grep -o "gpu.binary @configured_kernel[^]]*maxntid 64, 1, 1" %t.isa.mlir | count 7
// RUN: grep -o "gpu.binary @default_kernel[^]]*maxntid 128, 1, 1" %t.isa.mlir | count 7
// RUN: not grep -o "gpu.binary @configured_kernel[^]]*maxntid 128" %t.isa.mlir
// RUN: not grep -o "gpu.binary @default_kernel[^]]*maxntid 64," %t.isa.mlir
// The select lowered whole (the GPU pipeline's default): the same split, 3 of 5 kernels.
// RUN: snapkv-opt %s --snapkv-gpu-pipeline="chip=sm_80 features=+ptx80 format=isa" > %t.whole.mlir
// RUN: grep -o "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" %t.whole.mlir | count 2
// RUN: grep -o "gpu.binary @configured_kernel[^]]*maxntid 64, 1, 1" %t.whole.mlir | count 3
// RUN: grep -o "gpu.binary @default_kernel[^]]*maxntid 128, 1, 1" %t.whole.mlir | count 3
// RUN: not grep -o "gpu.binary @configured_kernel[^]]*maxntid 128" %t.whole.mlir
// A block needs 1 to 1024 threads:
// RUN: not snapkv-opt %s --snapkv-configure-lowering=threads=0 -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: snapkv-configure-lowering: threads must be in [1, 1024], got 0
func.func @configured(%q: tensor<1x2x8x16xf16>, %k: tensor<1x2x?x16xf16>, %v: tensor<1x2x?x16xf16>)
    -> (tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 8 capacity 24
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 64, query_tile = 32, chunk = 0, keep_logits = false, threads = 64, tensor_cores = false>}
      : (tensor<1x2x8x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>)
      -> (tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>)
  return %ko, %vo, %idx : tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>
}

func.func @default(%q: tensor<1x2x8x16xf16>, %k: tensor<1x2x?x16xf16>, %v: tensor<1x2x?x16xf16>)
    -> (tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 8 capacity 24
      : (tensor<1x2x8x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>)
      -> (tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>)
  return %ko, %vo, %idx : tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>
}
