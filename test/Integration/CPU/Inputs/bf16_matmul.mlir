// The program of bf16_dot.mlir and bf16_dot_fallback.mlir: a [M x 301] x
// [301 x 64] bf16 product into f32 (the reduction odd: pairs and one step
// left), for M = 17 (register tiles of 12 rows and the 5 rows left one at a
// time) and M = 1 (a decode step's vector x matrix, which takes the fallback),
// against the f32 product.

func.func private @printMemrefF32(memref<*xf32>) attributes {llvm.emit_c_interface}

// a[i, k] = (i + 2k) mod 7 - 3, b[k, j] = (3k + j) mod 5 - 2: small integers,
// exact in bf16, their products and sums exact in f32 on both paths.
func.func @operands(%m: index) -> (tensor<?x301xbf16>, tensor<301x64xbf16>) {
  %ea = tensor.empty(%m) : tensor<?x301xbf16>
  %a = linalg.generic {indexing_maps = [affine_map<(i, k) -> (i, k)>], iterator_types = ["parallel", "parallel"]}
      outs(%ea : tensor<?x301xbf16>) {
  ^bb0(%o: bf16):
    %i = linalg.index 0 : index
    %k = linalg.index 1 : index
    %c2 = arith.constant 2 : index
    %c7 = arith.constant 7 : index
    %c3 = arith.constant 3 : i32
    %k2 = arith.muli %k, %c2 : index
    %s = arith.addi %i, %k2 : index
    %r = arith.remui %s, %c7 : index
    %ri = arith.index_cast %r : index to i32
    %v = arith.subi %ri, %c3 : i32
    %f = arith.sitofp %v : i32 to bf16
    linalg.yield %f : bf16
  } -> tensor<?x301xbf16>
  %eb = tensor.empty() : tensor<301x64xbf16>
  %b = linalg.generic {indexing_maps = [affine_map<(k, j) -> (k, j)>], iterator_types = ["parallel", "parallel"]}
      outs(%eb : tensor<301x64xbf16>) {
  ^bb0(%o: bf16):
    %k = linalg.index 0 : index
    %j = linalg.index 1 : index
    %c3 = arith.constant 3 : index
    %c5 = arith.constant 5 : index
    %c2 = arith.constant 2 : i32
    %k3 = arith.muli %k, %c3 : index
    %s = arith.addi %k3, %j : index
    %r = arith.remui %s, %c5 : index
    %ri = arith.index_cast %r : index to i32
    %v = arith.subi %ri, %c2 : i32
    %f = arith.sitofp %v : i32 to bf16
    linalg.yield %f : bf16
  } -> tensor<301x64xbf16>
  return %a, %b : tensor<?x301xbf16>, tensor<301x64xbf16>
}

// The bf16 product against the f32 product of the widened operands: prints
// the largest difference (0) and the sum of the product's magnitudes.
func.func @check(%m: index) {
  %a, %b = call @operands(%m) : (index) -> (tensor<?x301xbf16>, tensor<301x64xbf16>)
  %zero = arith.constant 0.0 : f32
  %ec = tensor.empty(%m) : tensor<?x64xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%ec : tensor<?x64xf32>) -> tensor<?x64xf32>
  %c = linalg.matmul ins(%a, %b : tensor<?x301xbf16>, tensor<301x64xbf16>) outs(%c0 : tensor<?x64xf32>) -> tensor<?x64xf32>
  %ea = tensor.empty(%m) : tensor<?x301xf32>
  %af = linalg.generic {indexing_maps = [affine_map<(i, k) -> (i, k)>, affine_map<(i, k) -> (i, k)>], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<?x301xbf16>) outs(%ea : tensor<?x301xf32>) {
  ^bb0(%x: bf16, %o: f32):
    %y = arith.extf %x : bf16 to f32
    linalg.yield %y : f32
  } -> tensor<?x301xf32>
  %eb = tensor.empty() : tensor<301x64xf32>
  %bf = linalg.generic {indexing_maps = [affine_map<(i, k) -> (i, k)>, affine_map<(i, k) -> (i, k)>], iterator_types = ["parallel", "parallel"]}
      ins(%b : tensor<301x64xbf16>) outs(%eb : tensor<301x64xf32>) {
  ^bb0(%x: bf16, %o: f32):
    %y = arith.extf %x : bf16 to f32
    linalg.yield %y : f32
  } -> tensor<301x64xf32>
  %r = linalg.matmul ins(%af, %bf : tensor<?x301xf32>, tensor<301x64xf32>) outs(%c0 : tensor<?x64xf32>) -> tensor<?x64xf32>
  %e0 = tensor.empty() : tensor<f32>
  %z0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
  %d = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> ()>],
      iterator_types = ["reduction", "reduction"]}
      ins(%c, %r : tensor<?x64xf32>, tensor<?x64xf32>) outs(%z0 : tensor<f32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %diff = arith.subf %x, %y : f32
    %abs = math.absf %diff : f32
    %mx = arith.maximumf %o, %abs : f32
    linalg.yield %mx : f32
  } -> tensor<f32>
  %t = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> ()>],
      iterator_types = ["reduction", "reduction"]}
      ins(%c : tensor<?x64xf32>) outs(%z0 : tensor<f32>) {
  ^bb0(%x: f32, %o: f32):
    %ax = math.absf %x : f32
    %sum = arith.addf %o, %ax : f32
    linalg.yield %sum : f32
  } -> tensor<f32>
  %dv = tensor.extract %d[] : tensor<f32>
  %tv = tensor.extract %t[] : tensor<f32>
  %out = tensor.from_elements %dv, %tv : tensor<2xf32>
  %u = tensor.cast %out : tensor<2xf32> to tensor<*xf32>
  %mem = bufferization.to_buffer %u : tensor<*xf32> to memref<*xf32>
  call @printMemrefF32(%mem) : (memref<*xf32>) -> ()
  return
}

func.func @main() {
  %c17 = arith.constant 17 : index
  %c1 = arith.constant 1 : index
  call @check(%c17) : (index) -> ()
  call @check(%c1) : (index) -> ()
  return
}
