// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-parallelize,snapkv-fuse-parallel-loops,canonicalize,cse))" | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-parallelize,canonicalize,cse))" | FileCheck %s --check-prefix=UNFUSED
// RUN: snapkv-opt %s --split-input-file --snapkv-cpu-pipeline | FileCheck %s --check-prefix=OMP
// RUN: snapkv-opt %s --split-input-file --snapkv-cpu-pipeline="fuse-parallel-loops=false" | FileCheck %s --check-prefix=OMP-UNFUSED

// A decode step's Q, K and V products: each one-row product is split into the
// same 8 parts of its reduction (snapkv-parallelize), and the code between
// them (Q's merge of its parts and what uses it) does not feed K or V. The
// three loops become one, each iteration computing its part of all three;
// the merges follow in their order. One OpenMP region instead of three.
// CHECK-LABEL: func.func @qkv
// CHECK: %[[ALL:.*]]:3 = scf.forall (%[[P:.*]]) in (8) shared_outs(%[[Q:.*]] = %{{.*}}, %[[K:.*]] = %{{.*}}, %[[V:.*]] = %{{.*}})
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<1x72xf32>, tensor<72x576xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<1x72xf32>, tensor<72x192xf32>)
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<1x72xf32>, tensor<72x192xf32>)
// CHECK: scf.forall.in_parallel
// CHECK-NOT: scf.forall
// CHECK: linalg.generic {{.*}} ins(%[[ALL]]#0
// CHECK: math.exp
// CHECK: linalg.generic {{.*}} ins(%[[ALL]]#1
// CHECK: linalg.generic {{.*}} ins(%[[ALL]]#2
// UNFUSED-LABEL: func.func @qkv
// UNFUSED-COUNT-3: scf.forall (%{{.*}}) in (8)
// OMP-LABEL: llvm.func @qkv
// OMP-COUNT-1: omp.parallel
// OMP-NOT: omp.parallel
// OMP: llvm.return
// OMP-UNFUSED-LABEL: llvm.func @qkv
// OMP-UNFUSED-COUNT-3: omp.parallel
// OMP-UNFUSED-NOT: omp.parallel
// OMP-UNFUSED: llvm.return
func.func @qkv(%x: tensor<1x576xf32>, %wq: tensor<576x576xf32>, %wk: tensor<576x192xf32>, %wv: tensor<576x192xf32>) -> (tensor<1x576xf32>, tensor<1x192xf32>, tensor<1x192xf32>) {
  %zero = arith.constant 0.0 : f32
  %eq = tensor.empty() : tensor<1x576xf32>
  %iq = linalg.fill ins(%zero : f32) outs(%eq : tensor<1x576xf32>) -> tensor<1x576xf32>
  %q = linalg.matmul ins(%x, %wq : tensor<1x576xf32>, tensor<576x576xf32>) outs(%iq : tensor<1x576xf32>) -> tensor<1x576xf32>
  %eq2 = tensor.empty() : tensor<1x576xf32>
  %q2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%q : tensor<1x576xf32>) outs(%eq2 : tensor<1x576xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  } -> tensor<1x576xf32>
  %ek = tensor.empty() : tensor<1x192xf32>
  %ik = linalg.fill ins(%zero : f32) outs(%ek : tensor<1x192xf32>) -> tensor<1x192xf32>
  %k = linalg.matmul ins(%x, %wk : tensor<1x576xf32>, tensor<576x192xf32>) outs(%ik : tensor<1x192xf32>) -> tensor<1x192xf32>
  %v = linalg.matmul ins(%x, %wv : tensor<1x576xf32>, tensor<576x192xf32>) outs(%ik : tensor<1x192xf32>) -> tensor<1x192xf32>
  return %q2, %k, %v : tensor<1x576xf32>, tensor<1x192xf32>, tensor<1x192xf32>
}

// -----

