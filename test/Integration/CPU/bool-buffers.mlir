// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// i1 tensors become one-byte-per-element buffers. A constant mask read with
// vector loads, a mask computed into a buffer of its own (vector stores) and
// read back, and the scalar element read of the same buffer must all agree.

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

func.func @print(%t: tensor<40xf32>) {
  %m = bufferization.to_buffer %t : tensor<40xf32> to memref<40xf32>
  %u = memref.cast %m : memref<40xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}

#id = affine_map<(i) -> (i)>
func.func @main() {
  %x = arith.constant dense<[1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 4.0, -4.0, 5.0, -5.0,
                             6.0, 6.0, -6.0, -6.0, 7.0, 7.0, -7.0, -7.0, 8.0, 8.0,
                             1.0, 1.0, 1.0, -1.0, -1.0, -1.0, 2.0, 2.0, 2.0, -2.0,
                             -2.0, -2.0, 3.0, -3.0, 3.0, -3.0, 4.0, 4.0, -4.0, 4.0]> : tensor<40xf32>
  %keep = arith.constant dense<[true, false, false, true, true, true, false, false,
                                true, false, true, true, true, true, false, false,
                                false, true, false, true, true, false, true, false,
                                true, false, true, false, false, true, true, true,
                                false, false, false, true, true, false, true, false]> : tensor<40xi1>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<40xi1>
  %pos = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<40xf32>) outs(%e : tensor<40xi1>) {
  ^bb0(%a: f32, %o: i1):
    %c = arith.cmpf ogt, %a, %zero : f32
    linalg.yield %c : i1
  } -> tensor<40xi1>
  %f = tensor.empty() : tensor<40xf32>
  // x where keep and x > 0, else 0.
  %r = linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %keep, %pos : tensor<40xf32>, tensor<40xi1>, tensor<40xi1>) outs(%f : tensor<40xf32>) {
  ^bb0(%a: f32, %k: i1, %p: i1, %o: f32):
    %both = arith.andi %k, %p : i1
    %v = arith.select %both, %a, %zero : f32
    linalg.yield %v : f32
  } -> tensor<40xf32>
  // CHECK: [1, 0, 0, 0, 3, 0, 0, 0, 5, 0, 6, 6, 0, 0, 0, 0, 0, 0, 0, 8, 1, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0]
  call @print(%r) : (tensor<40xf32>) -> ()
  return
}
