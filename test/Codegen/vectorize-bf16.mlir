// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-vectorize{vector-bits=512 microkernel=avx512bf16},canonicalize,cse,loop-invariant-subset-hoisting,canonicalize))" | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-vectorize{vector-bits=512 microkernel=none},canonicalize,cse,loop-invariant-subset-hoisting,canonicalize))" | FileCheck %s --check-prefix=NONE
// RUN: not snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-vectorize{microkernel=amx}))" 2>&1 | FileCheck %s --check-prefix=BAD

// A prefill projection's bf16 x bf16 -> f32 product (K = 64, N = 32):
// register tiles of 12 rows x 32 columns (24 accumulators; the interleaving
// takes three registers more), the reduction two steps at a time.
// Per step, two rows of B are read and interleaved into pairs (16 columns
// each), each row's pair of A broadcast as one 32-bit element, and
// vdpbf16ps adds the pairs' products to the accumulators carried in
// registers.
// CHECK-LABEL: func.func @projection
// CHECK: scf.for %{{.*}} = %c0 to %{{.*}} step %c12
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c2 iter_args(%{{.*}} = %{{.*}}) -> (vector<12x32xf32>)
// CHECK: vector.transfer_read {{.*}} : tensor<12x2xbf16>, vector<12x2xbf16>
// CHECK: vector.transfer_read {{.*}} : tensor<2x32xbf16>, vector<2x32xbf16>
// CHECK: vector.interleave {{.*}} : vector<16xbf16> -> vector<32xbf16>
// CHECK: vector.bitcast {{.*}} : vector<2xbf16> to vector<1xi32>
// CHECK: vector.broadcast {{.*}} : i32 to vector<16xi32>
// CHECK-COUNT-2: x86vector.avx512.dot {{.*}} : vector<32xbf16> -> vector<16xf32>
// The remainder rows, one at a time, the same way.
// CHECK: scf.for
// CHECK: x86vector.avx512.dot
// The fallback widens the operands and multiplies with FMAs, one step at a
// time.
// NONE-LABEL: func.func @projection
// NONE-NOT: x86vector
// NONE: scf.for %{{.*}} = %c0 to %c64 step %c1
// NONE: arith.extf {{.*}} : vector<14x32xbf16> to vector<14x32xf32>
// NONE: vector.fma
// NONE-NOT: x86vector
// NONE: return
func.func @projection(%a: tensor<?x64xbf16>, %b: tensor<64x32xbf16>, %c: tensor<?x32xf32>) -> tensor<?x32xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<?x64xbf16>, tensor<64x32xbf16>) outs(%c : tensor<?x32xf32>) -> tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}

// -----

// An odd reduction (or one of a size known only at run time): the loop over
// its pairs is peeled; the step left over takes the fallback (a scalar
// loop, as linalg).
// CHECK-LABEL: func.func @odd
// CHECK: scf.for %{{.*}} = %c0 to %c4 step %c2
// CHECK: x86vector.avx512.dot
// CHECK: linalg.matmul ins({{.*}} : tensor<3x1xbf16>, tensor<1x16xbf16>)
func.func @odd(%a: tensor<3x5xbf16>, %b: tensor<5x16xbf16>, %c: tensor<3x16xf32>) -> tensor<3x16xf32> {
  %r = linalg.matmul ins(%a, %b : tensor<3x5xbf16>, tensor<5x16xbf16>) outs(%c : tensor<3x16xf32>) -> tensor<3x16xf32>
  return %r : tensor<3x16xf32>
}

// -----

// The strategy's choice on the op (snapkv.microkernel, written by
// snapkv-configure-lowering) overrides the option; f32 operands, a
// transposed right-hand operand (read down its columns, not in rows) and a
// vector x matrix product (a decode step's: no pair of B is reused across
// rows, the interleaving costs what the dot products save) always take the
// fallback.
// CHECK-LABEL: func.func @not_dot
// CHECK-NOT: x86vector
// CHECK: return
func.func @not_dot(%a: tensor<8x64xbf16>, %b: tensor<64x32xbf16>, %bt: tensor<32x64xbf16>, %c: tensor<8x32xf32>,
                   %af: tensor<8x64xf32>, %bf: tensor<64x32xf32>, %v: tensor<1x64xbf16>, %cv: tensor<1x32xf32>)
    -> (tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<1x32xf32>) {
  %r = linalg.matmul {snapkv.microkernel = #snapkv.microkernel<none>} ins(%a, %b : tensor<8x64xbf16>, tensor<64x32xbf16>) outs(%c : tensor<8x32xf32>) -> tensor<8x32xf32>
  %t = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]
      ins(%a, %bt : tensor<8x64xbf16>, tensor<32x64xbf16>) outs(%c : tensor<8x32xf32>) -> tensor<8x32xf32>
  %f = linalg.matmul ins(%af, %bf : tensor<8x64xf32>, tensor<64x32xf32>) outs(%c : tensor<8x32xf32>) -> tensor<8x32xf32>
  %g = linalg.matmul ins(%v, %b : tensor<1x64xbf16>, tensor<64x32xbf16>) outs(%cv : tensor<1x32xf32>) -> tensor<1x32xf32>
  return %r, %t, %f, %g : tensor<8x32xf32>, tensor<8x32xf32>, tensor<8x32xf32>, tensor<1x32xf32>
}

