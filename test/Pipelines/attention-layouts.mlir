// A prefill snapkv.attention with dynamic lengths (as the model passes them):
// each tile's key loop is chosen by an scf.if (keys read in place, or
// zero-padded when shorter than one tile), and its [32, 64] accumulator and
// row sum leave that scf.if with identity layouts, because their initial
// values are made before it. Had the branches made them, one-shot
// bufferization would give the scf.if's results a fully dynamic layout, and
// the final acc / sum would read the accumulator with an unknown innermost
// stride: a loop over its 64 elements inserted one at a time, through the
// stack (a tenth of the bf16 prefill attention's time at 4,000 tokens).
// RUN: snapkv-opt %s --snapkv-cpu-pipeline="cpu-features=avx512f,avx512bf16" --mlir-disable-threading --mlir-print-ir-after=one-shot-bufferize -o /dev/null 2>&1 | FileCheck %s --implicit-check-not="strided<[?, ?], offset: ?>" --implicit-check-not="strided<[?, ?, ?, ?], offset: ?>"

// CHECK-LABEL: func.func @prefill_bf16
// CHECK:       scf.forall
// CHECK:         scf.if %{{.*}} -> (memref<32xf32>, memref<32x64xf32>) {
// CHECK:           x86vector.avx512.dot
// CHECK:         } else {
// CHECK:         }
// CHECK:         scf.for
// CHECK:           vector.transfer_read {{.*}} : memref<1x1x1x64xf32, strided<[2048, 2048, 64, 1], offset: ?>>, vector<64xf32>
// CHECK:           arith.divf {{.*}} : vector<64xf32>
// CHECK:           arith.truncf {{.*}} : vector<64xf32> to vector<64xbf16>
func.func @prefill_bf16(%q: tensor<1x9x?x64xbf16>, %k: tensor<1x3x?x64xbf16>, %v: tensor<1x3x?x64xbf16>) -> tensor<1x9x?x64xbf16> {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x9x?x64xbf16>) : tensor<1x9x?x64xbf16>, tensor<1x3x?x64xbf16>, tensor<1x3x?x64xbf16> -> tensor<1x9x?x64xbf16>
  return %o : tensor<1x9x?x64xbf16>
}

// CHECK-LABEL: func.func @prefill_f32
// CHECK:       scf.forall
// CHECK:         scf.if %{{.*}} -> (memref<32xf32>, memref<32x64xf32>) {
// CHECK:         } else {
// CHECK:         }
// CHECK:         scf.for
// CHECK:           vector.transfer_read {{.*}} : memref<1x1x1x64xf32, strided<[2048, 2048, 64, 1], offset: ?>>, vector<64xf32>
// CHECK:           arith.divf {{.*}} : vector<64xf32>
func.func @prefill_f32(%q: tensor<1x9x?x64xf32>, %k: tensor<1x3x?x64xf32>, %v: tensor<1x3x?x64xf32>) -> tensor<1x9x?x64xf32> {
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x9x?x64xf32>) : tensor<1x9x?x64xf32>, tensor<1x3x?x64xf32>, tensor<1x3x?x64xf32> -> tensor<1x9x?x64xf32>
  return %o : tensor<1x9x?x64xf32>
}
