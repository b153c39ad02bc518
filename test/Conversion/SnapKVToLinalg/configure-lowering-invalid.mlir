// snapkv-configure-lowering refuses, up front, the ops that have no lowering for the
// target, and sizes that are no sizes.
// RUN: snapkv-opt %s --split-input-file --snapkv-configure-lowering=target=gpu -verify-diagnostics -o /dev/null
// RUN: not snapkv-opt %s --snapkv-configure-lowering=key-tile=-1 -o /dev/null 2>&1 | FileCheck %s --check-prefix=SIZES
// SIZES: snapkv-configure-lowering: key-tile, query-tile and chunk must be non-negative (0: chosen per op)
// RUN: not snapkv-opt %s --snapkv-configure-lowering="cpu-features=avx512f report=%t.missing/report.json" -o /dev/null 2>&1 | FileCheck %s --check-prefix=REPORT
// REPORT: snapkv-configure-lowering: cannot write the report to '{{.*}}report.json':

func.func @attention(%q: tensor<1x4x?x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>)
    -> tensor<1x4x?x16xf32> {
  // expected-error @+1 {{'snapkv.attention' op has no GPU lowering (target=gpu); it is lowered for the CPU only}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x?x16xf32>) : tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x?x16xf32>
  return %o : tensor<1x4x?x16xf32>
}

// -----

// An op configured for the CPU by hand keeps its configuration: no error.
func.func @attention_configured(%q: tensor<1x4x?x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>)
    -> tensor<1x4x?x16xf32> {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x?x16xf32>)
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 8, query_tile = 4, chunk = 0, keep_logits = false>}
      : tensor<1x4x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32> -> tensor<1x4x?x16xf32>
  return %o : tensor<1x4x?x16xf32>
}

// -----

// Accumulated scores are lowered for the CPU only.
func.func @accumulated(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x16x4xf32>) -> tensor<1x2x16x4xf32> {
  // expected-error @+1 {{'snapkv.select' op has no GPU lowering (target=gpu); it is lowered for the CPU only}}
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 6 scoring sum : (tensor<1x2x8x4xf32>, tensor<1x2x16x4xf32>, tensor<1x2x16x4xf32>) -> (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6xi64>)
  return %k : tensor<1x2x16x4xf32>
}
