// snapkv-report-cache format=json: the ledger of report-cache-model.mlir,
// report-cache.mlir and report-cache-overflow.mlir, with the same inputs and
// the same numbers, as one JSON object for programs (python/snapkv/cli/ledger.py).
//
// The tiny Llama, gqa mean: 2 * Hkv(2) * (64 + 16) * 16 * 4 bytes full;
// 2 * 2 * (24 + 16) * 16 * 4 compacted; prefill holds a layer's 64 rows
// before its select (one-shot: chunk 0), 2 * 2 * 64 * 16 * 4.
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 kernel=5 gqa=mean" \
// RUN:   --snapkv-report-cache="prompt-length=64 generated=16 format=json" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=MEAN
// MEAN:      {
// MEAN-NEXT:  "prompt_length": 64,
// MEAN-NEXT:  "generated": 16,
// MEAN-NEXT:  "chunk": 0,
// MEAN-NEXT:  "layers": [
// MEAN-NEXT:   {
// MEAN-NEXT:    "layer": 0,
// MEAN-NEXT:    "gqa": "mean",
// MEAN-NEXT:    "B": 1,
// MEAN-NEXT:    "Hkv": 2,
// MEAN-NEXT:    "Hc": 2,
// MEAN-NEXT:    "D": 16,
// MEAN-NEXT:    "e": 4,
// MEAN-NEXT:    "row_bytes": 64,
// MEAN-NEXT:    "kept": 24,
// MEAN-NEXT:    "full": 20480,
// MEAN-NEXT:    "compacted": 10240,
// MEAN-NEXT:    "prefill_peak_rows": 64,
// MEAN-NEXT:    "prefill_peak": 16384,
// MEAN-NEXT:    "decode_peak_rows": 40,
// MEAN-NEXT:    "decode_peak": 10240
// MEAN-NEXT:   },
// MEAN-NEXT:   {
// MEAN-NEXT:    "layer": 1,
// MEAN-NEXT:    "gqa": "mean",
// MEAN:         "decode_peak": 10240
// MEAN-NEXT:   }
// MEAN-NEXT:  ],
// MEAN-NEXT:  "total": {
// MEAN-NEXT:   "layers": 2,
// MEAN-NEXT:   "full": 40960,
// MEAN-NEXT:   "compacted": 20480,
// MEAN-NEXT:   "ratio": 0.5,
// MEAN-NEXT:   "prefill_peak": 32768,
// MEAN-NEXT:   "decode_peak": 20480
// MEAN-NEXT:  }
// MEAN-NEXT: }
// MEAN-NOT:  {{.}}

// gqa expand keeps Hq = 4 heads: bigger than the full cache here.
// RUN: snapkv-opt %S/../Models/tiny_llama_dynamic.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 kernel=5 gqa=expand" \
// RUN:   --snapkv-report-cache="prompt-length=48 generated=16 format=json" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=EXPAND
// EXPAND:      "layer": 0,
// EXPAND-NEXT: "gqa": "expand",
// EXPAND-NEXT: "B": 1,
// EXPAND-NEXT: "Hkv": 2,
// EXPAND-NEXT: "Hc": 4,
// EXPAND-NEXT: "D": 16,
// EXPAND-NEXT: "e": 4,
// EXPAND-NEXT: "row_bytes": 64,
// EXPAND-NEXT: "kept": 24,
// EXPAND-NEXT: "full": 16384,
// EXPAND-NEXT: "compacted": 20480,
// EXPAND-NEXT: "prefill_peak_rows": 48,
// EXPAND-NEXT: "prefill_peak": 12288,
// EXPAND-NEXT: "decode_peak_rows": 40,
// EXPAND-NEXT: "decode_peak": 20480
// EXPAND:      "total": {
// EXPAND-NEXT: "layers": 2,
// EXPAND-NEXT: "full": 32768,
// EXPAND-NEXT: "compacted": 40960,
// EXPAND-NEXT: "ratio": 1.25,
// EXPAND-NEXT: "prefill_peak": 24576,
// EXPAND-NEXT: "decode_peak": 40960

// format=table is the default, byte for byte.
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 kernel=5 gqa=mean" \
// RUN:   --snapkv-report-cache="prompt-length=64 generated=16" -o /dev/null > %t.default
// RUN: snapkv-opt %S/../Models/tiny_llama.mlir \
// RUN:   --snapkv-compress-kv-cache="window=8 capacity=24 kernel=5 gqa=mean" \
// RUN:   --snapkv-report-cache="prompt-length=64 generated=16 format=table" -o /dev/null > %t.table
// RUN: diff %t.default %t.table

