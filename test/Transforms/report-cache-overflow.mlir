// Byte counts that do not fit in 64 bits are errors that name the values,
// never wrapped-around numbers; nothing is printed before the error.
// RUN: not snapkv-opt %s --split-input-file --snapkv-report-cache="prompt-length=9223372036854775807 generated=9223372036854775807" -o /dev/null 2>&1 | FileCheck %s --check-prefix=SUM
// RUN: not snapkv-opt %s --split-input-file --snapkv-report-cache="prompt-length=4503599627370496 generated=0" -o /dev/null 2>&1 | FileCheck %s --check-prefix=FULL
// RUN: not snapkv-opt %s --split-input-file --snapkv-report-cache="prompt-length=4503599627370495 generated=0" -o /dev/null 2>&1 | FileCheck %s --check-prefix=FITS
// RUN: not snapkv-opt %s --split-input-file --snapkv-report-cache="prompt-length=1024 generated=1125899906842624" -o /dev/null 2>&1 | FileCheck %s --check-prefix=COMPACT
// RUN: not snapkv-opt %s --split-input-file --snapkv-report-cache="prompt-length=1024 generated=2251799813685248" -o /dev/null 2>&1 | FileCheck %s --check-prefix=TOTAL

// SUM: error: snapkv-report-cache: prompt-length + generated does not fit in 64 bits (prompt-length=9223372036854775807, generated=9223372036854775807)
// SUM-NOT: snapkv cache ledger

// One expand layer (Hkv=8, Hc=32, D=128, f16): full 4096*(L+g) bytes,
// compacted 16384*(min(L,1024)+g) bytes. 2^52 positions are one too many
// for the full cache; 2^52-1 fit (18,446,744,073,709,547,520 B).
// FULL: error: snapkv-report-cache: layer 0: the full cache, 2*B*Hkv*(L+g)*D*e bytes, does not fit in 64 bits (B=1, Hkv=8, L=4503599627370496, g=0, D=128, e=2)
// FULL-NOT: snapkv cache ledger
// FITS: 0      expand     1    8   32   128  2     1024 18,446,744,073,709,547,520             16,777,216
// FITS-NEXT: total: 1 layers, full 18,446,744,073,709,547,520 B, compacted 16,777,216 B
// With g=2^50 the full cache fits but the 4x larger compacted one does not.
// COMPACT: error: snapkv-report-cache: layer 0: the compacted cache, 2*B*Hc*(min(L,C)+g)*D*e bytes, does not fit in 64 bits (B=1, Hc=32, min(L,C)=1024, g=1125899906842624, D=128, e=2)
// COMPACT-NOT: {{^}}0      expand
func.func @expand(%q: tensor<1x32x32x128xf16>, %k: tensor<1x8x?x128xf16>, %v: tensor<1x8x?x128xf16>) {
  %k0, %v0, %i0 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x?x128xf16>, tensor<1x8x?x128xf16>) -> (tensor<1x32x?x128xf16>, tensor<1x32x?x128xf16>, tensor<1x32x?xi64>)
  return
}

// -----

// Two mean layers, each 4096*(L+g) = 2^63 + 2^22 bytes full: each fits, the
// total does not.
// TOTAL: error: snapkv-report-cache: the total over 2 layers does not fit in 64 bits (prompt-length=1024, generated=2251799813685248)
// TOTAL-NOT: snapkv cache ledger
func.func @mean(%q: tensor<1x32x32x128xf16>, %k: tensor<1x8x?x128xf16>, %v: tensor<1x8x?x128xf16>) {
  %k0, %v0, %i0 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x?x128xf16>, tensor<1x8x?x128xf16>) -> (tensor<1x8x?x128xf16>, tensor<1x8x?x128xf16>, tensor<1x8x?xi64>)
  %k1, %v1, %i1 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x?x128xf16>, tensor<1x8x?x128xf16>) -> (tensor<1x8x?x128xf16>, tensor<1x8x?x128xf16>, tensor<1x8x?xi64>)
  return
}