// -----

// The other way round: marked avx512bf16 (or amx, which has no kernel of its
// own yet and takes this one), the op gets the dot products under
// microkernel=none.
// CHECK-LABEL: func.func @marked
// CHECK-COUNT-2: x86vector.avx512.dot
// NONE-LABEL: func.func @marked
// NONE-COUNT-2: x86vector.avx512.dot
func.func @marked(%a: tensor<2x64xbf16>, %b: tensor<64x16xbf16>, %b2: tensor<64x16xbf16>, %c: tensor<2x16xf32>) -> (tensor<2x16xf32>, tensor<2x16xf32>) {
  %r = linalg.matmul {snapkv.microkernel = #snapkv.microkernel<avx512bf16>} ins(%a, %b : tensor<2x64xbf16>, tensor<64x16xbf16>) outs(%c : tensor<2x16xf32>) -> tensor<2x16xf32>
  %s = linalg.matmul {snapkv.microkernel = #snapkv.microkernel<amx>} ins(%a, %b2 : tensor<2x64xbf16>, tensor<64x16xbf16>) outs(%c : tensor<2x16xf32>) -> tensor<2x16xf32>
  return %r, %s : tensor<2x16xf32>, tensor<2x16xf32>
}

// BAD: snapkv-vectorize: microkernel must be auto, avx512bf16 or none, got 'amx'

// -----

// A left-hand operand laid out [K, M] (attention's bf16 probabilities, query
// rows innermost): per pair of reduction steps, its two rows are read and
// interleaved into each row's pair, then broadcast as for [M, K].
// CHECK-LABEL: func.func @left_transposed
// CHECK: scf.for %{{.*}} = %c0 to %c64 step %c2
// CHECK: vector.transfer_read {{.*}} : tensor<2x8xbf16>, vector<2x8xbf16>
// CHECK: vector.interleave {{.*}} : vector<8xbf16> -> vector<16xbf16>
// CHECK: vector.bitcast {{.*}} : vector<2xbf16> to vector<1xi32>
// CHECK-COUNT-2: x86vector.avx512.dot {{.*}} : vector<32xbf16> -> vector<16xf32>
func.func @left_transposed(%p: tensor<64x8xbf16>, %v: tensor<64x32xbf16>, %c: tensor<8x32xf32>) -> tensor<8x32xf32> {
  %r = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (k, m)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>]
      ins(%p, %v : tensor<64x8xbf16>, tensor<64x32xbf16>) outs(%c : tensor<8x32xf32>) -> tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// -----

// B already in pairs of rows ([K / 2, N, 2], attention's V in its bf16
// layout; the reduction is (K / 2, 2)): each step reads B's pairs as they
// are, one 1-D read of the tile, no interleave; A's two rows still give
// each row's pair.
// CHECK-LABEL: func.func @paired_rows
// CHECK: vector.transfer_read {{.*}} : tensor<128xbf16>, vector<128xbf16>
// CHECK-NOT: vector.interleave
// CHECK-COUNT-4: x86vector.avx512.dot {{.*}} : vector<32xbf16> -> vector<16xf32>
// CHECK-NOT: vector.interleave
// CHECK: return
// NONE-LABEL: func.func @paired_rows
// NONE-NOT: x86vector
func.func @paired_rows(%a: tensor<32x2x8xbf16>, %b: tensor<32x64x2xbf16>, %c: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(r, d, j, t) -> (j, t, r)>, affine_map<(r, d, j, t) -> (j, d, t)>, affine_map<(r, d, j, t) -> (r, d)>], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%a, %b : tensor<32x2x8xbf16>, tensor<32x64x2xbf16>) outs(%c : tensor<8x64xf32>) {
  ^bb0(%x: bf16, %y: bf16, %acc: f32):
    %xf = arith.extf %x : bf16 to f32
    %yf = arith.extf %y : bf16 to f32
    %p = arith.mulf %xf, %yf : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<8x64xf32>
  return %r : tensor<8x64xf32>
}

// -----

// The layout change into pairs: per pair of rows, one [2 x 64] read,
// transposed, and written whole through a 1-D view (not 64 writes of two).
// CHECK-LABEL: func.func @into_pairs
// CHECK: vector.transfer_read {{.*}} : tensor<1x2x64xbf16>, vector<2x64xbf16>
// CHECK: vector.transpose {{.*}}, [1, 0] : vector<2x64xbf16> to vector<64x2xbf16>
// CHECK: vector.transfer_write {{.*}} : vector<128xbf16>, tensor<128xbf16>
func.func @into_pairs(%v: tensor<32x2x64xbf16>) -> tensor<32x64x2xbf16> {
  %e = tensor.empty() : tensor<32x64x2xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(j, d, t) -> (j, t, d)>, affine_map<(j, d, t) -> (j, d, t)>], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<32x2x64xbf16>) outs(%e : tensor<32x64x2xbf16>) {
  ^bb0(%x: bf16, %y: bf16):
    linalg.yield %x : bf16
  } -> tensor<32x64x2xbf16>
  return %r : tensor<32x64x2xbf16>
}
