// REQUIRES: avx512bf16
// RUN: snapkv-opt %S/Inputs/bf16_matmul.mlir --snapkv-cpu-pipeline="cpu-features=+avx512bf16" > %t.mlir
// RUN: FileCheck %s --check-prefix=IR < %t.mlir
// RUN: mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime < %t.mlir | FileCheck %s

// The bf16 microkernel executed (vdpbf16ps, so only on a CPU with
// AVX512_BF16): the products equal the f32 product of the widened operands
// (integers, exact either way). The sums are numpy's
// np.abs(a @ b).sum() of the same operands. bf16_dot_fallback.mlir runs the
// same program on the fallback.

// IR: llvm.x86.avx512bf16.dpbf16ps.512

// CHECK: [0,  8945]
// CHECK: [0,  462]
