// snapkv-configure-lowering chooses each root op's configuration from its own
// shapes, element type and the CPU features (named here, so that the test does
// not depend on the host), and reports the choices as JSON lines.
// RUN: snapkv-opt %s --snapkv-configure-lowering="cpu-features=+avx512f,+avx512bf16" | FileCheck %s --check-prefix=BF16
// RUN: snapkv-opt %s --snapkv-configure-lowering="cpu-features=avx512f,avx512bf16,amx-bf16,amx-tile" | FileCheck %s --check-prefix=AMX
// RUN: snapkv-opt %s --snapkv-configure-lowering="cpu-features=avx512f,avx512bf16,-avx512bf16" | FileCheck %s --check-prefix=PLAIN
// RUN: snapkv-opt %s --snapkv-configure-lowering="cpu-features=avx512bf16 key-tile=128 chunk=32" | FileCheck %s --check-prefix=GIVEN
// RUN: snapkv-opt %s --snapkv-configure-lowering="cpu-features=avx512bf16 report=-" -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: snapkv-opt %s --snapkv-configure-lowering="cpu-features=avx512bf16 report=%t.json" -o /dev/null
// RUN: snapkv-opt %s --snapkv-configure-lowering="cpu-features=+avx2,+avx512f report=-" -o /dev/null | FileCheck %s --check-prefix=AVX512
// RUN: snapkv-opt %s --snapkv-configure-lowering="cpu-features=+avx,+avx2 report=-" -o /dev/null | FileCheck %s --check-prefix=AVX2
// RUN: %python -c "import json, sys; rows = [json.loads(l) for l in open(sys.argv[1])]; assert len(rows) == 8, rows; assert rows[0]['config']['chunk'] == 64 and rows[1]['length'] is None, rows" %t.json

// A long static prompt: 64-key tiles, chunks of about sqrt(4064) = 64; f32, so
// no microkernel whatever the CPU has.
// BF16-LABEL: func.func @long_f32
// BF16: snapkv.score {{.*}}#snapkv.lowering_config<mapping = forall, key_tile = 64, query_tile = 32, chunk = 64, keep_logits = true>}
// GIVEN-LABEL: func.func @long_f32
// GIVEN: snapkv.score {{.*}}#snapkv.lowering_config<mapping = forall, key_tile = 128, query_tile = 32, chunk = 32, keep_logits = true>}
func.func @long_f32(%q: tensor<1x2x32x8xf32>, %k: tensor<1x2x4096x8xf32>, %e: tensor<1x2x4064xf32>)
    -> tensor<1x2x4064xf32> {
  %votes, %pooled = snapkv.score %q, %k window 32 outs(%e, %e : tensor<1x2x4064xf32>, tensor<1x2x4064xf32>)
      : (tensor<1x2x32x8xf32>, tensor<1x2x4096x8xf32>) -> (tensor<1x2x4064xf32>, tensor<1x2x4064xf32>)
  return %pooled : tensor<1x2x4064xf32>
}

// A dynamic prompt: the lowering's chunk (0); bf16 scoring gets the CPU's
// microkernel; the gather has no inner products.
// BF16-LABEL: func.func @dynamic_bf16
// BF16: snapkv.score {{.*}}#snapkv.lowering_config<mapping = forall, key_tile = 64, query_tile = 32, chunk = 0, keep_logits = true, microkernel = avx512bf16>}
// BF16: snapkv.gather {{.*}}#snapkv.lowering_config<mapping = forall, key_tile = 64, query_tile = 32, chunk = 0, keep_logits = true>}
// AMX-LABEL: func.func @dynamic_bf16
// AMX: snapkv.score {{.*}}microkernel = amx>}
// AMX: snapkv.gather {{.*}}keep_logits = true>}
// PLAIN-LABEL: func.func @dynamic_bf16
// PLAIN: snapkv.score {{.*}}chunk = 0, keep_logits = true>}
func.func @dynamic_bf16(%q: tensor<1x2x4x8xbf16>, %k: tensor<1x2x?x8xbf16>, %e: tensor<1x2x?xf32>,
                        %i: tensor<1x2x6xi64>, %out: tensor<1x2x6x8xbf16>)
    -> (tensor<1x2x?xf32>, tensor<1x2x6x8xbf16>) {
  %votes, %pooled = snapkv.score %q, %k window 4 outs(%e, %e : tensor<1x2x?xf32>, tensor<1x2x?xf32>)
      : (tensor<1x2x4x8xbf16>, tensor<1x2x?x8xbf16>) -> (tensor<1x2x?xf32>, tensor<1x2x?xf32>)
  %g = snapkv.gather %k[%i] outs(%out : tensor<1x2x6x8xbf16>)
      : tensor<1x2x?x8xbf16>, tensor<1x2x6xi64> -> tensor<1x2x6x8xbf16>
  return %pooled, %g : tensor<1x2x?xf32>, tensor<1x2x6x8xbf16>
}

