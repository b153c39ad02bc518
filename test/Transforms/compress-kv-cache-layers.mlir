// A model exported with one function per layer (`snapkv export --hf`): @prefill and @decode
// only call @embed, @prefill_layer / @decode_layer (once per layer) and @head. The rewrite
// names the layer functions and carries their new signatures to the calls and the entry
// points. Input: Inputs/models/llama_layers.mlir (scripts/gen-hf-export-fixture.py).

// The default names find no attention in @prefill itself and say where it is; nothing changes.
// RUN: snapkv-opt %S/Inputs/models/llama_layers.mlir -o %t.plain
// RUN: snapkv-opt %S/Inputs/models/llama_layers.mlir --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand" \
// RUN:   -o %t.default 2>&1 | FileCheck %s --check-prefix=DEFAULT
// RUN: %strip_refusal %t.default | diff %t.plain -
// RUN: FileCheck %s --check-prefix=DEFAULTATTR < %t.default
// DEFAULT: warning: snapkv-compress-kv-cache left the module unchanged: @prefill: no attention in the function itself, but it calls @prefill_layer, which holds attention: name that function (prefill-func / decode-func); its callers are updated with it

// gqa=expand: the layer functions and every call take Hq = 4 cache heads, and so do the
// entry points' results and decode's cache arguments; the weights stay as they are.
// RUN: snapkv-opt %S/Inputs/models/llama_layers.mlir --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   | FileCheck %s --check-prefix=EXPAND
// EXPAND-LABEL: func.func private @prefill_layer(
// EXPAND-SAME:    -> (tensor<1x?x32xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>)
// EXPAND:         snapkv.select {{.*}} window 4 capacity 8 scale 0.0883883461 : (tensor<1x4x4x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>) -> (tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?xi64>)
// EXPAND-LABEL: func.func private @decode_layer(
// EXPAND-SAME:    %{{.*}}: tensor<1x1x32xf32>, %{{.*}}: tensor<1xi64>, %{{.*}}: tensor<1x4x?x128xf32>, %{{.*}}: tensor<1x4x?x128xf32>, %{{.*}}: tensor<512x32xf32>
// EXPAND-SAME:    -> (tensor<1x1x32xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>)
// EXPAND-LABEL: func.func @prefill(
// EXPAND-SAME:    %{{.*}}: tensor<64x32xf32> {bufferization.writable = false, snapkv.weight = "model.embed_tokens.weight"}
// EXPAND-SAME:    -> (tensor<1x1x64xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>)
// EXPAND:         call @prefill_layer({{.*}}) : ({{.*}}) -> (tensor<1x?x32xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>)
// EXPAND:         call @prefill_layer({{.*}}) : ({{.*}}) -> (tensor<1x?x32xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>)
// EXPAND-LABEL: func.func @decode(
// EXPAND-SAME:    %{{.*}}: tensor<1x1xi64>, %{{.*}}: tensor<1xi64>, %{{.*}}: tensor<1x4x?x128xf32>, %{{.*}}: tensor<1x4x?x128xf32>, %{{.*}}: tensor<1x4x?x128xf32>, %{{.*}}: tensor<1x4x?x128xf32>, %{{.*}}: tensor<64x32xf32>
// EXPAND-SAME:    -> (tensor<1x1x64xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>)
// EXPAND:         call @decode_layer({{.*}}) : (tensor<1x1x32xf32>, tensor<1xi64>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>, {{.*}}) -> (tensor<1x1x32xf32>, tensor<1x4x?x128xf32>, tensor<1x4x?x128xf32>)

// The ledger counts the select of the layer function once per call: 2 layers.
// RUN: snapkv-opt %S/Inputs/models/llama_layers.mlir --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand prefill-func=prefill_layer decode-func=decode_layer" \
// RUN:   --snapkv-report-cache="prompt-length=16 generated=4" -o /dev/null | FileCheck %s --check-prefix=LEDGER
// LEDGER:      0      expand     1    2    4   128  4        8                 40,960                 49,152
// LEDGER-NEXT: 1      expand     1    2    4   128  4        8                 40,960                 49,152
// LEDGER-NEXT: total: 2 layers, full 81,920 B, compacted 98,304 B

