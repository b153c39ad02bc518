// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// bf16 inputs (docs/semantics.md, "Precision"): Q, K, V in bf16; logits, softmax, votes and pooled scores
// in f32; gathered K/V rows are bit-identical copies of the input rows. Rows are printed with
// printMemrefBF16 and as raw bits (bitcast to i16, zero-extended to i32: unsigned patterns).
// values[j] = [j.1, -j.1] as parsed into bf16, e.g. bf16(2.1) = 2.09375 = 0x4006 = 16390,
// bf16(-2.1) = 0xC006 = 49158.

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}
func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefBF16(memref<*xbf16>) attributes {llvm.emit_c_interface}

func.func @print_idx(%t: tensor<1x1x?xi64>) {
  %u = tensor.cast %t : tensor<1x1x?xi64> to tensor<*xi64>
  %m = bufferization.to_buffer %u : tensor<*xi64> to memref<*xi64>
  call @printMemrefI64(%m) : (memref<*xi64>) -> ()
  return
}

// Prints the rows, then their bit patterns.
func.func @print_rows(%t: tensor<1x1x?x2xbf16>) {
  %u = tensor.cast %t : tensor<1x1x?x2xbf16> to tensor<*xbf16>
  %m = bufferization.to_buffer %u : tensor<*xbf16> to memref<*xbf16>
  call @printMemrefBF16(%m) : (memref<*xbf16>) -> ()
  %b = arith.bitcast %t : tensor<1x1x?x2xbf16> to tensor<1x1x?x2xi16>
  %e = arith.extui %b : tensor<1x1x?x2xi16> to tensor<1x1x?x2xi32>
  %eu = tensor.cast %e : tensor<1x1x?x2xi32> to tensor<*xi32>
  %em = bufferization.to_buffer %eu : tensor<*xi32> to memref<*xi32>
  call @printMemrefI32(%em) : (memref<*xi32>) -> ()
  return
}

