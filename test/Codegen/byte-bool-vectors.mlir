// RUN: snapkv-opt %s --pass-pipeline='builtin.module(llvm.func(snapkv-byte-bool-vectors))' | FileCheck %s

// Contiguous i1 vector accesses go through bytes; everything else is left alone.

// CHECK-LABEL: llvm.func @load_store
// CHECK: %[[L:.*]] = llvm.load %arg0 {alignment = 1 : i64} : !llvm.ptr -> vector<16xi8>
// CHECK: %[[T:.*]] = llvm.trunc %[[L]] : vector<16xi8> to vector<16xi1>
// CHECK: %[[Z:.*]] = llvm.zext %[[T]] : vector<16xi1> to vector<16xi8>
// CHECK: llvm.store %[[Z]], %arg1 {alignment = 1 : i64} : vector<16xi8>, !llvm.ptr
// CHECK: %[[F:.*]] = llvm.load %arg0 : !llvm.ptr -> vector<4xf32>
// CHECK: llvm.store %[[F]], %arg1 : vector<4xf32>, !llvm.ptr
// CHECK: %[[S:.*]] = llvm.load %arg0 : !llvm.ptr -> i1
// CHECK: llvm.store %[[S]], %arg1 : i1, !llvm.ptr
llvm.func @load_store(%src: !llvm.ptr, %dst: !llvm.ptr) {
  %v = llvm.load %src {alignment = 1 : i64} : !llvm.ptr -> vector<16xi1>
  llvm.store %v, %dst {alignment = 1 : i64} : vector<16xi1>, !llvm.ptr
  %f = llvm.load %src : !llvm.ptr -> vector<4xf32>
  llvm.store %f, %dst : vector<4xf32>, !llvm.ptr
  %s = llvm.load %src : !llvm.ptr -> i1
  llvm.store %s, %dst : i1, !llvm.ptr
  llvm.return
}

// CHECK-LABEL: llvm.func @masked
// CHECK: %[[P:.*]] = llvm.zext %arg3 : vector<8xi1> to vector<8xi8>
// CHECK: %[[L:.*]] = llvm.intr.masked.load %arg0, %arg2, %[[P]] {alignment = 1 : i32} : (!llvm.ptr, vector<8xi1>, vector<8xi8>) -> vector<8xi8>
// CHECK: %[[T:.*]] = llvm.trunc %[[L]] : vector<8xi8> to vector<8xi1>
// CHECK: %[[Z:.*]] = llvm.zext %[[T]] : vector<8xi1> to vector<8xi8>
// CHECK: llvm.intr.masked.store %[[Z]], %arg1, %arg2 {alignment = 1 : i32} : vector<8xi8>, vector<8xi1> into !llvm.ptr
llvm.func @masked(%src: !llvm.ptr, %dst: !llvm.ptr, %mask: vector<8xi1>, %pass: vector<8xi1>) {
  %v = llvm.intr.masked.load %src, %mask, %pass {alignment = 1 : i32} : (!llvm.ptr, vector<8xi1>, vector<8xi1>) -> vector<8xi1>
  llvm.intr.masked.store %v, %dst, %mask {alignment = 1 : i32} : vector<8xi1>, vector<8xi1> into !llvm.ptr
  llvm.return
}
