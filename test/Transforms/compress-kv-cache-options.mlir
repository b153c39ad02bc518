// Options and refusals that are about the whole module, not its IR.
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=16 capacity=20" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=LONGWINDOW
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=16 capacity=20 strict=true" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=STRICT
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 decode-func=step" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NODECODE
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=4" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=CAPACITY
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 pooling=median" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=POOLING
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 kernel=4" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=KERNEL
// RUN: not snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=30 capacity=24" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NODUMP
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="kernel-size=3" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=OLDNAME
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 scoring=best" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=SCORING
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 scoring=recent sinks=5" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=SINKS
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 scoring=recent sinks=1" \
// RUN:   | FileCheck %s --check-prefix=RECENT
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 scoring=random seed=9" \
// RUN:   | FileCheck %s --check-prefix=RANDOM
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 scoring=random seed=9" \
// RUN:   | FileCheck %s --check-prefix=LAYERSEEDS
// RUN: snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 scoring=prefix_votes" \
// RUN:   | FileCheck %s --check-prefix=PREFIX
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24" \
// RUN:   | FileCheck %s --check-prefix=DEFAULTS
// RUN: snapkv-opt %S/../Models/tiny_llama_dynamic.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=16 budget=pyramid" \
// RUN:   | FileCheck %s --check-prefix=PYRAMID
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=16 budget=pyramid pyramid-beta=2" \
// RUN:   | FileCheck %s --check-prefix=PYRAMIDBETA
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=16 budget=inverted-pyramid pyramid-beta=2" \
// RUN:   | FileCheck %s --check-prefix=INVERTED
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 budget=pyramid pyramid-beta=0" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BADBETA
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 budget=cone" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BADBUDGET
// RUN: not snapkv-opt %S/Inputs/compress-kv-cache-mini.mlir \
// RUN:   --snapkv-compress-kv-cache="window=2 capacity=6 budget=pyramid scoring=recent sinks=1" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=PYRAMIDSINKS
// RUN: snapkv-opt %S/../Models/tiny_llama_dynamic.mlir \
// RUN:   --snapkv-compress-kv-cache="window=4 capacity=16 budget=pyramid" \
// RUN:   | snapkv-opt --snapkv-report-cache="prompt-length=64 generated=8" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=PYRAMIDLEDGER

// budget=pyramid (PyramidKV): with K = C - W = 12 and beta 20 the top layer keeps
// max(1, 12 / 20) = 1 prefix position, the bottom one 2K - 1 = 23; each layer's
// cache is its own select's result. The dynamic model's prefill results keep `?`.
// PYRAMID: snapkv.select {{.*}} window 4 capacity 27 kernel 15 gqa mean
// PYRAMID: snapkv.select {{.*}} window 4 capacity 5 kernel 15 gqa mean
// PYRAMID-NOT: snapkv.select
// PYRAMIDBETA: func.func @prefill({{.*}}) -> (tensor<1x64x256xf32>, tensor<1x2x22x16xf32>, tensor<1x2x22x16xf32>, tensor<1x2x10x16xf32>, tensor<1x2x10x16xf32>)
// PYRAMIDBETA: snapkv.select {{.*}} window 4 capacity 22
// PYRAMIDBETA: snapkv.select {{.*}} window 4 capacity 10
// inverted-pyramid: the same capacities the other way up.
// INVERTED: snapkv.select {{.*}} window 4 capacity 10
// INVERTED: snapkv.select {{.*}} window 4 capacity 22
// BADBETA: error: snapkv-compress-kv-cache: pyramid-beta must be >= 1 (got 0)
// BADBUDGET: for the --budget option: Cannot find option named 'cone'!
// PYRAMIDSINKS: error: snapkv-compress-kv-cache: sinks takes one number of sinks for every layer, so it needs budget=uniform
// The ledger reads each layer's capacity from its select.
// PYRAMIDLEDGER: 0 mean 1 2 2 16 4 27 18,432 8,960
// PYRAMIDLEDGER: 1 mean 1 2 2 16 4 5 18,432 3,328

// The pass's defaults are pooling kernel 15 and gqa mean (docs/eval.md, "The
// defaults"), not the op's kernel 5 and gqa expand: every select spells them
// and the cache keeps the model's Hkv = 2 heads.
// DEFAULTS: func.func @prefill({{.*}}) -> (tensor<1x64x256xf32>, tensor<1x2x24x16xf32>
// DEFAULTS-COUNT-2: snapkv.select {{.*}} window 8 capacity 24 kernel 15 gqa mean scale
// DEFAULTS-NOT: snapkv.select

// LONGWINDOW: warning: snapkv-compress-kv-cache left the module unchanged: @prefill: layer 0: the prompt has 8 positions, fewer than window=16
// LONGWINDOW-NOT: snapkv.select
// LONGWINDOW: func.func @prefill
// LONGWINDOW-SAME: -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)

// STRICT: error: snapkv-compress-kv-cache left the module unchanged: @prefill: layer 0: the prompt has 8 positions

// NODECODE: warning: snapkv-compress-kv-cache left the module unchanged: @step: no function with a body by this name (decode-func; pass decode-func="" to rewrite prefill only)
// NODECODE-NOT: snapkv.select

// CAPACITY: error: snapkv-compress-kv-cache: capacity must be greater than window (got capacity=4, window=4)
// POOLING: for the --pooling option: Cannot find option named 'median'!
// KERNEL: error: snapkv-compress-kv-cache: kernel must be odd and >= 1 (got 4)

// Option errors come before any work and are reported at the module's
// location, so mlir-opt does not print the (here 200 KB) module with them.
// NODUMP: tiny_llama.mlir:{{.*}} error: snapkv-compress-kv-cache: capacity must be greater than window (got capacity=24, window=30)
// NODUMP-NOT: func.func
// NODUMP-NOT: linalg

// The pooling kernel option is `kernel`, like the op's clause.
// OLDNAME: no such option kernel-size

// The comparison scorings: the select carries the clause (and sinks / a
// per-layer seed); a bad scoring or sink count is an option error.
// SCORING: for the --scoring option: Cannot find option named 'best'!
// SINKS: error: snapkv-compress-kv-cache: sinks must be between 0 and capacity - window (got 5)
// RECENT: snapkv.select {{.*}} scoring recent sinks 1 :
// RANDOM: snapkv.select {{.*}} scoring random seed 9 :
// PREFIX: snapkv.select {{.*}} scoring prefix_votes :
// Each layer draws with its own seed: seed + layer.
// LAYERSEEDS: snapkv.select {{.*}} scoring random seed 9 :
// LAYERSEEDS: snapkv.select {{.*}} scoring random seed 10 :
