// Chunked prefill (chunk=N, docs/semantics.md "Chunked prefill"): besides prefill and decode,
// the rewrite turns @extend_layer (a prompt chunk over the caches so far) into the prefill form:
// its returned K/V, concat(cache, chunk), become a snapkv.select over that concatenation with
// the chunk's last `window` queries. Input: Inputs/models/llama_layers_extend.mlir
// (scripts/gen-hf-export-fixture.py: `snapkv export --hf` with extend).

// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 strict=true" \
// RUN:   | FileCheck %s
// CHECK:       module attributes {snapkv.chunked_prefill = {chunk = 16 : i64, function = "extend_layer", window = 4 : i64}}
// CHECK-LABEL: func.func private @prefill_layer(
// CHECK:         snapkv.select {{.*}} window 4 capacity 8 kernel 15 gqa mean scale
// CHECK-LABEL: func.func private @decode_layer(
// CHECK-NOT:     snapkv.select
// CHECK-LABEL: func.func private @extend_layer(
// CHECK-SAME:    %{{.*}}: tensor<1x?x32xf32>, %{{.*}}: tensor<1xi64>, %[[KC:[^:]*]]: tensor<1x2x?x128xf32>, %[[VC:[^:]*]]: tensor<1x2x?x128xf32>
// CHECK-DAG:     %[[K:.*]] = tensor.concat dim(2) %[[KC]], %{{.*}} : (tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>) -> tensor<1x2x?x128xf32>
// CHECK-DAG:     %[[V:.*]] = tensor.concat dim(2) %[[VC]], %{{.*}} : (tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>) -> tensor<1x2x?x128xf32>
// CHECK:         cf.assert %{{.*}}, "snapkv: a prefill chunk is shorter than the observation window"
// CHECK:         %[[SK:[^,]*]], %[[SV:[^,]*]], %{{.*}} = snapkv.select %{{.*}}, %[[K]], %[[V]] window 4 capacity 8 kernel 15 gqa mean scale {{.*}} : (tensor<1x4x4x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>)
// CHECK:         return %{{.*}}, %[[SK]], %[[SV]] :
// CHECK-LABEL: func.func @extend(
// CHECK:         call @extend_layer(
// CHECK:         call @extend_layer(

// The ledger counts the layers once (the extend function's selects compact the same caches)
// and its prefill peak is a layer's cache plus one chunk before the select: C + N = 24 rows,
// or 8 + 18 when the last 2 of 98 tokens, fewer than the window, join the chunk before.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 strict=true" \
// RUN:   --snapkv-report-cache="prompt-length=100 generated=0 format=json" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=LEDGER
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 strict=true" \
// RUN:   --snapkv-report-cache="prompt-length=98 generated=0 format=json" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=MERGED
// LEDGER:      "chunk": 16,
// LEDGER:      "prefill_peak_rows": 24,
// LEDGER-NEXT: "prefill_peak": 49152
// LEDGER:      "layers": 2,
// LEDGER:      "prefill_peak": 98304
// MERGED:      "prefill_peak_rows": 26,

// With decode-time compression (every 16 tokens, C = 8) 40 generated tokens end at 8 + 8 rows
// (compacted after tokens 16 and 32), and at most 8 + 16 are held, just before a compaction.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer decode-interval=16 strict=true" \
// RUN:   --snapkv-report-cache="prompt-length=100 generated=40 format=json" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=DECODELEDGER
// DECODELEDGER:      "kept": 8,
// DECODELEDGER-NEXT: "full": 286720,
// DECODELEDGER-NEXT: "compacted": 32768,
// DECODELEDGER-NEXT: "prefill_peak_rows": 100,
// DECODELEDGER-NEXT: "prefill_peak": 204800,
// DECODELEDGER-NEXT: "decode_peak_rows": 24,
// DECODELEDGER-NEXT: "decode_peak": 49152

