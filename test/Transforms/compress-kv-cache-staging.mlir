// Two-level chunked prefill (staging=M, docs/semantics.md): the extend call chain is copied as
// `<name>_stage`, whose selects keep M rows ranked by the accumulated attention of all the
// chunk's queries (the whole chunk's queries, no window slice); the chunks' own extend keeps C
// by the window's votes, and the attribute names the copy and its entry point for the runner.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging=20 strict=true" \
// RUN:   | FileCheck %s
// CHECK:       module attributes {snapkv.chunked_prefill = {chunk = 16 : i64, function = "extend_layer", staging = 20 : i64, staging_entry = "extend_stage", staging_function = "extend_layer_stage", window = 4 : i64}}
// CHECK-LABEL: func.func private @extend_layer(
// CHECK:         snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 4 capacity 8 kernel 15 gqa mean scale {{.*}} : (tensor<1x4x4x128xf32>,
// CHECK-LABEL: func.func private @extend_layer_stage(
// CHECK:         snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 4 capacity 20 kernel 15 gqa mean scale {{.*}} scoring sum : (tensor<1x4x?x128xf32>,
// CHECK-LABEL: func.func @extend(
// CHECK-COUNT-2: call @extend_layer(
// CHECK-LABEL: func.func @extend_stage(
// CHECK-COUNT-2: call @extend_layer_stage(

// staging-scoring picks what ranks the staged rows.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging=20 staging-scoring=norm_sum strict=true" \
// RUN:   | FileCheck %s --check-prefix=NORM
// NORM-LABEL: func.func private @extend_layer_stage(
// NORM:         snapkv.select {{.*}} capacity 20 {{.*}} scoring norm_sum :

// keydiff (question-agnostic, docs/semantics.md): the staged selects rank by the keys and take
// the window's queries; the last chunk's select still votes with the prompt's window.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging=20 staging-scoring=keydiff strict=true" \
// RUN:   | FileCheck %s --check-prefix=KEYDIFF
// KEYDIFF-LABEL: func.func private @extend_layer(
// KEYDIFF:         snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 4 capacity 8 kernel 15 gqa mean scale {{[^ ]*}} : (tensor<1x4x4x128xf32>,
// KEYDIFF-LABEL: func.func private @extend_layer_stage(
// KEYDIFF:         snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 4 capacity 20 kernel 15 gqa mean scale {{[^ ]*}} scoring keydiff : (tensor<1x4x4x128xf32>,
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging=20 staging-scoring=keydiff staging-carry=true" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=CARRYKEYDIFF
// CARRYKEYDIFF: error: snapkv-compress-kv-cache: staging-carry adds up accumulated attention: it needs staging-scoring sum or norm_sum
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer scoring=keydiff block=2" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BLOCKKEYDIFF
// BLOCKKEYDIFF: error: snapkv-compress-kv-cache: block sums pooled votes: it needs a scoring that votes (votes, prefix_votes, sum or norm_sum)

// The ledger's prefill peak is the staged rows plus a chunk (20 + 16), not C + 16; the staged
// selects are not more layers.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging=20 strict=true" \
// RUN:   --snapkv-report-cache="prompt-length=100 generated=0 format=json" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=LEDGER
// LEDGER:      "prefill_peak_rows": 36,
// LEDGER:      "layers": 2,

// With decode-time compression to another capacity both copies exist, each with its own entry.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging=20 decode-interval=16 decode-capacity=12 strict=true" \
// RUN:   | FileCheck %s --check-prefix=BOTH
// BOTH: snapkv.decode_compression = {capacity = 12 : i64, entry = "extend_decode", function = "extend_layer_decode", interval = 16 : i64, window = 4 : i64}
// BOTH-DAG: func.func @extend_stage(
// BOTH-DAG: func.func @extend_decode(

// Bad options name the numbers.
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging=6" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=SMALL
// SMALL: error: snapkv-compress-kv-cache: staging (6) must be at least capacity (8): the staged rows are what the final selection chooses from
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer staging=20" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NOCHUNK
// NOCHUNK: error: snapkv-compress-kv-cache: staging is the capacity chunks are compacted to before the last one: it needs chunk

