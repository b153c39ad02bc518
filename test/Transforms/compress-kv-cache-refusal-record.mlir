// A refusal is recorded for programs: the module attribute snapkv.refusal (a stable
// reason code, the function, the message, the layer where one is at fault), and with
// strict=true snapkv-opt exits with status 3 (1 is any other failure).
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=16 capacity=20" 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=LAYER
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 prefill-func=nope" 2>/dev/null \
// RUN:   | FileCheck %s --check-prefix=NOFUNC
// RUN: sh -c 'snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=16 capacity=20 strict=true" -o /dev/null \
// RUN:   2>/dev/null; echo "exit $?"' | FileCheck %s --check-prefix=STRICT
// A bad option is not a refusal: exit status 1, no attribute.
// RUN: sh -c 'snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 kernel=4 strict=true" -o /dev/null \
// RUN:   2>/dev/null; echo "exit $?"' | FileCheck %s --check-prefix=OPTION
// Another pass failing on a module that carries a record is no refusal: exit status 1.
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 prefill-func=nope" -o %t.refused 2>/dev/null
// RUN: sh -c 'snapkv-opt %t.refused --snapkv-report-cache -o /dev/null 2>/dev/null; \
// RUN:   echo "exit $?"' | FileCheck %s --check-prefix=OTHER
// A rewrite that succeeds drops the record of an earlier refusal.
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 prefill-func=nope" 2>/dev/null \
// RUN:   | snapkv-opt --snapkv-compress-kv-cache="window=2 capacity=6" \
// RUN:   | FileCheck %s --check-prefix=CLEARED

// LAYER: module attributes {snapkv.refusal = {function = "prefill", layer = 0 : i64, message = "layer 0: the prompt has 8 positions, fewer than window=16", reason = "prompt-shorter-than-window"}}
// NOFUNC: module attributes {snapkv.refusal = {function = "nope", message = "no function with a body by this name (prefill-func)", reason = "no-prefill-function"}}
// STRICT: exit 3
// OPTION: exit 1
// OTHER: exit 1
// CLEARED: module {
// CLEARED: snapkv.select