// Decode-time compression (decode-interval=K) rewrites the extend function the same way; the
// runner re-feeds the last W generated tokens through it every K tokens. Prefill stays one-shot.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer decode-interval=16 strict=true" \
// RUN:   | FileCheck %s --check-prefix=DECODE
// DECODE:       module attributes {snapkv.decode_compression = {capacity = 8 : i64, entry = "extend", function = "extend_layer", interval = 16 : i64, window = 4 : i64}}
// DECODE-LABEL: func.func private @extend_layer(
// DECODE:         snapkv.select {{.*}} window 4 capacity 8 kernel 15 gqa mean scale

// decode-capacity=M: decoding compacts to M rows. Alone, the extend function's select keeps M.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer decode-interval=16 decode-capacity=12 strict=true" \
// RUN:   | FileCheck %s --check-prefix=DECODECAP
// DECODECAP:       module attributes {snapkv.decode_compression = {capacity = 12 : i64, entry = "extend", function = "extend_layer", interval = 16 : i64, window = 4 : i64}}
// DECODECAP-LABEL: func.func private @prefill_layer(
// DECODECAP:         snapkv.select {{.*}} window 4 capacity 8 kernel
// DECODECAP-LABEL: func.func private @extend_layer(
// DECODECAP:         snapkv.select {{.*}} window 4 capacity 12 kernel
// DECODECAP-NOT:   _decode

// With chunk too, chunks still compact to C: the extend call chain gets a copy whose select
// keeps M (`<name>_decode`), and the attribute names the copy and its entry point.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 decode-interval=16 decode-capacity=12 strict=true" \
// RUN:   | FileCheck %s --check-prefix=BOTH
// BOTH:       module attributes {snapkv.chunked_prefill = {chunk = 16 : i64, function = "extend_layer", window = 4 : i64}, snapkv.decode_compression = {capacity = 12 : i64, entry = "extend_decode", function = "extend_layer_decode", interval = 16 : i64, window = 4 : i64}}
// BOTH-LABEL: func.func private @extend_layer(
// BOTH:         snapkv.select {{.*}} window 4 capacity 8 kernel
// BOTH-LABEL: func.func private @extend_layer_decode(
// BOTH:         snapkv.select {{.*}} window 4 capacity 12 kernel
// BOTH-LABEL: func.func @extend(
// BOTH-COUNT-2:  call @extend_layer(
// BOTH-LABEL: func.func @extend_decode(
// BOTH-COUNT-2:  call @extend_layer_decode(

// Its ledger: 8 rows after prefill; compacted to 12 after tokens 16 and 32 (8 + 16 and
// 12 + 16 rows held just before), 12 + 8 at the end.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 decode-interval=16 decode-capacity=12 strict=true" \
// RUN:   --snapkv-report-cache="prompt-length=100 generated=40 format=json" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=CAPLEDGER
// CAPLEDGER:      "kept": 8,
// CAPLEDGER-NEXT: "full": 286720,
// CAPLEDGER-NEXT: "compacted": 40960,
// CAPLEDGER:      "decode_peak_rows": 28,

// A refusal after the copy leaves the module as it was: no copy remains.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir -o %t.unchanged
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=nope decode-func=decode_layer extend-func=extend_layer chunk=16 decode-interval=16 decode-capacity=12" \
// RUN:   -o %t.copyrefused 2>&1 | FileCheck %s --check-prefix=COPYREFUSED
// RUN: %strip_refusal %t.copyrefused | diff %t.unchanged -
// Without one public function above the copy, the runner could not call it: refused, unchanged.
// RUN: sed 's/func.func @extend(/func.func private @extend(/' %S/Inputs/models/llama_layers_extend.mlir > %t.private
// RUN: snapkv-opt %t.private -o %t.private.plain
// RUN: snapkv-opt %t.private \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 decode-interval=16 decode-capacity=12" \
// RUN:   -o %t.noentry 2>&1 | FileCheck %s --check-prefix=NOENTRY
// RUN: %strip_refusal %t.noentry | diff %t.private.plain -
// NOENTRY: warning: snapkv-compress-kv-cache left the module unchanged: @extend_layer: decode-capacity differs from capacity with chunk, so decode-time compression needs its own copy of the extend call chain, called through one public function, but @extend_layer is reached from no public function or from several
// COPYREFUSED: warning: snapkv-compress-kv-cache left the module unchanged: @nope: no function with a body by this name (prefill-func)

