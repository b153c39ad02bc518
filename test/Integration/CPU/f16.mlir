// RUN: snapkv-opt %s --snapkv-cpu-pipeline | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_runner_utils,%mlir_c_runner_utils,%openmp_runtime | FileCheck %s

// f16 inputs (docs/semantics.md, "Precision"): Q, K, V in f16; logits, softmax, votes and pooled scores in
// f32; gathered K/V rows are bit-identical copies of the input rows. Rows are printed with
// printMemrefF16 and as raw bits (bitcast to i16, zero-extended to i32: unsigned bit patterns).
// values[j] = [j.1, -j.1] as parsed into f16, e.g. f16(2.1) = 2.099609375 = 0x4033 = 16435,
// f16(-2.1) = 0xC033 = 49203, f16(4.1) = 4.1015625 = 0x441A = 17434.

func.func private @printMemrefI64(memref<*xi64>) attributes {llvm.emit_c_interface}
func.func private @printMemrefI32(memref<*xi32>) attributes {llvm.emit_c_interface}
func.func private @printMemrefF16(memref<*xf16>) attributes {llvm.emit_c_interface}

func.func @print_idx(%t: tensor<1x1x?xi64>) {
  %u = tensor.cast %t : tensor<1x1x?xi64> to tensor<*xi64>
  %m = bufferization.to_buffer %u : tensor<*xi64> to memref<*xi64>
  call @printMemrefI64(%m) : (memref<*xi64>) -> ()
  return
}

// Prints the rows, then their bit patterns.
func.func @print_rows(%t: tensor<1x1x?x2xf16>) {
  %u = tensor.cast %t : tensor<1x1x?x2xf16> to tensor<*xf16>
  %m = bufferization.to_buffer %u : tensor<*xf16> to memref<*xf16>
  call @printMemrefF16(%m) : (memref<*xf16>) -> ()
  %b = arith.bitcast %t : tensor<1x1x?x2xf16> to tensor<1x1x?x2xi16>
  %e = arith.extui %b : tensor<1x1x?x2xi16> to tensor<1x1x?x2xi32>
  %eu = tensor.cast %e : tensor<1x1x?x2xi32> to tensor<*xi32>
  %em = bufferization.to_buffer %eu : tensor<*xi32> to memref<*xi32>
  call @printMemrefI32(%em) : (memref<*xi32>) -> ()
  return
}

