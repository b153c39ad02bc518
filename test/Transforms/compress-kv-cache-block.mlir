// The `block` option: every select the rewrite creates keeps whole blocks
// (`block B`), the extend function's too; a block that does not fit the
// kept prefix, or that the budget or scoring cannot take, is an option error.
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 block=4" \
// RUN:   | FileCheck %s --check-prefix=BLOCK
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 block=1" \
// RUN:   | FileCheck %s --check-prefix=ONE
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=10 block=3 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 strict=true" \
// RUN:   | FileCheck %s --check-prefix=CHUNKED
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=8 block=4" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=DIVIDE
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 block=0" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=ZERO
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 block=2 budget=pyramid" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=PYRAMID
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 block=2 scoring=recent" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=RECENT
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 block=2 decode-interval=4 decode-capacity=5 gqa=mean" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=DECODECAP

// BLOCK-COUNT-2: snapkv.select {{.*}} window 8 capacity 24 {{.*}} block 4 :
// BLOCK-NOT: snapkv.select

// `block=1` is the rewrite without blocks: nothing printed.
// ONE: snapkv.select
// ONE-NOT: block

// CHUNKED-COUNT-2: snapkv.select {{.*}} window 4 capacity 10 {{.*}} block 3 :
// CHUNKED-NOT: snapkv.select

// DIVIDE: error: snapkv-compress-kv-cache: block (4) must divide capacity - window (6 = 8 - 2)
// ZERO: error: snapkv-compress-kv-cache: block must be >= 1 (got 0)
// PYRAMID: error: snapkv-compress-kv-cache: block needs budget=uniform
// RECENT: error: snapkv-compress-kv-cache: block sums pooled votes: it needs a scoring that votes (votes, prefix_votes, sum or norm_sum)
// DECODECAP: error: snapkv-compress-kv-cache: block (2) must divide decode-capacity - window (3 = 5 - 2)
