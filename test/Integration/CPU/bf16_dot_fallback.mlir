// RUN: snapkv-opt %S/Inputs/bf16_matmul.mlir --snapkv-cpu-pipeline="cpu-features=-avx512bf16" > %t.mlir
// RUN: FileCheck %s --check-prefix=IR < %t.mlir
// RUN: mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime < %t.mlir | FileCheck %s

// The bf16 product on the fallback a CPU without AVX512_BF16 gets (operands
// widened to f32, FMAs): the same numbers as bf16_dot.mlir's microkernel.

// IR-NOT: dpbf16ps

// CHECK: [0,  8945]
// CHECK: [0,  462]