// gqa=mean keeps Hkv heads: no signature changes, the calls are left as they are.
// RUN: snapkv-opt %S/Inputs/models/llama_layers.mlir --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=mean prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   | FileCheck %s --check-prefix=MEAN
// MEAN:       snapkv.select {{.*}} gqa mean {{.*}} -> (tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?xi64>)
// MEAN-LABEL: func.func @prefill(
// MEAN-SAME:    -> (tensor<1x1x64xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>)

// Near misses: each leaves the module unchanged with the reason (strict=true: an error).
// A layer function that is also referenced other than by a call.
// RUN: sed 's/^    %logits = call @head/    "test.use"() {ref = @prefill_layer} : () -> ()\n&/' %S/Inputs/models/llama_layers.mlir > %t.ref.in
// RUN: not snapkv-opt --allow-unregistered-dialect %t.ref.in --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=REF
// REF: error: snapkv-compress-kv-cache left the module unchanged: @prefill_layer: its signature changes, but it is used by test.use at {{.*}}, not only by func.call

// A caller that is itself used: its signature would change under its user.
// RUN: sed 's/^    %logits = call @head/    "test.use"() {ref = @prefill} : () -> ()\n&/' %S/Inputs/models/llama_layers.mlir > %t.caller.in
// RUN: snapkv-opt --allow-unregistered-dialect %t.caller.in -o %t.caller.plain
// RUN: snapkv-opt --allow-unregistered-dialect %t.caller.in --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand prefill-func=prefill_layer decode-func=decode_layer" \
// RUN:   -o %t.caller.out 2>&1 | FileCheck %s --check-prefix=CALLER
// RUN: %strip_refusal %t.caller.out | diff %t.caller.plain -
// CALLER: warning: snapkv-compress-kv-cache left the module unchanged: @prefill_layer: its signature changes and so does that of its caller @prefill, which is itself used (test.use at {{.*}})

// A cached K that the caller uses before returning it.
// RUN: sed 's/^    %logits = call @head/    "test.use"(%l0#1) : (tensor<1x2x?x128xf32>) -> ()\n&/' %S/Inputs/models/llama_layers.mlir > %t.result.in
// RUN: not snapkv-opt --allow-unregistered-dialect %t.result.in --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=RESULT
// RESULT: error: snapkv-compress-kv-cache left the module unchanged: @prefill_layer: result 1 of the call in @prefill changes type but is used by test.use at {{.*}}, not only returned

// A decode cache operand that is not an argument of the caller.
// RUN: sed -e 's/^    %l0:3 = call @decode_layer/    %k0 = tensor.cast %c0 : tensor<1x2x?x128xf32> to tensor<1x2x?x128xf32>\n&/' \
// RUN:   -e 's/%c0, %c1, %w1,/%k0, %c1, %w1,/' %S/Inputs/models/llama_layers.mlir > %t.operand.in
// RUN: not snapkv-opt %t.operand.in --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=OPERAND
// OPERAND: error: snapkv-compress-kv-cache left the module unchanged: @decode_layer: operand 2 of the call in @decode changes type but is not an argument of that function

// A decode cache argument with another use.
// RUN: sed 's/^    %l0:3 = call @decode_layer/    "test.use"(%c1) : (tensor<1x2x?x128xf32>) -> ()\n&/' %S/Inputs/models/llama_layers.mlir > %t.argument.in
// RUN: not snapkv-opt --allow-unregistered-dialect %t.argument.in --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=ARGUMENT
// ARGUMENT: error: snapkv-compress-kv-cache left the module unchanged: @decode_layer: argument %arg3 of @decode changes type (it feeds operand 3 of the call) but is also used by test.use at {{.*}}

