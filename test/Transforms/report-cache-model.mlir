// The ledger on the rewritten tiny Llama: one row per layer, the full cache
// counted with Hkv heads, the compacted one with Hc heads and min(L, C) + g rows.
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 kernel=5 gqa=mean" \
// RUN:   --snapkv-report-cache="prompt-length=64 generated=16" -o /dev/null | FileCheck %s
// RUN: snapkv-opt %S/../Models/tiny_llama_dynamic.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 kernel=5 gqa=expand" \
// RUN:   --snapkv-report-cache="prompt-length=48 generated=16" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=EXPAND

// 2 * Hkv(2) * (64 + 16) * 16 * 4 bytes full; 2 * 2 * (24 + 16) * 16 * 4 compacted.
// CHECK: snapkv cache ledger: L=64 g=16
// CHECK: 0      mean       1    2    2    16  4       24                 20,480                 10,240
// CHECK: 1      mean       1    2    2    16  4       24                 20,480                 10,240
// CHECK: total: 2 layers, full 40,960 B, compacted 20,480 B (0.5000 of full)

// expand keeps Hq = 4 heads: bigger than the full cache on a model this small.
// EXPAND: 0      expand     1    2    4    16  4       24                 16,384                 20,480
// EXPAND: total: 2 layers, full 32,768 B, compacted 40,960 B (1.2500 of full)