// Without chunk the extend function is left as it is (a full-cache chunk) and no attribute is
// set.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   | FileCheck %s --check-prefix=ONESHOT
// ONESHOT-NOT:   snapkv.chunked_prefill
// ONESHOT-LABEL: func.func private @extend_layer(
// ONESHOT-NOT:   snapkv.select
// ONESHOT-LABEL: func.func private @head(

// The chunk's attention fuses too: snapkv.attention with the cache's length as the offset of
// the chunk's first query.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=FUSED
// FUSED-LABEL: func.func private @extend_layer(
// FUSED-SAME:    %{{.*}}: tensor<1x?x32xf32>, %{{.*}}: tensor<1xi64>, %[[KC:[^:]*]]: tensor<1x2x?x128xf32>
// FUSED:         tensor.dim %[[KC]], %c2
// FUSED:         %[[T:.*]] = tensor.dim %[[KC]], %c2
// FUSED:         snapkv.attention %{{.*}}, %{{.*}}, %{{.*}} offset %[[T]] scale
// FUSED-NOT:     linalg.batch_matmul
// FUSED-LABEL: func.func private @head(

// A mask whose chunk queries sit at `position + row` (HuggingFace's cache_position built from
// the position argument: a one-element tensor broadcast onto an arange) fuses with that
// argument as the offset, exact for the model as it is. The rewrite refuses it: over a
// compacted cache the logical position is not the cache's length, and the mask would show
// the chunk's later keys.
// RUN: sed '/func.func private @extend_layer/,/func.func private @head/ s/tensor.expand_shape %%6 \[\[0, 1, 2, 3\]\] output_shape \[1, 1, %%dim, 1\]/tensor.expand_shape %%4 [[0, 1, 2, 3]] output_shape [1, 1, %%dim, 1]/' \
// RUN:   %S/Inputs/models/llama_layers_extend.mlir > %t.argshift
// RUN: not diff %S/Inputs/models/llama_layers_extend.mlir %t.argshift > /dev/null
// RUN: snapkv-opt %t.argshift --pass-pipeline="builtin.module(func.func(snapkv-fuse-attention))" \
// RUN:   | FileCheck %s --check-prefix=ARGSHIFT
// ARGSHIFT-LABEL: func.func private @extend_layer(
// ARGSHIFT-SAME:    %{{.*}}: tensor<1x?x32xf32>, %[[POS:[^:]*]]: tensor<1xi64>
// ARGSHIFT:         %[[P:.*]] = tensor.extract %[[POS]][%{{.*}}] : tensor<1xi64>
// ARGSHIFT-NEXT:    %[[OFF:.*]] = arith.index_cast %[[P]] : i64 to index
// ARGSHIFT:         snapkv.attention %{{.*}}, %{{.*}}, %{{.*}} offset %[[OFF]] scale
// ARGSHIFT-NOT:     linalg.batch_matmul
// ARGSHIFT-LABEL: func.func private @head(
// RUN: snapkv-opt %t.argshift \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16" \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=ARGREFUSED
// ARGREFUSED: warning: snapkv-compress-kv-cache left the module unchanged: @extend_layer: layer 0: the mask's query positions are not `cache length + row`

