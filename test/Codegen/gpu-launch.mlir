// RUN: snapkv-opt %s --snapkv-gpu-launch=shared-memory-bytes=1024 -split-input-file -verify-diagnostics -canonicalize -cse | FileCheck %s

// A block loop with a dynamic trip count becomes one gpu.launch with that grid; the
// block size is its largest thread loop (32 threads). Scratch: the static 64-float buffer
// fits the 1 KiB shared budget (a view of the dynamic shared memory, cast to a generic
// pointer); the second static one does not, nor does the dynamic one: both get a slice
// of a global buffer per block (allocated around the launch, 4352 + n*4 rounded up to 64
// bytes per block); scratch inside a thread loop becomes private (alloca). Thread loops
// map to thread ids, guarded where shorter than the block, a barrier after each.

// CHECK-LABEL: func.func @blocks(
// CHECK-SAME: %[[OUT:[a-z0-9]+]]: memref<?x32xf32>, %[[N:[a-z0-9]+]]: index
// CHECK: %[[GRID:.*]] = memref.dim %[[OUT]], %c0
// CHECK: %[[BYTES:.*]] = affine.apply #{{.*}}()[%{{.*}}]
// CHECK: %[[SLICE:.*]] = arith.addi %[[BYTES]], %c4352
// CHECK: %[[ALL:.*]] = arith.muli %[[SLICE]], %[[GRID]]
// CHECK: %[[GLOBAL:.*]] = memref.alloc(%[[ALL]]) : memref<?xi8>
// CHECK: gpu.launch blocks(%[[BX:.*]], %{{.*}}, %{{.*}}) in (%{{.*}} = %[[GRID]], %{{.*}} = %c1, %{{.*}} = %c1) threads(%{{.*}}, %{{.*}}, %{{.*}}) in (%{{.*}} = %c32, %{{.*}} = %c1, %{{.*}} = %c1) dynamic_shared_memory_size %c256_i32
// CHECK: %[[SMEM:.*]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK: %[[START:.*]] = arith.muli %[[BX]], %[[SLICE]]
// CHECK: %[[V0:.*]] = memref.view %[[SMEM]][%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64xf32, #gpu.address_space<workgroup>>
// CHECK: %[[SHARED:.*]] = memref.memory_space_cast %[[V0]] : memref<64xf32, #gpu.address_space<workgroup>> to memref<64xf32>
// CHECK: %[[BIG:.*]] = memref.view %[[GLOBAL]][%[[START]]][] : memref<?xi8> to memref<1088xf32>
// CHECK: %[[OFF:.*]] = arith.addi %[[START]], %c4352
// CHECK: %[[DYN:.*]] = memref.view %[[GLOBAL]][%[[OFF]]][%[[N]]] : memref<?xi8> to memref<?xf32>
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: memref.alloca() : memref<4xf32>
// CHECK: memref.store %{{.*}}, %[[SHARED]][%[[TID]]]
// CHECK: memref.store %{{.*}}, %[[BIG]][%[[TID]]]
// CHECK: memref.store %{{.*}}, %[[DYN]][%[[TID]]]
// CHECK: gpu.barrier
// A 16-iteration thread loop on 32 threads: guarded.
// CHECK: %[[FIRST:.*]] = arith.cmpi ult, %[[TID]], %c16
// CHECK: scf.if %[[FIRST]]
// CHECK: memref.store %{{.*}}, %[[OUT]][%[[BX]], %[[TID]]]
// CHECK: gpu.barrier
// CHECK: gpu.terminator
// CHECK: memref.dealloc %[[GLOBAL]]
func.func @blocks(%out: memref<?x32xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  %grid = memref.dim %out, %c0 : memref<?x32xf32>
  scf.forall (%b) in (%grid) {
    %small = memref.alloc() : memref<64xf32>
    %big = memref.alloc() : memref<1088xf32>
    %dyn = memref.alloc(%n) : memref<?xf32>
    scf.forall (%t) in (32) {
      %priv = memref.alloc() : memref<4xf32>
      memref.store %one, %priv[%c0] : memref<4xf32>
      %x = memref.load %priv[%c0] : memref<4xf32>
      memref.store %x, %small[%t] : memref<64xf32>
      memref.store %x, %big[%t] : memref<1088xf32>
      memref.store %x, %dyn[%t] : memref<?xf32>
    } {mapping = [#gpu.thread<linear_dim_0>]}
    scf.forall (%t) in (16) {
      %x = memref.load %small[%t] : memref<64xf32>
      memref.store %x, %out[%b, %t] : memref<?x32xf32>
    } {mapping = [#gpu.thread<linear_dim_0>]}
  } {mapping = [#gpu.block<x>]}
  return
}

// -----

// Every thread runs what is outside the thread loops: a write there is refused.
func.func @write_outside_threads(%out: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  scf.forall (%b) in (4) {
    // expected-error @below {{snapkv-gpu-launch: a write outside the thread loops of a GPU block would run in every thread}}
    memref.store %one, %out[%b] : memref<4xf32>
  } {mapping = [#gpu.block<x>]}
  return
}

// -----

func.func @tensor_results(%t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{snapkv-gpu-launch: the block loop is not bufferized}}
  %r = scf.forall (%b) in (4) shared_outs(%o = %t) -> (tensor<4xf32>) {
    scf.forall.in_parallel {
    }
  } {mapping = [#gpu.block<x>]}
  return %r : tensor<4xf32>
}