func.func @main() {
  // Case 1: the seed's worked example (worked_example.mlir) in bf16. Inputs rounded to bf16:
  // sqrt2 -> 1.4140625, ln 2 -> 0.69140625, ln 8 -> 2.078125, ln 10 -> 2.296875,
  // ln 12 -> 2.484375 (bits 0x3F31 = 16177, 0x4005 = 16389, 0x4013 = 16403, 0x401F = 16415).
  // The exp-weights move by < 1% (e.g. 1.4140625 * 2.296875 / sqrt2 = 2.29663, exp = 9.941);
  // pooled scores [0.0657, 0.3012, 0.5357, 0.5224, 0.3131, 0.0524] -> [2, 3, 4] + [6, 7].
  %q = arith.constant dense<[[[[1.4140625, 0.0], [0.0, 1.4140625]]]]> : tensor<1x1x2x2xbf16>
  %k = arith.constant dense<[[[[0.0, 0.0], [0.69140625, 0.0], [2.296875, 2.078125],
                               [2.078125, 2.484375], [0.0, 0.0], [0.0, 0.0],
                               [0.69140625, 0.0], [0.0, 0.0]]]]> : tensor<1x1x8x2xbf16>
  %v = arith.constant dense<[[[[0.1, -0.1], [1.1, -1.1], [2.1, -2.1], [3.1, -3.1],
                               [4.1, -4.1], [5.1, -5.1], [6.1, -6.1], [7.1, -7.1]]]]> : tensor<1x1x8x2xbf16>
  %k1, %v1, %i1 = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3
    : (tensor<1x1x2x2xbf16>, tensor<1x1x8x2xbf16>, tensor<1x1x8x2xbf16>)
    -> (tensor<1x1x5x2xbf16>, tensor<1x1x5x2xbf16>, tensor<1x1x5xi64>)
  %i1d = tensor.cast %i1 : tensor<1x1x5xi64> to tensor<1x1x?xi64>
  %k1d = tensor.cast %k1 : tensor<1x1x5x2xbf16> to tensor<1x1x?x2xbf16>
  %v1d = tensor.cast %v1 : tensor<1x1x5x2xbf16> to tensor<1x1x?x2xbf16>
  // CHECK: sizes = [1, 1, 5]
  // CHECK-NEXT: {{^\[\[\[}}2, 3, 4, 6, 7]]]
  call @print_idx(%i1d) : (tensor<1x1x?xi64>) -> ()
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2.29688, 2.07812],
  // CHECK-NEXT: {{^}}   [2.07812, 2.48438],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [0.691406, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}16403, 16389],
  // CHECK-NEXT: {{^}}   [16389, 16415],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [16177, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  call @print_rows(%k1d) : (tensor<1x1x?x2xbf16>) -> ()
  // Values rows 2, 3, 4, 6, 7: bf16(2.1) = 0x4006 = 16390, bf16(3.1) = 0x4046 = 16454,
  // bf16(4.1) = 0x4083 = 16515, bf16(6.1) = 0x40C3 = 16579, bf16(7.1) = 0x40E3 = 16611;
  // negatives have the sign bit 0x8000 added.
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2.09375, -2.09375],
  // CHECK-NEXT: {{^}}   [3.09375, -3.09375],
  // CHECK-NEXT: {{^}}   [4.09375, -4.09375],
  // CHECK-NEXT: {{^}}   [6.09375, -6.09375],
  // CHECK-NEXT: {{^}}   [7.09375, -7.09375]]]]
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}16390, 49158],
  // CHECK-NEXT: {{^}}   [16454, 49222],
  // CHECK-NEXT: {{^}}   [16515, 49283],
  // CHECK-NEXT: {{^}}   [16579, 49347],
  // CHECK-NEXT: {{^}}   [16611, 49379]]]]
  call @print_rows(%v1d) : (tensor<1x1x?x2xbf16>) -> ()

  // Case 2: logits are computed in f32, not bf16. W = 1, L = 3, P = 2, C = 2 (one prefix
  // position kept), kernel 1, `scale 1.0`. q = [1, 1], keys [2, 0], [2, 2^-8], [0, 0].
  // Logits 2 and 2 + 2^-8 = 2.00390625 (exact in f32) -> position 1 has the larger vote and is
  // kept: [1, 2]. In bf16, 2.00390625 lies exactly halfway between 2 and the next bf16
  // (2.0078125) and rounds to even, 2.0: a lowering that rounds logits to bf16 sees an exact
  // tie and keeps position 0.
  %q2 = arith.constant dense<[[[[1.0, 1.0]]]]> : tensor<1x1x1x2xbf16>
  %k2 = arith.constant dense<[[[[2.0, 0.0], [2.0, 0.00390625], [0.0, 0.0]]]]> : tensor<1x1x3x2xbf16>
  %v2 = arith.constant dense<[[[[0.1, -0.1], [1.1, -1.1], [2.1, -2.1]]]]> : tensor<1x1x3x2xbf16>
  %k2o, %v2o, %i2 = snapkv.select %q2, %k2, %v2 window 1 capacity 2 kernel 1 scale 1.0
    : (tensor<1x1x1x2xbf16>, tensor<1x1x3x2xbf16>, tensor<1x1x3x2xbf16>)
    -> (tensor<1x1x2x2xbf16>, tensor<1x1x2x2xbf16>, tensor<1x1x2xi64>)
  %i2d = tensor.cast %i2 : tensor<1x1x2xi64> to tensor<1x1x?xi64>
  %k2d = tensor.cast %k2o : tensor<1x1x2x2xbf16> to tensor<1x1x?x2xbf16>
  %v2d = tensor.cast %v2o : tensor<1x1x2x2xbf16> to tensor<1x1x?x2xbf16>
  // CHECK: sizes = [1, 1, 2]
  // CHECK-NEXT: {{^\[\[\[}}1, 2]]]
  call @print_idx(%i2d) : (tensor<1x1x?xi64>) -> ()
  // keys rows 1, 2: bf16(2.0) = 0x4000 = 16384, bf16(2^-8) = 0x3B80 = 15232
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2, 0.00390625],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}16384, 15232],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  call @print_rows(%k2d) : (tensor<1x1x?x2xbf16>) -> ()
  // bf16(1.1) = 1.1015625 = 0x3F8D = 16269 (-1.1: 49037), bf16(2.1) = 16390 (-2.1: 49158)
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1.10156, -1.10156],
  // CHECK-NEXT: {{^}}   [2.09375, -2.09375]]]]
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}16269, 49037],
  // CHECK-NEXT: {{^}}   [16390, 49158]]]]
  call @print_rows(%v2d) : (tensor<1x1x?x2xbf16>) -> ()
  return
}
