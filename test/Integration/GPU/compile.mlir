// REQUIRES: ptxas
// The GPU pipeline on selects covering f32/f16/bf16, static and dynamic L and
// every GQA policy, for sm_80 and sm_90: ptxas assembles every kernel (format
// bin), and the PTX (format isa) shows the fusion: two kernels per select
// (votes: logits, mask, softmax statistics and column sums in one kernel,
// one block barrier between its two phases; then select + gather, one block
// per cache head), no shared
// memory, no atomics, no parallel loop left on the host.
// RUN: snapkv-opt %S/Inputs/selects.mlir --snapkv-gpu-pipeline="chip=sm_80 features=+ptx80 format=bin" | FileCheck %s --check-prefix=BIN80
// RUN: snapkv-opt %S/Inputs/selects.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=bin" | FileCheck %s --check-prefix=BIN90
// RUN: snapkv-opt %S/Inputs/selects.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=isa" > %t.isa.mlir
// RUN: FileCheck %s < %t.isa.mlir
// RUN: FileCheck %s --check-prefix=PTX < %t.isa.mlir
// RUN: snapkv-opt %S/Inputs/selects.mlir --snapkv-gpu-pipeline="chip=sm_80 features=+ptx80 format=fatbin" | FileCheck %s --check-prefix=FATBIN

// BIN80-COUNT-14: gpu.binary @{{.*}} [#gpu.object<#nvvm.target<chip = "sm_80", features = "+ptx80">, {{.*}}bin = "
// BIN90-COUNT-14: gpu.binary @{{.*}} [#gpu.object<#nvvm.target<chip = "sm_90", features = "+ptx80">, {{.*}}bin = "
// FATBIN: gpu.binary

// CHECK-LABEL: llvm.func @f32_static_expand(
// CHECK-COUNT-2: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-COUNT-2: gpu.binary @f32_static_expand_kernel{{(_[0-9]+)?}} {{.*}}.entry f32_static_expand_kernel(
// CHECK-LABEL: llvm.func @f32_dynamic_mean(
// CHECK-COUNT-2: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-COUNT-2: gpu.binary @f32_dynamic_mean_kernel{{(_[0-9]+)?}} {{.*}}.entry f32_dynamic_mean_kernel(
// CHECK-LABEL: llvm.func @f32_static_max(
// CHECK-COUNT-2: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-COUNT-2: gpu.binary @f32_static_max_kernel{{(_[0-9]+)?}} {{.*}}.entry f32_static_max_kernel(
// CHECK-LABEL: llvm.func @f16_dynamic_expand(
// CHECK-COUNT-2: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-COUNT-2: gpu.binary @f16_dynamic_expand_kernel{{(_[0-9]+)?}} {{.*}}.entry f16_dynamic_expand_kernel(
// CHECK-LABEL: llvm.func @f16_static_mean(
// CHECK-COUNT-2: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-COUNT-2: gpu.binary @f16_static_mean_kernel{{(_[0-9]+)?}} {{.*}}.entry f16_static_mean_kernel(
// CHECK-LABEL: llvm.func @f16_dynamic_max(
// CHECK-COUNT-2: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-COUNT-2: gpu.binary @f16_dynamic_max_kernel{{(_[0-9]+)?}} {{.*}}.entry f16_dynamic_max_kernel(
// CHECK-LABEL: llvm.func @bf16_dynamic_expand(
// CHECK-COUNT-2: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK-COUNT-2: gpu.binary @bf16_dynamic_expand_kernel{{(_[0-9]+)?}} {{.*}}.entry bf16_dynamic_expand_kernel(

// Nothing stays a host loop; each kernel is one PTX entry with no shared
// memory and no atomics (reductions are sequential per thread). Barriers:
// one per votes kernel (statistics | column sums), two per select kernel
// (pooled keys | threshold and compaction | gather): 7 * 3 = 21.
// PTX-NOT: scf.parallel
// PTX-COUNT-14: .entry {{[a-z0-9_]+}}_kernel(
// PTX-NOT: .shared
// PTX-NOT: atom.
// PTX-NOT: red.global

// A whole program (constants, prints) through the pipeline and into LLVM IR:
// host code loads each kernel and launches it through the mgpu* runtime.
// RUN: snapkv-opt %S/../CPU/worked_example.mlir --snapkv-gpu-pipeline="chip=sm_90 features=+ptx80 format=fatbin" | mlir-translate --mlir-to-llvmir | FileCheck %s --check-prefix=HOST
// HOST-COUNT-4: call void @mgpuLaunchKernel(
// HOST: declare ptr @mgpuModuleLoad(ptr, i64)

// RUN: grep -o "bar.sync" %t.isa.mlir | count 21