// A call in a nested region.
// RUN: sed 's/^    %logits = call @head/    %q:3 = scf.execute_region -> (tensor<1x?x32xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>) {\n      %z:3 = func.call @prefill_layer(%h, %w1, %w2, %w3, %w4, %w5, %w6, %w7, %w8, %w9) : (tensor<1x?x32xf32>, tensor<32x512xf32>, tensor<32x256xf32>, tensor<32x256xf32>, tensor<512x32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<1x?x32xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>)\n      scf.yield %z#0, %z#1, %z#2 : tensor<1x?x32xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>\n    }\n&/' %S/Inputs/models/llama_layers.mlir > %t.nested.in
// RUN: not snapkv-opt %t.nested.in --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=NESTED
// NESTED: error: snapkv-compress-kv-cache left the module unchanged: @prefill_layer: its signature changes, but it is called from a nested region or a function without a single block ending in func.return (@prefill)

// A layer function called from the other one, which the pass rewrites too.
// RUN: sed 's/^    return %[0-9]*, %concat_[0-9]*, %concat_[0-9]*/    %xz = tensor.cast %arg0 : tensor<1x1x32xf32> to tensor<1x?x32xf32>\n    %z:3 = call @prefill_layer(%xz, %arg4, %arg5, %arg6, %arg7, %arg8, %arg9, %arg10, %arg11, %arg12) : (tensor<1x?x32xf32>, tensor<32x512xf32>, tensor<32x256xf32>, tensor<32x256xf32>, tensor<512x32xf32>, tensor<32x64xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<1x?x32xf32>, tensor<1x2x?x128xf32>, tensor<1x2x?x128xf32>)\n&/' \
// RUN:   %S/Inputs/models/llama_layers.mlir > %t.rewritten.in
// RUN: not snapkv-opt %t.rewritten.in --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=expand prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=REWRITTEN
// REWRITTEN: error: snapkv-compress-kv-cache left the module unchanged: @prefill_layer: it is called from @decode_layer, which the pass rewrites too

// The refusal is recorded for programs too, as a module attribute.
// DEFAULTATTR: module attributes {snapkv.refusal = {function = "prefill", message = "no attention in the function itself, but it calls @prefill_layer, which holds attention: name that function (prefill-func / decode-func); its callers are updated with it", reason = "attention-in-callee"}}

// budget=pyramid: the layers need different capacities, so each call of the prefill layer
// function gets its own copy, rewritten with its layer's capacity (K = 4, beta 2: 2 + 4 and
// 6 + 4 positions); decode does not depend on the capacity and keeps one layer function.
// RUN: snapkv-opt %S/Inputs/models/llama_layers.mlir --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=mean budget=pyramid pyramid-beta=2 prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   | FileCheck %s --check-prefix=PYRAMID
// PYRAMID-NOT:    func.func private @prefill_layer(
// PYRAMID-LABEL:  func.func private @prefill_layer_layer0(
// PYRAMID:          snapkv.select {{.*}} window 4 capacity 10 gqa mean
// PYRAMID-LABEL:  func.func private @prefill_layer_layer1(
// PYRAMID:          snapkv.select {{.*}} window 4 capacity 6 gqa mean
// PYRAMID-LABEL:  func.func private @decode_layer(
// PYRAMID-NOT:      snapkv.select
// PYRAMID-LABEL:  func.func @prefill(
// PYRAMID:          call @prefill_layer_layer0(
// PYRAMID:          call @prefill_layer_layer1(
// PYRAMID-LABEL:  func.func @decode(
// PYRAMID:          call @decode_layer(
// PYRAMID:          call @decode_layer(
// The ledger finds each layer's copy: its own capacity, the same total as uniform.
// RUN: snapkv-opt %S/Inputs/models/llama_layers.mlir --snapkv-compress-kv-cache="window=4 capacity=8 kernel=5 gqa=mean budget=pyramid pyramid-beta=2 prefill-func=prefill_layer decode-func=decode_layer strict=true" \
// RUN:   | snapkv-opt --snapkv-report-cache="prompt-length=16 generated=4" -o /dev/null | FileCheck %s --check-prefix=PYRAMIDLEDGER
// PYRAMIDLEDGER: 0 mean 1 2 2 128 4 10 40,960 28,672
// PYRAMIDLEDGER: 1 mean 1 2 2 128 4 6 40,960 20,480
// PYRAMIDLEDGER: total: 2 layers, full 81,920 B, compacted 49,152 B (0.6000 of full)
