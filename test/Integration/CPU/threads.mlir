// RUN: snapkv-opt %s --snapkv-cpu-pipeline > %t.ll.mlir
// RUN: env OMP_NUM_THREADS=1 mlir-runner %t.ll.mlir -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | sed -e "s/base@ = 0x[0-9a-f]*//" > %t.1
// RUN: env OMP_NUM_THREADS=2 mlir-runner %t.ll.mlir -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | sed -e "s/base@ = 0x[0-9a-f]*//" > %t.2
// RUN: env OMP_NUM_THREADS=3 mlir-runner %t.ll.mlir -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | sed -e "s/base@ = 0x[0-9a-f]*//" > %t.3
// RUN: diff %t.1 %t.2
// RUN: diff %t.1 %t.3
// RUN: FileCheck %s < %t.1

// The parallel loops of --snapkv-cpu-pipeline split work, and a reduction
// only into a fixed number of parts added in order: the indices, the gathered
// rows (as raw bits), the votes and pooled scores (as raw bits) and a one-row
// vector x matrix product (a decode step's projection, whose 576-step
// reduction snapkv-parallelize splits into 8 parts; raw bits) are identical
// with 1, 2 and 3 OpenMP threads (the buffer addresses printMemref prints are
// removed before comparing). L = 700 gives 10 full key tiles and a partial
// one, and several compaction chunks.
// CHECK: sizes = [1, 4, 96]
// CHECK: sizes = [1, 4, 96, 16]
// CHECK: sizes = [1, 4, 668]
// CHECK: sizes = [1, 4, 668]
// CHECK: sizes = [1, 192]

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}
func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}

#id4 = affine_map<(a, b, c, d) -> (a, b, c, d)>

// sin/cos of integer arguments: deterministic, irregular inputs.
func.func @fill(%e: tensor<1x?x?x16xf32>, %salt: f32) -> tensor<1x?x?x16xf32> {
  %r = linalg.generic {indexing_maps = [#id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      outs(%e : tensor<1x?x?x16xf32>) {
  ^bb0(%o: f32):
    %i1 = linalg.index 1 : index
    %i2 = linalg.index 2 : index
    %i3 = linalg.index 3 : index
    %c97 = arith.constant 97 : index
    %c13 = arith.constant 13 : index
    %a = arith.muli %i2, %c97 : index
    %b = arith.muli %i3, %c13 : index
    %s0 = arith.addi %a, %b : index
    %s = arith.addi %s0, %i1 : index
    %n = arith.index_cast %s : index to i32
    %f = arith.sitofp %n : i32 to f32
    %g = arith.mulf %f, %salt : f32
    %x = math.sin %g : f32
    linalg.yield %x : f32
  } -> tensor<1x?x?x16xf32>
  return %r : tensor<1x?x?x16xf32>
}

func.func @fill2(%e: tensor<?x?xf32>, %salt: f32) -> tensor<?x?xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(a, b) -> (a, b)>], iterator_types = ["parallel", "parallel"]}
      outs(%e : tensor<?x?xf32>) {
  ^bb0(%o: f32):
    %i0 = linalg.index 0 : index
    %i1 = linalg.index 1 : index
    %c31 = arith.constant 31 : index
    %a = arith.muli %i0, %c31 : index
    %s = arith.addi %a, %i1 : index
    %n = arith.index_cast %s : index to i32
    %f = arith.sitofp %n : i32 to f32
    %g = arith.mulf %f, %salt : f32
    %x = math.cos %g : f32
    linalg.yield %x : f32
  } -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}

