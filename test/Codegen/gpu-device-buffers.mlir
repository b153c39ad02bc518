// RUN: snapkv-opt %s --snapkv-gpu-device-buffers -split-input-file -verify-diagnostics | FileCheck %s

// The argument the kernel reads is copied to the device right at the start; the buffer
// the kernels write (a host allocation) is allocated on the device instead. The host
// reads it twice: after the first kernel (a call) and after the second (the return), so
// it reads two host copies, each made right after its kernel. Device buffers are freed
// at the end of their block, after the copies.

// CHECK-LABEL: func.func @kernels(
// CHECK-SAME: %[[IN:.*]]: memref<4xf32>
// CHECK: %[[DIN:.*]] = gpu.alloc () : memref<4xf32>
// CHECK: gpu.memcpy %[[DIN]], %[[IN]]
// CHECK: %[[DOUT:.*]] = gpu.alloc () : memref<4xf32>
// CHECK: gpu.launch
// CHECK: memref.load %[[DIN]]
// CHECK: memref.store %{{.*}}, %[[DOUT]]
// CHECK: gpu.terminator
// CHECK: %[[H1:.*]] = memref.alloc() : memref<4xf32>
// CHECK: gpu.memcpy %[[H1]], %[[DOUT]]
// CHECK: %[[CAST:.*]] = memref.cast %[[H1]] : memref<4xf32> to memref<*xf32>
// CHECK: call @print(%[[CAST]])
// CHECK: gpu.launch
// CHECK: memref.store %{{.*}}, %[[DOUT]]
// CHECK: gpu.terminator
// CHECK: %[[H2:.*]] = memref.alloc() : memref<4xf32>
// CHECK: gpu.memcpy %[[H2]], %[[DOUT]]
// CHECK: gpu.dealloc %[[DIN]]
// CHECK: gpu.dealloc %[[DOUT]]
// CHECK: return %[[H2]]
func.func private @print(memref<*xf32>)
func.func @kernels(%in: memref<4xf32>) -> memref<4xf32> {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %two = arith.constant 2.0 : f32
  %out = memref.alloc() : memref<4xf32>
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c4, %sy = %c1, %sz = %c1) {
    %x = memref.load %in[%tx] : memref<4xf32>
    memref.store %x, %out[%tx] : memref<4xf32>
    gpu.terminator
  }
  %u = memref.cast %out : memref<4xf32> to memref<*xf32>
  call @print(%u) : (memref<*xf32>) -> ()
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c4, %sy = %c1, %sz = %c1) {
    memref.store %two, %out[%tx] : memref<4xf32>
    gpu.terminator
  }
  return %out : memref<4xf32>
}

// -----

// A kernel may not write a buffer the host owns (it would have to be copied back).
func.func @writes_argument(%out: memref<4xf32>) {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %two = arith.constant 2.0 : f32
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c4, %sy = %c1, %sz = %c1) {
    // expected-error @below {{snapkv-gpu-device-buffers: a kernel writes a buffer that the host owns}}
    memref.store %two, %out[%tx] : memref<4xf32>
    gpu.terminator
  }
  return
}

// -----

// Nor may the host write a buffer that kernels use.
func.func @host_writes(%v: f32) -> memref<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %out = memref.alloc() : memref<4xf32>
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
             threads(%tx, %ty, %tz) in (%sx = %c4, %sy = %c1, %sz = %c1) {
    memref.store %v, %out[%tx] : memref<4xf32>
    gpu.terminator
  }
  // expected-error @below {{snapkv-gpu-device-buffers: host code writes a buffer that kernels use, or reads it before any kernel wrote it}}
  memref.store %v, %out[%c0] : memref<4xf32>
  return %out : memref<4xf32>
}
