// The GPU kernels run on the CPU: --snapkv-gpu-emulation is the tensor-level half of
// --snapkv-gpu-pipeline (the formulation as GPU blocks, each block's ops split over its
// threads); --snapkv-cpu-pipeline then runs the block and thread loops as loops, one
// thread loop after the other (what the GPU's barriers guarantee). Every CPU integration
// program must print exactly what its own test expects: same indices, bit-identical K/V,
// the same votes and pooled scores (snapkv.score), the same hostile-value behaviour.
// RUN: snapkv-opt %S/../CPU/worked_example.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/worked_example.mlir
// RUN: snapkv-opt %S/../CPU/counter_example.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/counter_example.mlir
// RUN: snapkv-opt %S/../CPU/gqa.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/gqa.mlir
// RUN: snapkv-opt %S/../CPU/order.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/order.mlir
// RUN: snapkv-opt %S/../CPU/ties.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/ties.mlir
// RUN: snapkv-opt %S/../CPU/pooling_borders.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/pooling_borders.mlir
// RUN: snapkv-opt %S/../CPU/kernel1.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/kernel1.mlir
// RUN: snapkv-opt %S/../CPU/short_prompt.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/short_prompt.mlir
// RUN: snapkv-opt %S/../CPU/dynamic_length.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/dynamic_length.mlir
// RUN: snapkv-opt %S/../CPU/f16.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/f16.mlir
// RUN: snapkv-opt %S/../CPU/bf16.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/bf16.mlir
// RUN: snapkv-opt %S/../CPU/scale.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/scale.mlir
// RUN: snapkv-opt %S/../CPU/score.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/score.mlir
// RUN: snapkv-opt %S/../CPU/block.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/block.mlir
// RUN: snapkv-opt %S/../CPU/hostile_values.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/hostile_values.mlir
// RUN: snapkv-opt %S/../CPU/adaptive.mlir --snapkv-gpu-emulation --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %S/../CPU/adaptive.mlir
