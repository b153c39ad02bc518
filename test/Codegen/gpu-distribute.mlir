// RUN: snapkv-opt %s --snapkv-gpu-distribute=threads=64 -canonicalize -split-input-file | FileCheck %s
// RUN: snapkv-opt %s --snapkv-gpu-distribute=threads=64 -split-input-file --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s --check-prefix=EXEC
// RUN: not snapkv-opt %s --snapkv-gpu-distribute=threads=0 -split-input-file 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: snapkv-gpu-distribute: threads must be in [1, 1024], got 0

#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// One block per row. Inside it: a count over a long (dynamic) row with a single output
// becomes a partial reduction (each of the 64 threads counts a contiguous chunk, the 64
// counts are merged in thread order by one thread); an elementwise op over the row is
// split over the 64 threads; a pad becomes a fill and a copy, split as well.
// CHECK-LABEL: func.func @block(
// CHECK: scf.forall (%[[B:.*]]) in (2)
// Partial counts: a [1, 64] array, zeroed, then one chunk per thread.
// CHECK: scf.forall (%{{.*}}) in (64) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x64xi32>)
// CHECK:   linalg.fill
// CHECK: } {mapping = [#gpu.thread<linear_dim_0>]}
// CHECK: scf.forall (%[[T:.*]]) in (64) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x64xi32>)
// CHECK:   linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// CHECK: } {mapping = [#gpu.thread<linear_dim_0>]}
// The merge, in one thread, its init fill fused.
// CHECK: scf.forall (%{{.*}}) in (1) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1xi32>)
// CHECK:   linalg.fill
// CHECK:   linalg.reduce
// CHECK: } {mapping = [#gpu.thread<linear_dim_0>]}
// The elementwise op over the row: 64 threads.
// CHECK: scf.forall (%{{.*}}) in (64) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<1x?xf32>)
// CHECK:   arith.mulf
// CHECK: } {mapping = [#gpu.thread<linear_dim_0>]}
// The pad: a fill of the padded row, then a copy into its interior, both over threads.
// CHECK: scf.forall (%{{.*}}) in (64) {{.*}} -> (tensor<1x?xf32>)
// CHECK:   linalg.fill
// CHECK: scf.forall (%{{.*}}) in (64) {{.*}} -> (tensor<1x?xf32>)
// CHECK:   linalg.copy
// CHECK: } {mapping = [#gpu.block<x>]}
func.func @block(%x: tensor<2x?xi32>) -> (tensor<2xi32>, tensor<2x?xf32>) {
  %c1 = arith.constant 1 : index
  %c0_i32 = arith.constant 0 : i32
  %zero = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : f32
  %n = tensor.dim %x, %c1 : tensor<2x?xi32>
  %n2 = arith.addi %n, %c1 : index
  %counts = tensor.empty() : tensor<2xi32>
  %rows = tensor.empty(%n2) : tensor<2x?xf32>
  %r:2 = scf.forall (%b) in (2) shared_outs(%o = %counts, %p = %rows) -> (tensor<2xi32>, tensor<2x?xf32>) {
    %xs = tensor.extract_slice %x[%b, 0] [1, %n] [1, 1] : tensor<2x?xi32> to tensor<1x?xi32>
    %e = tensor.empty() : tensor<1xi32>
    %f = linalg.fill ins(%c0_i32 : i32) outs(%e : tensor<1xi32>) -> tensor<1xi32>
    %count = linalg.generic {indexing_maps = [#id2, #row], iterator_types = ["parallel", "reduction"]}
        ins(%xs : tensor<1x?xi32>) outs(%f : tensor<1xi32>) {
    ^bb0(%a: i32, %acc: i32):
      %one = arith.constant 1 : i32
      %odd = arith.andi %a, %one : i32
      %s = arith.addi %acc, %odd : i32
      linalg.yield %s : i32
    } -> tensor<1xi32>
    %ef = tensor.empty(%n) : tensor<1x?xf32>
    %scaled = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%xs : tensor<1x?xi32>) outs(%ef : tensor<1x?xf32>) {
    ^bb0(%a: i32, %out: f32):
      %fa = arith.sitofp %a : i32 to f32
      %m = arith.mulf %fa, %half : f32
      linalg.yield %m : f32
    } -> tensor<1x?xf32>
    %padded = tensor.pad %scaled low[0, 1] high[0, 0] {
    ^bb0(%i: index, %j: index):
      tensor.yield %zero : f32
    } : tensor<1x?xf32> to tensor<1x?xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %count into %o[%b] [1] [1] : tensor<1xi32> into tensor<2xi32>
      tensor.parallel_insert_slice %padded into %p[%b, 0] [1, %n2] [1, 1] : tensor<1x?xf32> into tensor<2x?xf32>
    }
  } {mapping = [#gpu.block<x>]}
  return %r#0, %r#1 : tensor<2xi32>, tensor<2x?xf32>
}

// The distributed block runs on the CPU (the emulation): 300 values per row, so every
// thread handles several; row 0 counts the odd numbers of 0..299, row 1 of 1..300.
// EXEC: sizes = [2]
// EXEC-NEXT: [150, 150]
// EXEC: sizes = [2, 301]
// EXEC-NEXT: {{^\[\[}}0, 0, 0.5, 1, 1.5, 2,
// EXEC: 148.5, 149, 149.5],
// EXEC-NEXT: {{^}} [0, 0.5, 1, 1.5, 2, 2.5,
// EXEC: 149, 149.5, 150]]
func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}
func.func @main() {
  %init = tensor.empty() : tensor<2x300xi32>
  %x = linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]}
      outs(%init : tensor<2x300xi32>) {
  ^bb0(%out: i32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %s = arith.addi %i, %j : index
    %v = arith.index_cast %s : index to i32
    linalg.yield %v : i32
  } -> tensor<2x300xi32>
  %xd = tensor.cast %x : tensor<2x300xi32> to tensor<2x?xi32>
  %counts, %rows = call @block(%xd) : (tensor<2x?xi32>) -> (tensor<2xi32>, tensor<2x?xf32>)
  %cm = bufferization.to_buffer %counts : tensor<2xi32> to memref<2xi32>
  %cu = memref.cast %cm : memref<2xi32> to memref<*xi32>
  call @printMemrefI32(%cu) : (memref<*xi32>) -> ()
  %rm = bufferization.to_buffer %rows : tensor<2x?xf32> to memref<2x?xf32>
  %ru = memref.cast %rm : memref<2x?xf32> to memref<*xf32>
  call @printMemrefF32(%ru) : (memref<*xf32>) -> ()
  return
}