func.func @main() {
  // Case 1: the seed's worked example (worked_example.mlir) in f16. Inputs rounded to f16:
  // sqrt2 -> 1.4140625, ln 2 -> 0.693359375, ln 8 -> 2.080078125, ln 10 -> 2.302734375,
  // ln 12 -> 2.484375 (bits 0x398C = 14732, 0x4029 = 16425, 0x409B = 16539, 0x40F8 = 16632).
  // The rounding moves each exp-weight by < 0.1% (e.g. 1.4140625 * 2.302734375 / sqrt2 =
  // 2.30249, exp = 9.9990), the pooled scores stay [0.0656, 0.3016, 0.5359, 0.5226, 0.3128,
  // 0.0523] -> [2, 3, 4] + [6, 7].
  %q = arith.constant dense<[[[[1.4140625, 0.0], [0.0, 1.4140625]]]]> : tensor<1x1x2x2xf16>
  %k = arith.constant dense<[[[[0.0, 0.0], [0.693359375, 0.0], [2.302734375, 2.080078125],
                               [2.080078125, 2.484375], [0.0, 0.0], [0.0, 0.0],
                               [0.693359375, 0.0], [0.0, 0.0]]]]> : tensor<1x1x8x2xf16>
  %v = arith.constant dense<[[[[0.1, -0.1], [1.1, -1.1], [2.1, -2.1], [3.1, -3.1],
                               [4.1, -4.1], [5.1, -5.1], [6.1, -6.1], [7.1, -7.1]]]]> : tensor<1x1x8x2xf16>
  %k1, %v1, %i1 = snapkv.select %q, %k, %v window 2 capacity 5 kernel 3
    : (tensor<1x1x2x2xf16>, tensor<1x1x8x2xf16>, tensor<1x1x8x2xf16>)
    -> (tensor<1x1x5x2xf16>, tensor<1x1x5x2xf16>, tensor<1x1x5xi64>)
  %i1d = tensor.cast %i1 : tensor<1x1x5xi64> to tensor<1x1x?xi64>
  %k1d = tensor.cast %k1 : tensor<1x1x5x2xf16> to tensor<1x1x?x2xf16>
  %v1d = tensor.cast %v1 : tensor<1x1x5x2xf16> to tensor<1x1x?x2xf16>
  // CHECK: sizes = [1, 1, 5]
  // CHECK-NEXT: {{^\[\[\[}}2, 3, 4, 6, 7]]]
  call @print_idx(%i1d) : (tensor<1x1x?xi64>) -> ()
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2.30273, 2.08008],
  // CHECK-NEXT: {{^}}   [2.08008, 2.48438],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [0.693359, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}16539, 16425],
  // CHECK-NEXT: {{^}}   [16425, 16632],
  // CHECK-NEXT: {{^}}   [0, 0],
  // CHECK-NEXT: {{^}}   [14732, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  call @print_rows(%k1d) : (tensor<1x1x?x2xf16>) -> ()
  // Values rows 2, 3, 4, 6, 7: f16(2.1) = 0x4033, f16(3.1) = 0x4233 = 16947,
  // f16(4.1) = 0x441A, f16(6.1) = 0x461A = 17946, f16(7.1) = 0x471A = 18202; negatives have
  // the sign bit 0x8000 added.
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}2.09961, -2.09961],
  // CHECK-NEXT: {{^}}   [3.09961, -3.09961],
  // CHECK-NEXT: {{^}}   [4.10156, -4.10156],
  // CHECK-NEXT: {{^}}   [6.10156, -6.10156],
  // CHECK-NEXT: {{^}}   [7.10156, -7.10156]]]]
  // CHECK: sizes = [1, 1, 5, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}16435, 49203],
  // CHECK-NEXT: {{^}}   [16947, 49715],
  // CHECK-NEXT: {{^}}   [17434, 50202],
  // CHECK-NEXT: {{^}}   [17946, 50714],
  // CHECK-NEXT: {{^}}   [18202, 50970]]]]
  call @print_rows(%v1d) : (tensor<1x1x?x2xf16>) -> ()

  // Case 2: logits are computed in f32, not f16. W = 1, L = 3, P = 2, C = 2 (one prefix
  // position kept), kernel 1, `scale 1.0`. q = [1, 1], keys [2, 0], [2, 2^-10], [0, 0].
  // Logits 2 and 2 + 2^-10 = 2.0009765625 (exact in f32) -> position 1 has the larger vote
  // (e^2.00098 vs e^2) and is kept: [1, 2]. In f16, 2.0009765625 lies exactly halfway between
  // 2 and the next f16 (2.001953125) and rounds to even, 2.0: a lowering that rounds logits to
  // f16 sees an exact tie and keeps position 0.
  %q2 = arith.constant dense<[[[[1.0, 1.0]]]]> : tensor<1x1x1x2xf16>
  %k2 = arith.constant dense<[[[[2.0, 0.0], [2.0, 0.0009765625], [0.0, 0.0]]]]> : tensor<1x1x3x2xf16>
  %v2 = arith.constant dense<[[[[0.1, -0.1], [1.1, -1.1], [2.1, -2.1]]]]> : tensor<1x1x3x2xf16>
  %k2o, %v2o, %i2 = snapkv.select %q2, %k2, %v2 window 1 capacity 2 kernel 1 scale 1.0
    : (tensor<1x1x1x2xf16>, tensor<1x1x3x2xf16>, tensor<1x1x3x2xf16>)
    -> (tensor<1x1x2x2xf16>, tensor<1x1x2x2xf16>, tensor<1x1x2xi64>)
  %i2d = tensor.cast %i2 : tensor<1x1x2xi64> to tensor<1x1x?xi64>
  %v2d = tensor.cast %v2o : tensor<1x1x2x2xf16> to tensor<1x1x?x2xf16>
  // CHECK: sizes = [1, 1, 2]
  // CHECK-NEXT: {{^\[\[\[}}1, 2]]]
  call @print_idx(%i2d) : (tensor<1x1x?xi64>) -> ()
  // f16(1.1) = 0x3C66 = 15462 (-1.1: 48230), f16(2.1) = 16435 (-2.1: 49203)
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1.09961, -1.09961],
  // CHECK-NEXT: {{^}}   [2.09961, -2.09961]]]]
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}15462, 48230],
  // CHECK-NEXT: {{^}}   [16435, 49203]]]]
  call @print_rows(%v2d) : (tensor<1x1x?x2xf16>) -> ()

  // Case 3: the dot products exceed the f16 range (max 65504) and must not overflow.
  // W = 1, L = 4, P = 3, C = 2, kernel 1, `scale 0.0000152587890625` (= 2^-16), q = [256, 0],
  // keys [256 * ln w_j, 0] rounded to f16 for w = [2, 10, 3 | 1]: 177.5, 589.5, 281.25, 0.
  // Logits = key / 256 = [0.6934, 2.3027, 1.0986, 0] -> weights ~ [2, 10, 3, 1] -> keep 1: [1, 3].
  // The raw products 256 * 589.5 = 150912 and 256 * 281.25 = 72000 are inf in f16.
  %q3 = arith.constant dense<[[[[256.0, 0.0]]]]> : tensor<1x1x1x2xf16>
  %k3 = arith.constant dense<[[[[177.5, 0.0], [589.5, 0.0], [281.25, 0.0], [0.0, 0.0]]]]> : tensor<1x1x4x2xf16>
  %v3 = arith.constant dense<[[[[0.1, -0.1], [1.1, -1.1], [2.1, -2.1], [3.1, -3.1]]]]> : tensor<1x1x4x2xf16>
  %k3o, %v3o, %i3 = snapkv.select %q3, %k3, %v3 window 1 capacity 2 kernel 1 scale 0.0000152587890625
    : (tensor<1x1x1x2xf16>, tensor<1x1x4x2xf16>, tensor<1x1x4x2xf16>)
    -> (tensor<1x1x2x2xf16>, tensor<1x1x2x2xf16>, tensor<1x1x2xi64>)
  %i3d = tensor.cast %i3 : tensor<1x1x2xi64> to tensor<1x1x?xi64>
  %k3d = tensor.cast %k3o : tensor<1x1x2x2xf16> to tensor<1x1x?x2xf16>
  %v3d = tensor.cast %v3o : tensor<1x1x2x2xf16> to tensor<1x1x?x2xf16>
  // CHECK: sizes = [1, 1, 2]
  // CHECK-NEXT: {{^\[\[\[}}1, 3]]]
  call @print_idx(%i3d) : (tensor<1x1x?xi64>) -> ()
  // f16(589.5) = 0x609B = 24731
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}589.5, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}24731, 0],
  // CHECK-NEXT: {{^}}   [0, 0]]]]
  call @print_rows(%k3d) : (tensor<1x1x?x2xf16>) -> ()
  // f16(3.1) = 16947 (-3.1: 49715)
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}1.09961, -1.09961],
  // CHECK-NEXT: {{^}}   [3.09961, -3.09961]]]]
  // CHECK: sizes = [1, 1, 2, 2]
  // CHECK-NEXT: {{^\[\[\[\[}}15462, 48230],
  // CHECK-NEXT: {{^}}   [16947, 49715]]]]
  call @print_rows(%v3d) : (tensor<1x1x?x2xf16>) -> ()
  return
}
