// convert-snapkv-to-gpu: operands staged on the device, two mapped parallel
// nests (votes with the softmax statistics, select + gather), results copied
// back. No buffer holds the [B, Hq, W, L] scores: the largest scratch is
// [B, Hc, P]. On the host the barrier becomes a loop per phase.
// RUN: snapkv-opt %s --convert-snapkv-to-gpu | FileCheck %s
// RUN: snapkv-opt %s --convert-snapkv-to-gpu=device-buffers=false | FileCheck %s --check-prefix=HOST

func.func @select(%q: tensor<1x4x4x16xf16>, %k: tensor<1x2x?x16xf16>, %v: tensor<1x2x?x16xf16>)
    -> (tensor<1x4x?x16xf16>, tensor<1x4x?x16xf16>, tensor<1x4x?xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 16 kernel 3
      : (tensor<1x4x4x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>)
      -> (tensor<1x4x?x16xf16>, tensor<1x4x?x16xf16>, tensor<1x4x?xi64>)
  return %ko, %vo, %idx : tensor<1x4x?x16xf16>, tensor<1x4x?x16xf16>, tensor<1x4x?xi64>
}

// CHECK-LABEL: func.func @select
// Run-time checks come before anything is read.
// CHECK: cf.assert {{.*}} "snapkv.select: prompt length of 'values' differs from 'keys'"
// CHECK: cf.assert {{.*}} "snapkv.select: prompt length (keys dim 2) is shorter than window 4"
// CHECK: %[[Q:.*]] = gpu.alloc () : memref<1x4x4x16xf16>
// CHECK: gpu.memcpy %[[Q]]
// CHECK: gpu.alloc (%{{.*}}) : memref<1x2x?x16xf16>
// CHECK: gpu.alloc (%{{.*}}) : memref<1x2x?x16xf16>
// Scratch: row statistics [B, Hq, W], votes and keys [B, Hc, P], kept keys and
// ranks [B, Hc, C - W]; outputs [B, Hc, S(, D)].
// CHECK: gpu.alloc () : memref<1x4x4xf32>
// CHECK-NEXT: gpu.alloc () : memref<1x4x4xf32>
// CHECK-NEXT: gpu.alloc (%{{.*}}) : memref<1x4x?xf32>
// CHECK-NEXT: gpu.alloc (%{{.*}}) : memref<1x4x?xi32>
// CHECK-NEXT: gpu.alloc () : memref<1x4x12xi32>
// CHECK-NEXT: gpu.alloc () : memref<1x4x12xi64>
// CHECK-NEXT: gpu.alloc (%{{.*}}) : memref<1x4x?xi64>
// CHECK-NEXT: gpu.alloc (%{{.*}}) : memref<1x4x?x16xf16>
// CHECK-NEXT: gpu.alloc (%{{.*}}) : memref<1x4x?x16xf16>
// CHECK-NOT: gpu.alloc
// Votes: one block of 128 threads per (b, kv head) = 2 blocks. Phase 1, the
// rows' softmax statistics (logits are fused multiply-adds of the f16 inputs
// widened to f32); a barrier; phase 2, the columns' probability sums.
// CHECK: scf.parallel (%{{.*}}, %[[TID:.*]]) = (%{{.*}}, %{{.*}}) to (%c2, %c128)
// CHECK: scf.for %{{.*}} = %[[TID]] to %c8 step %c128
// CHECK: math.fma
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: gpu.barrier
// CHECK: scf.for %{{.*}} = %[[TID]] to %{{.*}} step %c128
// CHECK: math.exp
// CHECK: arith.divf
// CHECK: mapping = [#gpu.loop_dim_map<processor = block_x, {{.*}}>, #gpu.loop_dim_map<processor = thread_x, {{.*}}>]
// Select and gather: one block per (b, cache head): the threads' pooled keys,
// thread 0's threshold and compaction, the threads' row copies.
// CHECK: scf.parallel (%{{.*}}, %[[T2:.*]]) = (%{{.*}}, %{{.*}}) to (%c4, %c128)
// CHECK: arith.bitcast {{.*}} : f32 to i32
// CHECK: gpu.barrier
// CHECK: arith.cmpi eq, %[[T2]], %c0
// CHECK: arith.shli
// CHECK: gpu.barrier
// CHECK: scf.for %{{.*}} = %[[T2]] to %{{.*}} step %c128
// CHECK: mapping = [#gpu.loop_dim_map<processor = block_x
// CHECK-NOT: scf.parallel
// CHECK: gpu.memcpy
// CHECK: bufferization.to_tensor
// CHECK: gpu.dealloc

// HOST-NOT: gpu.alloc
// HOST-NOT: gpu.memcpy
// HOST: memref.alloc
// HOST: scf.parallel
// HOST-NOT: gpu.barrier
// HOST: scf.for %{{.*}} = %c0 to %c128 step %c1
// HOST: scf.for %{{.*}} = %c0 to %c128 step %c1
// HOST: scf.parallel
// HOST-NOT: gpu.{{alloc|memcpy|dealloc}}
