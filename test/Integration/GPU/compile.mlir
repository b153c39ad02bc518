// REQUIRES: ptxas
// --snapkv-gpu-pipeline on selects covering f32/f16/bf16, static and dynamic L and every
// GQA policy, for sm_80 and sm_90: ptxas assembles every kernel (bin, fatbin), and the PTX
// (isa) shows the structure of docs/gpu.md.
// RUN: snapkv-opt %S/Inputs/selects.mlir --snapkv-gpu-pipeline="chip=sm_80 features=+ptx80 format=bin" | FileCheck %s --check-prefix=BIN80
// RUN: snapkv-opt %S/Inputs/selects.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=bin" | FileCheck %s --check-prefix=BIN90
// RUN: snapkv-opt %S/Inputs/selects.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=isa" > %t.isa.mlir
// RUN: FileCheck %s < %t.isa.mlir
// RUN: FileCheck %s --check-prefix=PTX < %t.isa.mlir
// RUN: snapkv-opt %S/Inputs/selects.mlir --snapkv-gpu-pipeline="chip=sm_80 features=+ptx80 format=fatbin" | FileCheck %s --check-prefix=FATBIN
// RUN: snapkv-opt %S/../CPU/adaptive.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=bin" | FileCheck %s --check-prefix=ADAPTIVE
// RUN: snapkv-opt %S/../CPU/block.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=bin" | FileCheck %s --check-prefix=BLOCK
// RUN: snapkv-opt %S/../CPU/block.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=bin decompose-select=true" | FileCheck %s --check-prefix=BLOCK

// snapkv.select_adaptive (test/Integration/CPU/adaptive.mlir: two static selects, without
// and with a floor, and a dynamic one): every stage is a kernel, and ptxas assembles them:
// 31 for the three (the two static selects share their scoring after CSE; the gathers of
// results the program does not print are dropped). test_differential.py checks the kernel
// counts per select.
// ADAPTIVE-COUNT-31: gpu.binary @{{.*}} [#gpu.object<#nvvm.target<chip = "sm_90", features = "+ptx80">, {{.*}}bin = "
// ADAPTIVE-NOT: gpu.binary

// `block B` (test/Integration/CPU/block.mlir, whose results emulation.mlir checks): the
// block sums are one more op of the pooling's kernel (of the score's, decomposed), and
// ptxas assembles every kernel.
// BLOCK: gpu.binary @{{.*}} [#gpu.object<#nvvm.target<chip = "sm_90", features = "+ptx80">, {{.*}}bin = "
// BLOCK-NOT: snapkv.

// 3 static selects with 4 kernels each, 4 dynamic ones with 5 (the short-prompt bypass,
// one kernel, and the selection's 4).
// BIN80-COUNT-32: gpu.binary @{{.*}} [#gpu.object<#nvvm.target<chip = "sm_80", features = "+ptx80">, {{.*}}bin = "
// BIN80-NOT: gpu.binary
// BIN90-COUNT-32: gpu.binary @{{.*}} [#gpu.object<#nvvm.target<chip = "sm_90", features = "+ptx80">, {{.*}}bin = "
// BIN90-NOT: gpu.binary
// A fatbin starts with the bytes 50 ED 55 BA.
// FATBIN-COUNT-32: gpu.binary @{{.*}} [#gpu.object<#nvvm.target<chip = "sm_80", {{.*}}ISAToBinaryTimeInMs{{.*}}, "P\EDU\BA
// FATBIN-NOT: gpu.binary

// Launches per select: at most 4 on every path. A static select: tile statistics, row
// statistics, votes, selection + gather. A dynamic one: the bypass (L < C) in one branch,
// the same 4 in the other.
// CHECK-LABEL: llvm.func @f32_static_expand(
// CHECK-COUNT-4: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-LABEL: llvm.func @f32_dynamic_mean(
// CHECK: llvm.cond_br
// CHECK-COUNT-5: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-LABEL: llvm.func @f32_static_max(
// CHECK-COUNT-4: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-LABEL: llvm.func @f16_dynamic_expand(
// CHECK-COUNT-5: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-LABEL: llvm.func @f16_static_mean(
// CHECK-COUNT-4: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-LABEL: llvm.func @f16_dynamic_max(
// CHECK-COUNT-5: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-LABEL: llvm.func @bf16_dynamic_expand(
// CHECK-COUNT-5: gpu.launch_func
// CHECK-NOT: gpu.launch_func

