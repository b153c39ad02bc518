// An op whose own configuration asks for a layout it has no lowering for is reported by
// the conversion (the configuration pass keeps what an op already carries).
// RUN: snapkv-opt %s --snapkv-configure-lowering --convert-snapkv-to-linalg -verify-diagnostics -o /dev/null

func.func @attention_on_blocks(%q: tensor<1x4x?x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>)
    -> tensor<1x4x?x16xf32> {
  // expected-error @+1 {{'snapkv.attention' op has no GPU lowering (its snapkv.lowering_config maps to gpu_blocks); fuse attention only for the CPU}}
  %o = snapkv.attention %q, %k, %v
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = gpu_blocks, key_tile = 8, query_tile = 4, chunk = 0, keep_logits = false, threads = 64, tensor_cores = true>}
      : tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x?x16xf32>
  return %o : tensor<1x4x?x16xf32>
}
