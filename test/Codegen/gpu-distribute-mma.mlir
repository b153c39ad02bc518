// RUN: snapkv-opt %s --snapkv-gpu-distribute="threads=64 tensor-cores=true" -canonicalize -split-input-file | FileCheck %s
// RUN: snapkv-opt %s --snapkv-gpu-distribute="threads=64 tensor-cores=false" -canonicalize -split-input-file | FileCheck %s --check-prefix=OFF

#qT = affine_map<(b, g, m, n, k) -> (b, g, k, n)>
#keys = affine_map<(b, g, m, n, k) -> (b, m, k)>
#out = affine_map<(b, g, m, n, k) -> (b, m, g, n)>

// A key tile's logits as the formulation lays them out (queries transposed, D before
// the window rows W; keys D innermost; output [keys, heads, rows]), one block per tile:
// 32 keys x (2 heads x 8 rows), D = 32, f16 into f32. With tensor cores the keys are
// split over 2 warps (16 each), the heads are stepped through one at a time, and each
// step is 1 x 2 m16n8k16 contractions with keys as the left operand and f16 operands.
// The output's fill stays a thread loop of its own.
// CHECK-LABEL: func.func @logits(
// CHECK: scf.forall (%{{.*}}) in (2)
// CHECK:   linalg.fill
// CHECK: } {mapping = [#gpu.thread<linear_dim_2>, #gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>]}
// CHECK: scf.forall (%[[W:.*]]) in (2)
// CHECK:   scf.for %{{.*}} = %c0 to %c2 step %c1
// CHECK-COUNT-2: vector.contract {{.*}} : vector<16x16xf16>, vector<16x8xf16> into vector<16x8xf32>
// CHECK-NOT: vector.contract
// CHECK: } {mapping = [#gpu.warp<linear_dim_0>]}
// CHECK: } {mapping = [#gpu.block<x>]}
// Without tensor cores: threads, scalar multiply-adds.
// OFF-LABEL: func.func @logits(
// OFF-NOT: vector.contract
// OFF-NOT: gpu.warp
// OFF: {mapping = [#gpu.block<x>]}
func.func @logits(%q: tensor<2x2x32x8xf16>, %k: tensor<2x32x32xf16>) -> tensor<2x32x2x8xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<2x32x2x8xf32>
  %r = scf.forall (%b) in (2) shared_outs(%o = %init) -> (tensor<2x32x2x8xf32>) {
    %qb = tensor.extract_slice %q[%b, 0, 0, 0] [1, 2, 32, 8] [1, 1, 1, 1] : tensor<2x2x32x8xf16> to tensor<1x2x32x8xf16>
    %kb = tensor.extract_slice %k[%b, 0, 0] [1, 32, 32] [1, 1, 1] : tensor<2x32x32xf16> to tensor<1x32x32xf16>
    %e = tensor.empty() : tensor<1x32x2x8xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x32x2x8xf32>) -> tensor<1x32x2x8xf32>
    %l = linalg.generic {indexing_maps = [#qT, #keys, #out],
                         iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
        ins(%qb, %kb : tensor<1x2x32x8xf16>, tensor<1x32x32xf16>) outs(%f : tensor<1x32x2x8xf32>) {
    ^bb0(%a: f16, %c: f16, %acc: f32):
      %a32 = arith.extf %a : f16 to f32
      %c32 = arith.extf %c : f16 to f32
      %p = arith.mulf %a32, %c32 fastmath<contract> : f32
      %s = arith.addf %acc, %p fastmath<contract> : f32
      linalg.yield %s : f32
    } -> tensor<1x32x2x8xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %l into %o[%b, 0, 0, 0] [1, 32, 2, 8] [1, 1, 1, 1] : tensor<1x32x2x8xf32> into tensor<2x32x2x8xf32>
    }
  } {mapping = [#gpu.block<x>]}
  return %r : tensor<2x32x2x8xf32>
}

// -----

#qT = affine_map<(b, g, m, n, k) -> (b, g, k, n)>
#keys = affine_map<(b, g, m, n, k) -> (b, m, k)>
#out = affine_map<(b, g, m, n, k) -> (b, m, g, n)>

// bf16 the same way (snapkv-gpu-mma-sync lowers the bf16 contractions, gpu-mma-sync.mlir).
// CHECK-LABEL: func.func @bf16_logits(
// CHECK: scf.forall (%{{.*}}) in (2)
// CHECK-COUNT-2: vector.contract {{.*}} : vector<16x16xbf16>, vector<16x8xbf16> into vector<16x8xf32>
// CHECK-NOT: vector.contract
// CHECK: } {mapping = [#gpu.warp<linear_dim_0>]}
func.func @bf16_logits(%q: tensor<1x1x32x8xbf16>, %k: tensor<1x32x32xbf16>) -> tensor<1x32x1x8xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x32x1x8xf32>
  %r = scf.forall (%b) in (1) shared_outs(%o = %init) -> (tensor<1x32x1x8xf32>) {
    %f = linalg.fill ins(%zero : f32) outs(%o : tensor<1x32x1x8xf32>) -> tensor<1x32x1x8xf32>
    %l = linalg.generic {indexing_maps = [#qT, #keys, #out],
                         iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
        ins(%q, %k : tensor<1x1x32x8xbf16>, tensor<1x32x32xbf16>) outs(%f : tensor<1x32x1x8xf32>) {
    ^bb0(%a: bf16, %c: bf16, %acc: f32):
      %a32 = arith.extf %a : bf16 to f32
      %c32 = arith.extf %c : bf16 to f32
      %p = arith.mulf %a32, %c32 fastmath<contract> : f32
      %s = arith.addf %acc, %p fastmath<contract> : f32
      linalg.yield %s : f32
    } -> tensor<1x32x1x8xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %l into %o[0, 0, 0, 0] [1, 32, 1, 8] [1, 1, 1, 1] : tensor<1x32x1x8xf32> into tensor<1x32x1x8xf32>
    }
  } {mapping = [#gpu.block<x>]}
  return %r : tensor<1x32x1x8xf32>
}

// Not for the tensor cores: operands of two types (one MMA multiplies one type), and f16
// with 4 rows (the MMA's columns come in 8s). Both stay scalar thread loops.
// CHECK-LABEL: func.func @mixed_types(
// CHECK-NOT: vector.contract
// CHECK-NOT: gpu.warp
// CHECK: {mapping = [#gpu.block<x>]}
func.func @mixed_types(%q: tensor<1x1x32x8xf16>, %k: tensor<1x32x32xbf16>) -> tensor<1x32x1x8xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x32x1x8xf32>
  %r = scf.forall (%b) in (1) shared_outs(%o = %init) -> (tensor<1x32x1x8xf32>) {
    %f = linalg.fill ins(%zero : f32) outs(%o : tensor<1x32x1x8xf32>) -> tensor<1x32x1x8xf32>
    %l = linalg.generic {indexing_maps = [#qT, #keys, #out],
                         iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
        ins(%q, %k : tensor<1x1x32x8xf16>, tensor<1x32x32xbf16>) outs(%f : tensor<1x32x1x8xf32>) {
    ^bb0(%a: f16, %c: bf16, %acc: f32):
      %a32 = arith.extf %a : f16 to f32
      %c32 = arith.extf %c : bf16 to f32
      %p = arith.mulf %a32, %c32 fastmath<contract> : f32
      %s = arith.addf %acc, %p fastmath<contract> : f32
      linalg.yield %s : f32
    } -> tensor<1x32x1x8xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %l into %o[0, 0, 0, 0] [1, 32, 1, 8] [1, 1, 1, 1] : tensor<1x32x1x8xf32> into tensor<1x32x1x8xf32>
    }
  } {mapping = [#gpu.block<x>]}
  return %r : tensor<1x32x1x8xf32>
}

// CHECK-LABEL: func.func @four_rows(
// CHECK-NOT: vector.contract
// CHECK-NOT: gpu.warp
// CHECK: {mapping = [#gpu.block<x>]}
func.func @four_rows(%q: tensor<1x1x32x4xf16>, %k: tensor<1x32x32xf16>) -> tensor<1x32x1x4xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x32x1x4xf32>
  %r = scf.forall (%b) in (1) shared_outs(%o = %init) -> (tensor<1x32x1x4xf32>) {
    %f = linalg.fill ins(%zero : f32) outs(%o : tensor<1x32x1x4xf32>) -> tensor<1x32x1x4xf32>
    %l = linalg.generic {indexing_maps = [#qT, #keys, #out],
                         iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
        ins(%q, %k : tensor<1x1x32x4xf16>, tensor<1x32x32xf16>) outs(%f : tensor<1x32x1x4xf32>) {
    ^bb0(%a: f16, %c: f16, %acc: f32):
      %a32 = arith.extf %a : f16 to f32
      %c32 = arith.extf %c : f16 to f32
      %p = arith.mulf %a32, %c32 fastmath<contract> : f32
      %s = arith.addf %acc, %p fastmath<contract> : f32
      linalg.yield %s : f32
    } -> tensor<1x32x1x4xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %l into %o[0, 0, 0, 0] [1, 32, 1, 4] [1, 1, 1, 1] : tensor<1x32x1x4xf32> into tensor<1x32x1x4xf32>
    }
  } {mapping = [#gpu.block<x>]}
  return %r : tensor<1x32x1x4xf32>
}

// 1040 keys in one block would need 65 warps (2080 threads, over the 1024 a block can
// have): threads instead.
// CHECK-LABEL: func.func @too_many_warps(
// CHECK-NOT: vector.contract
// CHECK-NOT: gpu.warp
// CHECK: {mapping = [#gpu.block<x>]}
func.func @too_many_warps(%q: tensor<1x1x16x8xf16>, %k: tensor<1x1040x16xf16>) -> tensor<1x1040x1x8xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x1040x1x8xf32>
  %r = scf.forall (%b) in (1) shared_outs(%o = %init) -> (tensor<1x1040x1x8xf32>) {
    %f = linalg.fill ins(%zero : f32) outs(%o : tensor<1x1040x1x8xf32>) -> tensor<1x1040x1x8xf32>
    %l = linalg.generic {indexing_maps = [#qT, #keys, #out],
                         iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
        ins(%q, %k : tensor<1x1x16x8xf16>, tensor<1x1040x16xf16>) outs(%f : tensor<1x1040x1x8xf32>) {
    ^bb0(%a: f16, %c: f16, %acc: f32):
      %a32 = arith.extf %a : f16 to f32
      %c32 = arith.extf %c : f16 to f32
      %p = arith.mulf %a32, %c32 fastmath<contract> : f32
      %s = arith.addf %acc, %p fastmath<contract> : f32
      linalg.yield %s : f32
    } -> tensor<1x1040x1x8xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %l into %o[0, 0, 0, 0] [1, 1040, 1, 8] [1, 1, 1, 1] : tensor<1x1040x1x8xf32> into tensor<1x1040x1x8xf32>
    }
  } {mapping = [#gpu.block<x>]}
  return %r : tensor<1x1040x1x8xf32>
}