func.func @main() {
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c32 = arith.constant 32 : index
  %c700 = arith.constant 700 : index
  %eq = tensor.empty(%c4, %c32) : tensor<1x?x?x16xf32>
  %ek = tensor.empty(%c2, %c700) : tensor<1x?x?x16xf32>
  %s1 = arith.constant 0.37 : f32
  %s2 = arith.constant 0.71 : f32
  %s3 = arith.constant 1.13 : f32
  %q0 = func.call @fill(%eq, %s1) : (tensor<1x?x?x16xf32>, f32) -> tensor<1x?x?x16xf32>
  %k0 = func.call @fill(%ek, %s2) : (tensor<1x?x?x16xf32>, f32) -> tensor<1x?x?x16xf32>
  %v0 = func.call @fill(%ek, %s3) : (tensor<1x?x?x16xf32>, f32) -> tensor<1x?x?x16xf32>
  %q = tensor.cast %q0 : tensor<1x?x?x16xf32> to tensor<1x4x32x16xf32>
  %k = tensor.cast %k0 : tensor<1x?x?x16xf32> to tensor<1x2x700x16xf32>
  %v = tensor.cast %v0 : tensor<1x?x?x16xf32> to tensor<1x2x700x16xf32>
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 32 capacity 96
    : (tensor<1x4x32x16xf32>, tensor<1x2x700x16xf32>, tensor<1x2x700x16xf32>)
    -> (tensor<1x4x96x16xf32>, tensor<1x4x96x16xf32>, tensor<1x4x96xi64>)
  %im = bufferization.to_buffer %idx : tensor<1x4x96xi64> to memref<1x4x96xi64>
  %iu = memref.cast %im : memref<1x4x96xi64> to memref<*xi64>
  call @printMemrefI64(%iu) : (memref<*xi64>) -> ()
  %kb = arith.bitcast %ko : tensor<1x4x96x16xf32> to tensor<1x4x96x16xi32>
  %km = bufferization.to_buffer %kb : tensor<1x4x96x16xi32> to memref<1x4x96x16xi32>
  %ku = memref.cast %km : memref<1x4x96x16xi32> to memref<*xi32>
  call @printMemrefI32(%ku) : (memref<*xi32>) -> ()
  %s1_votes = tensor.empty() : tensor<1x4x668xf32>
  %s1_pooled = tensor.empty() : tensor<1x4x668xf32>
  %votes, %pooled = snapkv.score %q, %k window 32
    outs(%s1_votes, %s1_pooled : tensor<1x4x668xf32>, tensor<1x4x668xf32>)
    : (tensor<1x4x32x16xf32>, tensor<1x2x700x16xf32>) -> (tensor<1x4x668xf32>, tensor<1x4x668xf32>)
  %vb = arith.bitcast %votes : tensor<1x4x668xf32> to tensor<1x4x668xi32>
  %vm = bufferization.to_buffer %vb : tensor<1x4x668xi32> to memref<1x4x668xi32>
  %vu = memref.cast %vm : memref<1x4x668xi32> to memref<*xi32>
  call @printMemrefI32(%vu) : (memref<*xi32>) -> ()
  %pb = arith.bitcast %pooled : tensor<1x4x668xf32> to tensor<1x4x668xi32>
  %pm = bufferization.to_buffer %pb : tensor<1x4x668xi32> to memref<1x4x668xi32>
  %pu = memref.cast %pm : memref<1x4x668xi32> to memref<*xi32>
  call @printMemrefI32(%pu) : (memref<*xi32>) -> ()
  %c1 = arith.constant 1 : index
  %c192 = arith.constant 192 : index
  %c576 = arith.constant 576 : index
  %ex = tensor.empty(%c1, %c576) : tensor<?x?xf32>
  %ew = tensor.empty(%c576, %c192) : tensor<?x?xf32>
  %x0 = func.call @fill2(%ex, %s1) : (tensor<?x?xf32>, f32) -> tensor<?x?xf32>
  %w0 = func.call @fill2(%ew, %s2) : (tensor<?x?xf32>, f32) -> tensor<?x?xf32>
  %x = tensor.cast %x0 : tensor<?x?xf32> to tensor<1x576xf32>
  %w = tensor.cast %w0 : tensor<?x?xf32> to tensor<576x192xf32>
  %zero = arith.constant 0.0 : f32
  %ey = tensor.empty() : tensor<1x192xf32>
  %y0 = linalg.fill ins(%zero : f32) outs(%ey : tensor<1x192xf32>) -> tensor<1x192xf32>
  %y = linalg.matmul ins(%x, %w : tensor<1x576xf32>, tensor<576x192xf32>)
                     outs(%y0 : tensor<1x192xf32>) -> tensor<1x192xf32>
  %yb = arith.bitcast %y : tensor<1x192xf32> to tensor<1x192xi32>
  %ym = bufferization.to_buffer %yb : tensor<1x192xi32> to memref<1x192xi32>
  %yu = memref.cast %ym : memref<1x192xi32> to memref<*xi32>
  call @printMemrefI32(%yu) : (memref<*xi32>) -> ()
  return
}