// docs/semantics.md's check (report-cache.mlir): 32 layers, per layer full
// 69,206,016 B, expand 25,165,824 B, mean 6,291,456 B. One object per split.
// RUN: snapkv-opt %S/report-cache.mlir --split-input-file \
// RUN:   --snapkv-report-cache="prompt-length=16384 generated=512 format=json" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=DOCS
// DOCS:      "prompt_length": 16384,
// DOCS-NEXT: "generated": 512,
// DOCS:      "layer": 0,
// DOCS-NEXT: "gqa": "expand",
// DOCS-NEXT: "B": 1,
// DOCS-NEXT: "Hkv": 8,
// DOCS-NEXT: "Hc": 32,
// DOCS-NEXT: "D": 128,
// DOCS-NEXT: "e": 2,
// DOCS-NEXT: "row_bytes": 256,
// DOCS-NEXT: "kept": 1024,
// DOCS-NEXT: "full": 69206016,
// DOCS-NEXT: "compacted": 25165824
// DOCS:      "layer": 31,
// DOCS:      "total": {
// DOCS-NEXT: "layers": 32,
// DOCS-NEXT: "full": 2214592512,
// DOCS-NEXT: "compacted": 805306368,
// DOCS-NEXT: "ratio": 0.36363636363636365
// DOCS:      "prompt_length": 16384,
// DOCS:      "layer": 0,
// DOCS-NEXT: "gqa": "mean",
// DOCS-NEXT: "B": 1,
// DOCS-NEXT: "Hkv": 8,
// DOCS-NEXT: "Hc": 8,
// DOCS-NEXT: "D": 128,
// DOCS-NEXT: "e": 2,
// DOCS-NEXT: "row_bytes": 256,
// DOCS-NEXT: "kept": 1024,
// DOCS-NEXT: "full": 69206016,
// DOCS-NEXT: "compacted": 6291456
// DOCS:      "total": {
// DOCS-NEXT: "layers": 32,
// DOCS-NEXT: "full": 2214592512,
// DOCS-NEXT: "compacted": 201326592,
// DOCS-NEXT: "ratio": 0.090909090909090912

// Byte counts are unsigned 64-bit integers: 2^64 - 4096 is printed whole,
// past the int64 range (report-cache-overflow.mlir, FITS). What does not fit
// in 64 bits is the same error as with the table, and nothing is printed.
// RUN: not snapkv-opt %S/report-cache-overflow.mlir --split-input-file \
// RUN:   --snapkv-report-cache="prompt-length=4503599627370495 generated=0 format=json" \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=FITS
// RUN: not snapkv-opt %S/report-cache-overflow.mlir --split-input-file \
// RUN:   --snapkv-report-cache="prompt-length=4503599627370496 generated=0 format=json" \
// RUN:   -o /dev/null 2>&1 | FileCheck %s --check-prefix=FULL
// FITS:      "kept": 1024,
// FITS-NEXT: "full": 18446744073709547520,
// FITS-NEXT: "compacted": 16777216
// FITS:      "total": {
// FITS-NEXT: "layers": 1,
// FITS-NEXT: "full": 18446744073709547520,
// FITS-NEXT: "compacted": 16777216,
// FULL: error: snapkv-report-cache: layer 0: the full cache, 2*B*Hkv*(L+g)*D*e bytes, does not fit in 64 bits (B=1, Hkv=8, L=4503599627370496, g=0, D=128, e=2)
// FULL-NOT: "prompt_length"

// No snapkv.select (this file): no layers, and no ratio of an empty cache.
// RUN: snapkv-opt %s --snapkv-report-cache="prompt-length=64 format=json" -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=EMPTY
// EMPTY:      "layers": [],
// EMPTY-NEXT: "total": {
// EMPTY-NEXT:  "layers": 0,
// EMPTY-NEXT:  "full": 0,
// EMPTY-NEXT:  "compacted": 0,
// EMPTY-NEXT:  "ratio": null

// Any other format is an error of the option parser that names it, reported
// before anything is printed.
// RUN: not snapkv-opt %s --snapkv-report-cache="prompt-length=64 format=xml" -o /dev/null 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BAD
// BAD: for the --format option: Cannot find option named 'xml'!
// BAD-NOT: snapkv cache ledger
// BAD-NOT: "prompt_length"