// A decode step is not a chunk: its one query is not at `cache length + row`. Nothing changes.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir -o %t.plain
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=decode_layer chunk=16" \
// RUN:   -o %t.notchunk 2>&1 | FileCheck %s --check-prefix=NOTCHUNK
// RUN: %strip_refusal %t.notchunk | diff %t.plain -
// NOTCHUNK: warning: snapkv-compress-kv-cache left the module unchanged: @decode_layer: layer 0: the mask's query positions are not `cache length + row` (the chunk's queries must follow every cached key)
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer chunk=16" \
// RUN:   -o %t.noextend 2>&1 | FileCheck %s --check-prefix=NOEXTEND
// RUN: %strip_refusal %t.noextend | diff %t.plain -
// NOEXTEND: warning: snapkv-compress-kv-cache left the module unchanged: @extend: no attention in the function itself, but it calls @extend_layer
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=step chunk=16" \
// RUN:   -o %t.missing 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: warning: snapkv-compress-kv-cache left the module unchanged: @step: no function with a body by this name (extend-func, which chunk=N needs

// Bad combinations are option errors.
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 chunk=3" 2>&1 | FileCheck %s --check-prefix=SHORT
// SHORT: error: snapkv-compress-kv-cache: chunk must be at least the window: a chunk's last `window` queries vote (got chunk=3, window=4)
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 chunk=-1" 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// NEGATIVE: error: snapkv-compress-kv-cache: chunk must be >= 0 (got -1)
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 chunk=16 gqa=expand" 2>&1 | FileCheck %s --check-prefix=EXPAND
// EXPAND: error: snapkv-compress-kv-cache: chunk needs gqa=mean or gqa=max
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 chunk=16 budget=pyramid" 2>&1 | FileCheck %s --check-prefix=BUDGET
// BUDGET: error: snapkv-compress-kv-cache: chunk needs budget=uniform
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 chunk=16 extend-func=" 2>&1 | FileCheck %s --check-prefix=NONAME
// NONAME: error: snapkv-compress-kv-cache: chunk needs extend-func to name a function
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 decode-interval=-2" 2>&1 | FileCheck %s --check-prefix=INTERVAL
// INTERVAL: error: snapkv-compress-kv-cache: decode-interval must be >= 0 (got -2)
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 decode-interval=8 gqa=expand" 2>&1 | FileCheck %s --check-prefix=DEXPAND
// DEXPAND: error: snapkv-compress-kv-cache: decode-interval needs gqa=mean or gqa=max
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 decode-interval=8 decode-capacity=4" 2>&1 | FileCheck %s --check-prefix=SMALLCAP
// SMALLCAP: error: snapkv-compress-kv-cache: decode-capacity must be greater than window: the generated window is always kept (got decode-capacity=4, window=4)
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 decode-capacity=12" 2>&1 | FileCheck %s --check-prefix=CAPALONE
// CAPALONE: error: snapkv-compress-kv-cache: decode-capacity is the size decode-time compression compacts to: it needs decode-interval
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 decode-interval=8 decode-capacity=-3" 2>&1 | FileCheck %s --check-prefix=CAPNEG
// CAPNEG: error: snapkv-compress-kv-cache: decode-capacity must be >= 0 (got -3)

// The attributes are checked by the dialect.
// RUN: not snapkv-opt %s --split-input-file 2>&1 | FileCheck %s --check-prefix=ATTR
// ATTR: error: snapkv.chunked_prefill must be a dictionary with integers chunk >= window >= 1 and a function name, on a module
// ATTR: error: snapkv.decode_compression must be a dictionary with integers interval >= 1, capacity > window >= 1, a function name and optionally an entry name, on a module
// ATTR: error: snapkv.decode_compression must be a dictionary with integers interval >= 1, capacity > window >= 1, a function name and optionally an entry name, on a module
module attributes {snapkv.chunked_prefill = {chunk = 2 : i64, function = "extend_layer", window = 4 : i64}} {
}

// -----

module attributes {snapkv.decode_compression = {capacity = 4 : i64, function = "extend_layer", interval = 8 : i64, window = 4 : i64}} {
}

// -----

module attributes {snapkv.decode_compression = {capacity = 8 : i64, entry = 3 : i64, function = "extend_layer", interval = 8 : i64, window = 4 : i64}} {
}