// Without one public function above the copy, the runner could not call it: refused, unchanged.
// RUN: sed 's/func.func @extend(/func.func private @extend(/' %S/Inputs/models/llama_layers_extend.mlir > %t.private
// RUN: snapkv-opt %t.private -o %t.private.plain
// RUN: snapkv-opt %t.private \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging=20" \
// RUN:   -o %t.noentry 2>&1 | FileCheck %s --check-prefix=NOENTRY
// RUN: %strip_refusal %t.noentry | diff %t.private.plain -
// NOENTRY: warning: snapkv-compress-kv-cache left the module unchanged: @extend_layer: staging compacts the chunks before the last through its own copy of the extend call chain, called through one public function, but @extend_layer is reached from no public function or from several

// staging-carry: the staged layer takes its cache rows' carried scores after its value cache and
// returns the kept rows' after its values; they rank, added to the chunk's accumulated votes
// (snapkv.score with window 1 and kernel 1), by snapkv.top_positions, and are gathered with the
// K/V rows. The entry point takes and returns each layer's scores after its values.
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging=20 staging-carry=true strict=true" \
// RUN:   | FileCheck %s --check-prefix=CARRY
// CARRY:       module attributes {snapkv.chunked_prefill = {chunk = 16 : i64, function = "extend_layer", staging = 20 : i64, staging_carry, staging_entry = "extend_stage", staging_function = "extend_layer_stage", window = 4 : i64}}
// CARRY-LABEL: func.func private @extend_layer_stage(
// CARRY-SAME:    %[[VC:[a-z0-9]+]]: tensor<1x2x?x128xf32>, %[[C:[a-z0-9]+]]: tensor<1x2x?xf32>, %{{.*}}: tensor<32x512xf32>
// CARRY-SAME:    -> (tensor<1x?x32xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?xf32>)
// CARRY:         cf.assert %{{.*}}, "snapkv: layer 0's carried scores do not hold one score per cache row"
// CARRY:         %[[VOTES:.*]], %{{.*}} = snapkv.score %{{.*}}, %{{.*}} window 1 kernel 1 gqa mean scale {{.*}} scoring sum
// CARRY:         %[[TOTAL:.*]] = linalg.add
// CARRY:         scf.if
// CARRY:           tensor.generate
// CARRY-COUNT-3:   snapkv.gather
// CARRY:         } else {
// CARRY:           snapkv.top_positions %{{.*}} window 4 capacity 20 outs(
// CARRY-COUNT-3:   snapkv.gather
// CARRY-NOT:     snapkv.select
// CARRY-LABEL: func.func @extend(
// CARRY-LABEL: func.func @extend_stage(
// CARRY-SAME:    %{{.*}}: tensor<1x2x?x128xf32>, %{{.*}}: tensor<1x2x?xf32>, %{{.*}}: tensor<1x2x?x128xf32>, %{{.*}}: tensor<1x2x?x128xf32>, %{{.*}}: tensor<1x2x?xf32>, %{{.*}}: tensor<64x32xf32>
// CARRY:         call @extend_layer_stage(
// CARRY:         call @extend_layer_stage(
// CARRY:         return {{.*}} : tensor<1x1x64xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?xf32>

// The ledger's prefill peak counts the carried scores (20 rows x 2 heads x 4 bytes per layer).
// RUN: snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging=20 staging-carry=true strict=true" \
// RUN:   --snapkv-report-cache="prompt-length=100 generated=0 format=json" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=CARRYLEDGER
// CARRYLEDGER:      "prefill_peak_rows": 36,
// CARRYLEDGER-NEXT: "prefill_peak": 73888,

// staging-carry needs staging and an accumulated staging scoring.
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging-carry=true" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=CARRYNOSTAGING
// CARRYNOSTAGING: error: snapkv-compress-kv-cache: staging-carry carries the staged rows' scores: it needs staging
// RUN: not snapkv-opt %S/Inputs/models/llama_layers_extend.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=8 prefill-func=prefill_layer decode-func=decode_layer extend-func=extend_layer chunk=16 staging=20 staging-scoring=votes staging-carry=true" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=CARRYVOTES
// CARRYVOTES: error: snapkv-compress-kv-cache: staging-carry adds up accumulated attention: it needs staging-scoring sum or norm_sum
