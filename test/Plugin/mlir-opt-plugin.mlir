// An ASan-instrumented plugin cannot load into Debian's uninstrumented mlir-opt.
// UNSUPPORTED: asan

// Debian's own mlir-opt (not snapkv-opt) parses snapkv IR and runs the snapkv
// passes once the plugin is loaded. Plugin passes are registered after
// mlir-opt has built its command line, so they are named in --pass-pipeline.
// RUN: mlir-opt %s --load-dialect-plugin=%snapkv_plugin --load-pass-plugin=%snapkv_plugin | FileCheck %s --check-prefix=PARSE
// RUN: mlir-opt %s --load-dialect-plugin=%snapkv_plugin --load-pass-plugin=%snapkv_plugin --pass-pipeline="builtin.module(convert-snapkv-to-linalg)" | FileCheck %s --check-prefix=LOWER
// RUN: mlir-opt %s --load-dialect-plugin=%snapkv_plugin --load-pass-plugin=%snapkv_plugin --pass-pipeline="builtin.module(snapkv-report-cache{prompt-length=8})" -o /dev/null | FileCheck %s --check-prefix=LEDGER
// RUN: mlir-opt %s --load-dialect-plugin=%snapkv_plugin --load-pass-plugin=%snapkv_plugin --pass-pipeline="builtin.module(snapkv-cpu-pipeline)" | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s --check-prefix=EXEC
// Without the plugin the dialect is unknown.
// RUN: not mlir-opt %s 2>&1 | FileCheck %s --check-prefix=NOPLUGIN

// PARSE: snapkv.select %{{.*}}, %{{.*}}, %{{.*}} window 2 capacity 5 kernel 3 :
// LOWER-NOT: snapkv.select
// LOWER: linalg.generic
// LEDGER: total: 1 layers, full 128 B, compacted 80 B (0.6250 of full)
// EXEC: [2, 3, 4, 6, 7]
// NOPLUGIN: Dialect `snapkv' not found for custom op 'snapkv.select'

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}

func.func @main() {
  // The seed's worked example: logits ln a_j / ln b_j for the two window queries.
  %q = arith.constant dense<[[[[1.41421354, 0.0], [0.0, 1.41421354]]]]> : tensor<1x1x2x2xf32>
  %k = arith.constant dense<[[[[0.0, 0.0], [0.693147182, 0.0], [2.30258512, 2.07944155], [2.07944155, 2.48490667], [0.0, 0.0], [0.0, 0.0], [0.693147182, 0.0], [0.0, 0.0]]]]> : tensor<1x1x8x2xf32>
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 5 kernel 3
      : (tensor<1x1x2x2xf32>, tensor<1x1x8x2xf32>, tensor<1x1x8x2xf32>)
      -> (tensor<1x1x5x2xf32>, tensor<1x1x5x2xf32>, tensor<1x1x5xi64>)
  %m = bufferization.to_buffer %idx : tensor<1x1x5xi64> to memref<1x1x5xi64>
  %u = memref.cast %m : memref<1x1x5xi64> to memref<*xi64>
  call @printMemrefI64(%u) : (memref<*xi64>) -> ()
  return
}
