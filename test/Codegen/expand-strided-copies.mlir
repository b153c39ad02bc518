// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-expand-strided-copies))" | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --snapkv-cpu-pipeline | FileCheck %s --check-prefix=LLVM

// A copy into a slice of a larger buffer (rows of a head's votes written into
// the [B, H, P] result) is not contiguous: the runtime's memrefCopy would copy
// it element by element. It becomes a linalg.copy (loops).
// CHECK-LABEL: func.func @into_slice
// CHECK-NOT: memref.copy
// CHECK: linalg.copy ins(%{{.*}} : memref<4x100xf32>) outs(%{{.*}} : memref<4x100xf32, strided<[128, 1], offset: ?>>)
// LLVM-LABEL: llvm.func @into_slice
// LLVM-NOT: memrefCopy
// LLVM: llvm.return
func.func @into_slice(%src: memref<4x100xf32>, %dst: memref<32x128xf32>, %i: index) {
  %s = memref.subview %dst[%i, 0] [4, 100] [1, 1] : memref<32x128xf32> to memref<4x100xf32, strided<[128, 1], offset: ?>>
  memref.copy %src, %s : memref<4x100xf32> to memref<4x100xf32, strided<[128, 1], offset: ?>>
  return
}

// -----

// Out of a slice, dynamic sizes.
// CHECK-LABEL: func.func @from_slice
// CHECK: linalg.copy
// CHECK-NOT: memref.copy
func.func @from_slice(%src: memref<?x?xf32, strided<[?, 1], offset: ?>>, %dst: memref<?x?xf32>) {
  memref.copy %src, %dst : memref<?x?xf32, strided<[?, 1], offset: ?>> to memref<?x?xf32>
  return
}

// -----

// Contiguous on both sides (identity layouts, or a static slice of whole
// rows): one memcpy in the runtime, left alone.
// CHECK-LABEL: func.func @contiguous
// CHECK-NOT: linalg.copy
// CHECK: memref.copy %{{.*}}, %{{.*}} : memref<?x64xf32> to memref<?x64xf32>
// CHECK-NOT: linalg.copy
// CHECK: memref.copy %{{.*}}, %{{.*}} : memref<4x64xf32> to memref<4x64xf32, strided<[64, 1], offset: ?>>
// CHECK-NOT: linalg.copy
func.func @contiguous(%a: memref<?x64xf32>, %b: memref<?x64xf32>, %c: memref<4x64xf32>, %d: memref<32x64xf32>, %i: index) {
  memref.copy %a, %b : memref<?x64xf32> to memref<?x64xf32>
  %s = memref.subview %d[%i, 0] [4, 64] [1, 1] : memref<32x64xf32> to memref<4x64xf32, strided<[64, 1], offset: ?>>
  memref.copy %c, %s : memref<4x64xf32> to memref<4x64xf32, strided<[64, 1], offset: ?>>
  return
}

// -----

// The select: its per-head votes go into the rows of the [B, H, P] result and
// the pooling reads them padded; none of it is left to memrefCopy.
// CHECK-LABEL: func.func @select
// LLVM-LABEL: llvm.func @select
// LLVM-NOT: llvm.call @memrefCopy
// LLVM: llvm.return
func.func @select(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x200x8xf32>, %v: tensor<1x2x200x8xf32>)
    -> (tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>, tensor<1x4x16xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 16 kernel 5
      : (tensor<1x4x4x8xf32>, tensor<1x2x200x8xf32>, tensor<1x2x200x8xf32>)
      -> (tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>, tensor<1x4x16xi64>)
  return %ko, %vo, %idx : tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>, tensor<1x4x16xi64>
}