// Through the stage ops (decompose-select=true): a static select's scoring (tile
// statistics, row statistics, votes, pooling), top_positions, and the gathers of the keys
// and of the values, 7 launches; a dynamic one: the bypass (L < C, the two gathers) in one
// branch, the same 7 in the other. Which of the two forms is faster has not been measured.
// RUN: snapkv-opt %S/Inputs/selects.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=isa decompose-select=true" | FileCheck %s --check-prefix=STAGES
// STAGES-LABEL: llvm.func @f32_static_expand(
// STAGES-COUNT-7: gpu.launch_func
// STAGES-NOT: gpu.launch_func
// STAGES-LABEL: llvm.func @f32_dynamic_mean(
// STAGES: llvm.cond_br
// STAGES-COUNT-9: gpu.launch_func
// STAGES-NOT: gpu.launch_func
// STAGES-LABEL: llvm.func @f32_static_max(
// STAGES-COUNT-7: gpu.launch_func
// STAGES-NOT: gpu.launch_func
// STAGES-LABEL: llvm.func @f16_dynamic_expand(
// STAGES-COUNT-9: gpu.launch_func
// STAGES-NOT: gpu.launch_func
// STAGES-LABEL: llvm.func @f16_static_mean(

// Every kernel is one PTX entry; nothing stays a parallel loop on the host; the blocks
// stage their key tiles, queries and partial results in shared memory (one dynamic
// region); no atomics at all (every reduction has a fixed order), hence no float
// atomics.
// PTX-NOT: scf.forall
// PTX-COUNT-32: .entry {{[a-z0-9_]+}}_kernel(
// PTX-NOT: .entry
// PTX: .shared .align 16 .b8 __dynamic_shmem__0;
// PTX: st.shared
// PTX: ld.shared
// RUN: not grep -E "(atom|red)\.(global|shared|add|min|max|inc|dec|cas|exch|and|or|xor)" %t.isa.mlir

// A whole program (constants, prints) through the pipeline and into LLVM IR: host code
// loads each kernel and launches it through the mgpu* runtime.
// RUN: snapkv-opt %S/../CPU/worked_example.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=fatbin" | mlir-translate --mlir-to-llvmir | FileCheck %s --check-prefix=HOST
// HOST-COUNT-5: call void @mgpuLaunchKernel(
// HOST-NOT: call void @mgpuLaunchKernel(
// HOST: declare ptr @mgpuModuleLoad(ptr, i64)

// The benchmark shape (L = 32768, C = 2048, Hkv = 8, D = 128): the two kernels that read
// K (tile statistics and votes) have one block per (kv head, key tile of 64): 4096 blocks,
// at least 2 per SM on a 132-SM GPU (264); the row statistics one per kv head; the
// selection one per cache head. Read off the compiled host code.
// RUN: snapkv-opt %S/Inputs/benchmark_shape.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=isa" | %python %S/Inputs/launch_geometry.py | FileCheck %s --check-prefix=GRID
// Tensor cores at the benchmark shape: in each kernel that reads K (tile statistics,
// votes), f16 and bf16 alike, each of the 4 warps steps through the 4 query heads with
// W/8 x D/16 = 32 m16n8k16 MMAs per step: 32 mma.sync in each kernel's PTX (in the step
// loop), 64 per type. Their operands come from shared memory by ldmatrix: per step D/16 = 8
// key fragments (x4) and 32 transposed query fragments (x2.trans), i.e. 16 and 64 per type.
// None with tensor-cores=false. ptxas assembles them for sm_90 too.
// RUN: snapkv-opt %S/Inputs/benchmark_shape.mlir --snapkv-gpu-pipeline="chip=sm_80 features=+ptx80 format=isa" > %t.bench.mlir
// RUN: grep -o "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" %t.bench.mlir | count 64
// RUN: grep -o "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" %t.bench.mlir | count 64
// RUN: grep -o "ldmatrix.sync.aligned.m8n8.x4.shared.b16" %t.bench.mlir | count 32
// RUN: grep -o "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" %t.bench.mlir | count 128
// RUN: snapkv-opt %S/Inputs/benchmark_shape.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=bin" -o /dev/null
// RUN: snapkv-opt %S/Inputs/benchmark_shape.mlir --snapkv-gpu-pipeline="chip=sm_80 features=+ptx80 format=isa tensor-cores=false" | not grep -o "mma.sync\|ldmatrix"
// The smallest MMA shape (Inputs/mha_f16.mlir): one mma.sync in each of the two kernels.
// RUN: snapkv-opt %S/Inputs/mha_f16.mlir --snapkv-gpu-pipeline="chip=sm_80 features=+ptx80 format=isa" | grep -o "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" | count 2
// GRID-LABEL: func f16_expand
// GRID-NEXT: launch {{.*}} grid 512x8x1 blocks 4096 threads 128x1x1
// GRID-NEXT: launch {{.*}} grid 8x1x1 blocks 8 threads 128x1x1
// GRID-NEXT: launch {{.*}} grid 512x8x1 blocks 4096 threads 128x1x1
// GRID-NEXT: launch {{.*}} grid 32x1x1 blocks 32 threads 128x1x1
// GRID-LABEL: func bf16_mean
// GRID-NEXT: launch {{.*}} grid 512x8x1 blocks 4096 threads 128x1x1
// GRID-NEXT: launch {{.*}} grid 8x1x1 blocks 8 threads 128x1x1
// GRID-NEXT: launch {{.*}} grid 512x8x1 blocks 4096 threads 128x1x1
// GRID-NEXT: launch {{.*}} grid 8x1x1 blocks 8 threads 128x1x1
