// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(convert-scf-to-openmp,func.func(snapkv-schedule-parallel-loops))" | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(convert-scf-to-openmp,func.func(snapkv-schedule-parallel-loops{kind=dynamic}))" | FileCheck %s --check-prefix=DYNAMIC

// A parallel loop whose iterations write disjoint elements gets the guided
// schedule (convert-scf-to-openmp leaves it static).
// CHECK-LABEL: func.func @disjoint
// CHECK: omp.wsloop schedule(guided)
// DYNAMIC-LABEL: func.func @disjoint
// DYNAMIC: omp.wsloop schedule(dynamic)
func.func @disjoint(%m: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    memref.store %one, %m[%i] : memref<?xf32>
  }
  return
}

// -----

// A loop with a reduction keeps the static schedule: partial sums would
// otherwise combine in an order that follows the threads.
// CHECK-LABEL: func.func @sum
// CHECK: omp.wsloop
// CHECK-NOT: schedule
// CHECK-SAME: reduction(
// DYNAMIC-LABEL: func.func @sum
// DYNAMIC-NOT: schedule(
func.func @sum(%m: memref<?xf32>, %n: index) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %s = scf.parallel (%i) = (%c0) to (%n) step (%c1) init (%zero) -> f32 {
    %x = memref.load %m[%i] : memref<?xf32>
    scf.reduce(%x : f32) {
    ^bb0(%a: f32, %b: f32):
      %t = arith.addf %a, %b : f32
      scf.reduce.return %t : f32
    }
  }
  return %s : f32
}

// -----

// A schedule the program chose stays.
// CHECK-LABEL: func.func @chosen
// CHECK: omp.wsloop schedule(static)
// DYNAMIC-LABEL: func.func @chosen
// DYNAMIC: omp.wsloop schedule(static)
func.func @chosen(%m: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f32
  omp.parallel {
    omp.wsloop schedule(static) {
      omp.loop_nest (%i) : index = (%c0) to (%n) step (%c1) {
        memref.store %one, %m[%i] : memref<?xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  return
}