// A short prompt: key tiles no longer than its 24 positions, chunks of 16.
// The second top_positions keeps the configuration it was given.
// BF16-LABEL: func.func @short
// BF16: snapkv.top_positions {{.*}}#snapkv.lowering_config<mapping = forall, key_tile = 24, query_tile = 32, chunk = 16, keep_logits = true>}
// BF16: snapkv.top_positions {{.*}}#snapkv.lowering_config<mapping = forall, key_tile = 4, query_tile = 8, chunk = 8, keep_logits = false>}
func.func @short(%s: tensor<1x2x22xf32>, %init: tensor<1x2x6xi64>) -> (tensor<1x2x6xi64>, tensor<1x2x6xi64>) {
  %a = snapkv.top_positions %s window 2 capacity 6 outs(%init : tensor<1x2x6xi64>)
      : tensor<1x2x22xf32> -> tensor<1x2x6xi64>
  %b = snapkv.top_positions %s window 2 capacity 6 outs(%init : tensor<1x2x6xi64>)
      {snapkv.lowering_config = #snapkv.lowering_config<mapping = forall, key_tile = 4, query_tile = 8, chunk = 8, keep_logits = false>}
      : tensor<1x2x22xf32> -> tensor<1x2x6xi64>
  return %a, %b : tensor<1x2x6xi64>, tensor<1x2x6xi64>
}

// Attention: 32-row query tiles of 64-key tiles, the microkernel of bf16.
// A model's bf16 contractions get the microkernel on their own; f32 ones
// nothing.
// BF16-LABEL: func.func @attention_and_matmuls
// BF16: snapkv.attention {{.*}}#snapkv.lowering_config<mapping = forall, key_tile = 64, query_tile = 32, chunk = 0, keep_logits = true, microkernel = avx512bf16>}
// BF16: linalg.matmul {snapkv.microkernel = #snapkv.microkernel<avx512bf16>}
// BF16: linalg.batch_matmul {snapkv.microkernel = #snapkv.microkernel<avx512bf16>}
// BF16: linalg.matmul ins
// BF16-NOT: snapkv.microkernel
// BF16: return
// AMX-LABEL: func.func @attention_and_matmuls
// AMX: snapkv.attention {{.*}}microkernel = amx>}
// AMX: linalg.matmul {snapkv.microkernel = #snapkv.microkernel<amx>}
// PLAIN-LABEL: func.func @attention_and_matmuls
// PLAIN: snapkv.attention {{.*}}keep_logits = true>}
// PLAIN: linalg.matmul {snapkv.microkernel = #snapkv.microkernel<none>}
func.func @attention_and_matmuls(%q: tensor<1x4x16x8xbf16>, %k: tensor<1x2x16x8xbf16>, %v: tensor<1x2x16x8xbf16>,
                                 %a: tensor<4x8xbf16>, %b: tensor<8x4xbf16>, %c: tensor<4x4xf32>,
                                 %ba: tensor<2x4x8xbf16>, %bb: tensor<2x8x4xbf16>, %bc: tensor<2x4x4xf32>,
                                 %fa: tensor<4x8xf32>, %fb: tensor<8x4xf32>)
    -> (tensor<1x4x16x8xbf16>, tensor<4x4xf32>, tensor<2x4x4xf32>, tensor<4x4xf32>) {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x16x8xbf16>)
      : tensor<1x4x16x8xbf16>, tensor<1x2x16x8xbf16>, tensor<1x2x16x8xbf16> -> tensor<1x4x16x8xbf16>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xbf16>, tensor<8x4xbf16>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  %bm = linalg.batch_matmul ins(%ba, %bb : tensor<2x4x8xbf16>, tensor<2x8x4xbf16>) outs(%bc : tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %f = linalg.matmul ins(%fa, %fb : tensor<4x8xf32>, tensor<8x4xf32>) outs(%c : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %o, %m, %bm, %f : tensor<1x4x16x8xbf16>, tensor<4x4xf32>, tensor<2x4x4xf32>, tensor<4x4xf32>
}

// One JSON object per root op, in program order.
// REPORT: {"config":{"chunk":64,"keep_logits":true,"key_tile":64,"mapping":"forall","microkernel":"none","query_tile":32},"element_type":"f32","function":"long_f32","given":false,"length":4096,"op":"snapkv.score","vector_bits":128}
// REPORT-NEXT: {"config":{"chunk":0,"keep_logits":true,"key_tile":64,"mapping":"forall","microkernel":"avx512bf16","query_tile":32},"element_type":"bf16","function":"dynamic_bf16","given":false,"length":null,"op":"snapkv.score","vector_bits":128}
// REPORT-NEXT: {"config":{{.*}}"microkernel":"none"{{.*}}"op":"snapkv.gather","vector_bits":128}
// REPORT-NEXT: {"config":{{.*}}"key_tile":24{{.*}}"given":false,"length":24,"op":"snapkv.top_positions","vector_bits":128}
// REPORT-NEXT: {"config":{{.*}}"key_tile":4{{.*}}"given":true,"length":24,"op":"snapkv.top_positions","vector_bits":128}
// REPORT-NEXT: {"config":{{.*}}"microkernel":"avx512bf16"{{.*}}"op":"snapkv.attention","vector_bits":128}
// REPORT-NEXT: {"element_type":"bf16","function":"attention_and_matmuls","microkernel":"avx512bf16","op":"linalg.matmul"}
// REPORT-NEXT: {"element_type":"bf16","function":"attention_and_matmuls","microkernel":"avx512bf16","op":"linalg.batch_matmul"}
// REPORT-NOT: linalg.matmul

// The vector register width of the CPU, on each root op's line (IREE's dispatch
// configurations read it: snapkv.iree_backend).
// AVX512: {"config":{{.*}}"op":"snapkv.score","vector_bits":512}
// AVX2: {"config":{{.*}}"op":"snapkv.score","vector_bits":256}
