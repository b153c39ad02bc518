// RUN: snapkv-opt %s --snapkv-cpu-pipeline="vector-bits=256" --split-input-file | FileCheck %s

// The last steps of the CPU pipeline: a transpose is one shufflevector of the
// flattened vector (not one extract/insert pair per element), and the memref
// descriptors the conversion builds around every access fold away, so a
// function that only reads an element of a slice has no insertvalue or
// extractvalue left.

// CHECK-LABEL: llvm.func @transpose
// CHECK-NOT: llvm.extractelement
// CHECK-NOT: llvm.insertelement
// CHECK: llvm.shufflevector
// CHECK-NOT: llvm.extractelement
// CHECK-NOT: llvm.insertelement
// CHECK: llvm.return
func.func @transpose(%v: vector<8x4xf32>) -> vector<4x8xf32> {
  %t = vector.transpose %v, [1, 0] : vector<8x4xf32> to vector<4x8xf32>
  return %t : vector<4x8xf32>
}

// -----

// CHECK-LABEL: llvm.func @element_of_slice
// CHECK-NOT: llvm.insertvalue
// CHECK-NOT: llvm.extractvalue
// CHECK: llvm.load
// CHECK-NOT: llvm.insertvalue
// CHECK-NOT: llvm.extractvalue
// CHECK: llvm.return
func.func @element_of_slice(%t: tensor<?x64xf32>, %i: index) -> f32 {
  %s = tensor.extract_slice %t[%i, 8] [4, 16] [1, 1] : tensor<?x64xf32> to tensor<4x16xf32>
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %e = tensor.extract %s[%c1, %c2] : tensor<4x16xf32>
  return %e : f32
}

// -----

// Parallel loops keep OpenMP's guided schedule down to the LLVM dialect
// (snapkv-schedule-parallel-loops).
// CHECK-LABEL: llvm.func @disjoint
// CHECK: omp.wsloop schedule(guided)
func.func @disjoint(%m: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    memref.store %one, %m[%i] : memref<?xf32>
  }
  return
}
