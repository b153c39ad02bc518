// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(convert-scf-to-openmp,func.func(snapkv-schedule-parallel-loops))" | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(convert-scf-to-openmp,func.func(snapkv-schedule-parallel-loops{kind=dynamic}))" | FileCheck %s --check-prefix=DYNAMIC
// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(convert-scf-to-openmp,func.func(snapkv-schedule-parallel-loops{static-trip-count=0}))" | FileCheck %s --check-prefix=NOSTATIC

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

// -----

// A few iterations known at compile time (8 x 2 = 16, at most static-trip-count)
// keep the static schedule; with static-trip-count=0 they are scheduled too. 65
// iterations are over the default bound.
// CHECK-LABEL: func.func @few
// CHECK: omp.wsloop {
// CHECK-LABEL: func.func @many
// CHECK: omp.wsloop schedule(guided)
// NOSTATIC-LABEL: func.func @few
// NOSTATIC: omp.wsloop schedule(guided)
func.func @few(%m: memref<8x2xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %one = arith.constant 1.0 : f32
  scf.parallel (%i, %j) = (%c0, %c0) to (%c8, %c2) step (%c1, %c1) {
    memref.store %one, %m[%i, %j] : memref<8x2xf32>
  }
  return
}

func.func @many(%m: memref<65xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c65 = arith.constant 65 : index
  %one = arith.constant 1.0 : f32
  scf.parallel (%i) = (%c0) to (%c65) step (%c1) {
    memref.store %one, %m[%i] : memref<65xf32>
  }
  return
}