// The second product reads the first's result (an MLP's down projection after
// its up projection): it must wait for the whole first loop, so the two stay
// apart.
// CHECK-LABEL: func.func @dependent
// CHECK-COUNT-2: scf.forall (%{{.*}}) in (8)
func.func @dependent(%x: tensor<1x576xf32>, %w1: tensor<576x576xf32>, %w2: tensor<576x576xf32>) -> tensor<1x576xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x576xf32>
  %i = linalg.fill ins(%zero : f32) outs(%e : tensor<1x576xf32>) -> tensor<1x576xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<1x576xf32>, tensor<576x576xf32>) outs(%i : tensor<1x576xf32>) -> tensor<1x576xf32>
  %y = linalg.matmul ins(%h, %w2 : tensor<1x576xf32>, tensor<576x576xf32>) outs(%i : tensor<1x576xf32>) -> tensor<1x576xf32>
  return %y : tensor<1x576xf32>
}

// -----

// Different iterations (8 parts of one reduction, 4 of the other): not fused.
// CHECK-LABEL: func.func @bounds
// CHECK: scf.forall (%{{.*}}) in (8)
// CHECK: scf.forall (%{{.*}}) in (4)
func.func @bounds(%x: tensor<1x576xf32>, %y: tensor<1x128xf32>, %w1: tensor<576x64xf32>, %w2: tensor<128x64xf32>) -> (tensor<1x64xf32>, tensor<1x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x64xf32>
  %i = linalg.fill ins(%zero : f32) outs(%e : tensor<1x64xf32>) -> tensor<1x64xf32>
  %a = linalg.matmul ins(%x, %w1 : tensor<1x576xf32>, tensor<576x64xf32>) outs(%i : tensor<1x64xf32>) -> tensor<1x64xf32>
  %b = linalg.matmul ins(%y, %w2 : tensor<1x128xf32>, tensor<128x64xf32>) outs(%i : tensor<1x64xf32>) -> tensor<1x64xf32>
  return %a, %b : tensor<1x64xf32>, tensor<1x64xf32>
}

// -----

// A write to memory between the loops (a decode step's in-place cache append)
// is not moved across: the loops stay apart.
// CHECK-LABEL: func.func @write_between
// CHECK: scf.forall (%{{.*}}) in (8)
// CHECK: bufferization.materialize_in_destination
// CHECK: scf.forall (%{{.*}}) in (8)
func.func @write_between(%x: tensor<1x576xf32>, %w1: tensor<576x64xf32>, %w2: tensor<576x64xf32>, %row: tensor<4xf32>, %cache: memref<4xf32>) -> (tensor<1x64xf32>, tensor<1x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x64xf32>
  %i = linalg.fill ins(%zero : f32) outs(%e : tensor<1x64xf32>) -> tensor<1x64xf32>
  %a = linalg.matmul ins(%x, %w1 : tensor<1x576xf32>, tensor<576x64xf32>) outs(%i : tensor<1x64xf32>) -> tensor<1x64xf32>
  bufferization.materialize_in_destination %row in writable %cache : (tensor<4xf32>, memref<4xf32>) -> ()
  %b = linalg.matmul ins(%x, %w2 : tensor<1x576xf32>, tensor<576x64xf32>) outs(%i : tensor<1x64xf32>) -> tensor<1x64xf32>
  return %a, %b : tensor<1x64xf32>, tensor<1x64xf32>
}

// -----

// Loops that write memory themselves are left alone.
// CHECK-LABEL: func.func @writing_loops
// CHECK-COUNT-2: scf.forall (%{{.*}}) in (8)
func.func @writing_loops(%m: memref<8xf32>, %t: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %one = arith.constant 1.0 : f32
  %a = scf.forall (%i) in (8) shared_outs(%o = %t) -> (tensor<8xf32>) {
    memref.store %one, %m[%i] : memref<8xf32>
    %s = tensor.extract_slice %o[%i] [1] [1] : tensor<8xf32> to tensor<1xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %s into %o[%i] [1] [1] : tensor<1xf32> into tensor<8xf32>
    }
  }
  %b = scf.forall (%i) in (8) shared_outs(%o = %t) -> (tensor<8xf32>) {
    memref.store %one, %m[%i] : memref<8xf32>
    %s = tensor.extract_slice %o[%i] [1] [1] : tensor<8xf32> to tensor<1xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %s into %o[%i] [1] [1] : tensor<1xf32> into tensor<8xf32>
    }
  }
  return %a, %b : tensor<8xf32>, tensor<8xf32>
}
