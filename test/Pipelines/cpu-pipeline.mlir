// RUN: snapkv-opt %s --snapkv-cpu-pipeline="vector-bits=256" | FileCheck %s --implicit-check-not=snapkv. --implicit-check-not=linalg. --implicit-check-not=scf. --implicit-check-not=expf --implicit-check-not=llvm.intr.exp
// The OpenMP schedule of the parallel loops: guided unless the `schedule` option says otherwise
// (the select's loops, over its 8 rows, are short enough to keep the static schedule unless
// static-trip-count=0).
// RUN: snapkv-opt %s --snapkv-cpu-pipeline="vector-bits=256 static-trip-count=0" | FileCheck %s --check-prefix=GUIDED
// RUN: snapkv-opt %s --snapkv-cpu-pipeline="vector-bits=256 static-trip-count=0 schedule=static" | FileCheck %s --check-prefix=STATIC
// GUIDED: omp.wsloop schedule(guided)
// GUIDED-NOT: schedule(static)
// STATIC: omp.wsloop schedule(static)
// STATIC-NOT: schedule(guided)

// The whole module reaches the LLVM dialect (nothing of snapkv, linalg or
// scf is left, and exp never becomes a libm call or llvm.intr.exp, which
// LLVM would scalarise): the tiles run as OpenMP parallel loops, the logits
// as FMAs on 32-lane rows, the tile maxima as vector maxima.
// CHECK-LABEL: llvm.func @select
// CHECK: omp.parallel
// CHECK: omp.wsloop
// CHECK: llvm.intr.fma(%{{.*}}, %{{.*}}, %{{.*}}) : (vector<32xf32>, vector<32xf32>, vector<32xf32>) -> vector<32xf32>
// CHECK: llvm.intr.maximum(%{{.*}}, %{{.*}}) : (vector<32xf32>, vector<32xf32>) -> vector<32xf32>
func.func @select(%q: tensor<1x8x32x128xf32>, %k: tensor<1x2x256x128xf32>, %v: tensor<1x2x256x128xf32>)
    -> (tensor<1x8x64x128xf32>, tensor<1x8x64x128xf32>, tensor<1x8x64xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 32 capacity 64
      : (tensor<1x8x32x128xf32>, tensor<1x2x256x128xf32>, tensor<1x2x256x128xf32>)
      -> (tensor<1x8x64x128xf32>, tensor<1x8x64x128xf32>, tensor<1x8x64xi64>)
  return %a, %b, %c : tensor<1x8x64x128xf32>, tensor<1x8x64x128xf32>, tensor<1x8x64xi64>
}
