// The bf16 prefill attention with the AVX512_BF16 microkernel: both products
// read their right-hand operand in pairs, the layout vdpbf16ps takes, made
// once instead of interleaved from two rows for every register tile (four
// permutations per 16 vdpbf16ps in P x V, two in Q K^T before). The queries
// are laid out once per tile as pairs along D, [32, 32, 2]; each key step
// lays its [64, 64] tile of V out as pairs of rows, [32, 64, 2] (one
// transpose of a [2 x 64] read per pair, written whole). Without the
// microkernel (the f32 fallback) neither changes: the fallback would read
// each half of a pair with a stride of two.
// RUN: snapkv-opt %s --snapkv-cpu-pipeline="cpu-features=avx512f,avx512bf16" --mlir-disable-threading --mlir-print-ir-after=snapkv-vectorize -o /dev/null 2>&1 | FileCheck %s
// RUN: snapkv-opt %s --snapkv-cpu-pipeline="cpu-features=avx512f" --mlir-disable-threading --mlir-print-ir-after=snapkv-vectorize -o /dev/null 2>&1 | FileCheck %s --check-prefix=FALLBACK --implicit-check-not=x2xbf16

// CHECK-LABEL: func.func @prefill_bf16
// The queries' pairs, once per tile.
// CHECK:       scf.for {{.*}} -> (tensor<32x32x2xbf16>)
// CHECK:       scf.if
// Q K^T: tiles of 8 keys by 32 rows, each key's pair broadcast, the
// queries' pairs read whole.
// CHECK:         scf.for {{.*}} step %c8
// CHECK:           scf.for
// CHECK:             vector.transfer_read {{.*}} : tensor<64xbf16>, vector<64xbf16>
// CHECK-NOT:         vector.shuffle
// CHECK-NOT:         vector.interleave
// CHECK-COUNT-16:    x86vector.avx512.dot
// CHECK-NOT:         vector.shuffle
// CHECK-NOT:         vector.interleave
// V's pairs, once per key step.
// CHECK:         scf.for {{.*}} -> (tensor<32x64x2xbf16>)
// CHECK:           vector.transpose {{.*}}, [1, 0] : vector<2x64xbf16> to vector<64x2xbf16>
// CHECK:           vector.shape_cast {{.*}} : vector<64x2xbf16> to vector<128xbf16>
// CHECK:           vector.transfer_write {{.*}} : vector<128xbf16>, tensor<128xbf16>
// P x V: tiles of 4 rows by 64 columns, the pairs of V read whole.
// CHECK:         scf.for {{.*}} -> (tensor<32x64xf32>)
// CHECK:           scf.for {{.*}} -> (tensor<32x64xf32>)
// CHECK:             vector.transfer_read {{.*}} : tensor<128xbf16>, vector<128xbf16>
// CHECK-NOT:         vector.shuffle
// CHECK-NOT:         vector.interleave
// CHECK-COUNT-16:    x86vector.avx512.dot
// CHECK-NOT:         vector.shuffle
// CHECK-NOT:         vector.interleave
// CHECK:       } else {

// FALLBACK-LABEL: func.func @prefill_bf16
// FALLBACK:       scf.if
// FALLBACK-NOT:   x86vector.avx512.dot
// FALLBACK:       } else {
func.func @prefill_bf16(%q: tensor<1x9x?x64xbf16>, %k: tensor<1x3x?x64xbf16>, %v: tensor<1x3x?x64xbf16>) -> tensor<1x9x?x64xbf16> {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x9x?x64xbf16>) : tensor<1x9x?x64xbf16>, tensor<1x3x?x64xbf16>, tensor<1x3x?x64xbf16> -> tensor<1x9x?x64xbf16>
  return %o : tensor<1x9x?x64xbf16>
}
