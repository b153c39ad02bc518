// RUN: snapkv-opt %s --split-input-file --snapkv-report-cache="prompt-length=16384 generated=512" -o /dev/null | FileCheck %s
// RUN: not snapkv-opt %s --split-input-file --snapkv-report-cache -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOLEN
// RUN: not snapkv-opt %s --split-input-file --snapkv-report-cache=prompt-length=4096 -o /dev/null 2>&1 | FileCheck %s --check-prefix=MISMATCH

// The check of docs/semantics.md (the memory ledger): B=1, N=32 layers, Hq=32, Hkv=8, D=128, f16 (e=2),
// L=16384, C=1024, g=512. Per layer: full 2*8*16896*128*2 = 69,206,016 B;
// expand 2*32*1536*128*2 = 25,165,824 B; mean/max 2*8*1536*128*2 = 6,291,456 B.
// Over 32 layers: 2,214,592,512 / 805,306,368 / 201,326,592 B: the expand
// cache is 4/11 of the full one (0.3636), not 1/11.

// Option errors are reported before anything is printed, at the module's
// location: the module itself is not dumped (mlir-opt prints the op a
// diagnostic is attached to).
// NOLEN: error: snapkv-report-cache needs prompt-length > 0 and generated >= 0 (got prompt-length=0, generated=0)
// NOLEN-NOT: func.func
// NOLEN-NOT: snapkv cache ledger
// MISMATCH: error: snapkv-report-cache: layer 0: keys hold 16384 positions but prompt-length is 4096

// CHECK: snapkv cache ledger: L=16384 g=512 (persistent K/V bytes; prefill peak: before each select; decode peak: the most held while decoding)
// CHECK-NEXT: layer  gqa        B  Hkv   Hc     D  e     kept                   full              compacted           prefill peak            decode peak
// CHECK-NEXT: 0      expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 1      expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 2      expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 3      expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 4      expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 5      expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 6      expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 7      expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 8      expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 9      expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 10     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 11     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 12     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 13     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 14     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 15     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 16     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 17     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 18     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 19     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 20     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 21     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 22     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 23     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 24     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 25     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 26     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 27     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 28     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 29     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 30     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: 31     expand     1    8   32   128  2     1024             69,206,016             25,165,824             67,108,864             25,165,824
// CHECK-NEXT: total: 32 layers, full 2,214,592,512 B, compacted 805,306,368 B (0.3636 of full); prefill peak 2,147,483,648 B (every layer at its peak at once); decode peak 805,306,368 B
func.func @expand_layers(%q: tensor<1x32x32x128xf16>, %k: tensor<1x8x16384x128xf16>, %v: tensor<1x8x16384x128xf16>) {
  %k0, %v0, %i0 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k1, %v1, %i1 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k2, %v2, %i2 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k3, %v3, %i3 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k4, %v4, %i4 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k5, %v5, %i5 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k6, %v6, %i6 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k7, %v7, %i7 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k8, %v8, %i8 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k9, %v9, %i9 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k10, %v10, %i10 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k11, %v11, %i11 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k12, %v12, %i12 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k13, %v13, %i13 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k14, %v14, %i14 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k15, %v15, %i15 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k16, %v16, %i16 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k17, %v17, %i17 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k18, %v18, %i18 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k19, %v19, %i19 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k20, %v20, %i20 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k21, %v21, %i21 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k22, %v22, %i22 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k23, %v23, %i23 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k24, %v24, %i24 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k25, %v25, %i25 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k26, %v26, %i26 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k27, %v27, %i27 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k28, %v28, %i28 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k29, %v29, %i29 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k30, %v30, %i30 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  %k31, %v31, %i31 = snapkv.select %q, %k, %v window 32 capacity 1024 : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x32x1024x128xf16>, tensor<1x32x1024x128xf16>, tensor<1x32x1024xi64>)
  return
}

// -----

// CHECK: snapkv cache ledger: L=16384 g=512 (persistent K/V bytes; prefill peak: before each select; decode peak: the most held while decoding)
// CHECK-NEXT: layer  gqa        B  Hkv   Hc     D  e     kept                   full              compacted           prefill peak            decode peak
// CHECK-NEXT: 0      mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 1      mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 2      mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 3      mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 4      mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 5      mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 6      mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 7      mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 8      mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 9      mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 10     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 11     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 12     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 13     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 14     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 15     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 16     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 17     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 18     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 19     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 20     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 21     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 22     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 23     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 24     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 25     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 26     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 27     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 28     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 29     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 30     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: 31     mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: total: 32 layers, full 2,214,592,512 B, compacted 201,326,592 B (0.0909 of full); prefill peak 2,147,483,648 B (every layer at its peak at once); decode peak 201,326,592 B
func.func @mean_layers(%q: tensor<1x32x32x128xf16>, %k: tensor<1x8x16384x128xf16>, %v: tensor<1x8x16384x128xf16>) {
  %k0, %v0, %i0 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k1, %v1, %i1 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k2, %v2, %i2 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k3, %v3, %i3 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k4, %v4, %i4 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k5, %v5, %i5 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k6, %v6, %i6 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k7, %v7, %i7 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k8, %v8, %i8 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k9, %v9, %i9 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k10, %v10, %i10 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k11, %v11, %i11 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k12, %v12, %i12 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k13, %v13, %i13 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k14, %v14, %i14 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k15, %v15, %i15 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k16, %v16, %i16 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k17, %v17, %i17 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k18, %v18, %i18 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k19, %v19, %i19 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k20, %v20, %i20 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k21, %v21, %i21 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k22, %v22, %i22 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k23, %v23, %i23 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k24, %v24, %i24 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k25, %v25, %i25 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k26, %v26, %i26 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k27, %v27, %i27 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k28, %v28, %i28 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k29, %v29, %i29 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k30, %v30, %i30 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  %k31, %v31, %i31 = snapkv.select %q, %k, %v window 32 capacity 1024 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8x1024x128xf16>, tensor<1x8x1024x128xf16>, tensor<1x8x1024xi64>)
  return
}

// -----

// snapkv.select_adaptive: the heads share the layer's budget, each keeping a
// different number of positions, 8 x 1024 in all: the bytes of a uniform
// gqa mean select at the same capacity.
// CHECK: snapkv cache ledger: L=16384 g=512 (persistent K/V bytes; prefill peak: before each select; decode peak: the most held while decoding)
// CHECK-NEXT: layer  gqa        B  Hkv   Hc     D  e     kept                   full              compacted           prefill peak            decode peak
// CHECK-NEXT: 0      mean       1    8    8   128  2     1024             69,206,016              6,291,456             67,108,864              6,291,456
// CHECK-NEXT: total: 1 layers, full 69,206,016 B, compacted 6,291,456 B (0.0909 of full); prefill peak 67,108,864 B (every layer at its peak at once); decode peak 6,291,456 B
func.func @adaptive(%q: tensor<1x32x32x128xf16>, %k: tensor<1x8x16384x128xf16>, %v: tensor<1x8x16384x128xf16>) {
  %k0, %v0, %i0, %o0 = snapkv.select_adaptive %q, %k, %v window 32 capacity 1024 floor 64 gqa mean : (tensor<1x32x32x128xf16>, tensor<1x8x16384x128xf16>, tensor<1x8x16384x128xf16>) -> (tensor<1x8192x128xf16>, tensor<1x8192x128xf16>, tensor<1x8192xi64>, tensor<1x9xi64>)
  return
}
