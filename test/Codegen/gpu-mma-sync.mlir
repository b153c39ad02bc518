// RUN: snapkv-opt %s --split-input-file --verify-diagnostics --snapkv-gpu-mma-sync | FileCheck %s
// RUN: not snapkv-opt %s --split-input-file --convert-vector-to-gpu=use-nvgpu=true 2>&1 | FileCheck %s --check-prefix=UPSTREAM
// RUN: snapkv-opt %s --split-input-file --convert-nvgpu-to-nvvm 2>&1 | FileCheck %s --check-prefix=BF16

#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#acc = affine_map<(m, n, k) -> (m, n)>

// A warp's step as snapkv-gpu-distribute{tensor-cores} leaves it (after bufferisation):
// keys [16 x 16] f16 as lhs, transposed queries [16 x 8] f16 as rhs, an f32 accumulator.
// Next to it, ordinary scalar index arithmetic (a block's offsets).
// snapkv-gpu-mma-sync lowers the contraction to nvgpu.mma.sync and leaves the rest alone.
// CHECK-LABEL: func.func @warp_step(
// CHECK: arith.muli
// CHECK: scf.for
// CHECK: nvgpu.mma.sync({{.*}}) {mmaShape = [16, 8, 16]} : (vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>
// CHECK-NOT: vector.contract
// Upstream's convert-vector-to-gpu{use-nvgpu} takes the scalar arith.muli for an MMA
// operand and fails; hence snapkv-gpu-mma-sync, which applies the same upstream rewrite
// to the ops that hold the contractions only.
// UPSTREAM: error: unhandled vector to mma type: {{.*}}arith.muli
func.func @warp_step(%k: memref<16x16xf16>, %q: memref<16x8xf16>, %c: memref<16x8xf32>,
                     %n: index, %out: memref<?xindex>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %z = arith.constant 0.0 : f16
  %zf = arith.constant 0.0 : f32
  %offset = arith.muli %n, %c2 : index
  memref.store %offset, %out[%c0] : memref<?xindex>
  scf.for %i = %c0 to %c2 step %c1 {
    %a = vector.transfer_read %k[%c0, %c0], %z {in_bounds = [true, true]} : memref<16x16xf16>, vector<16x16xf16>
    %b = vector.transfer_read %q[%c0, %c0], %z {in_bounds = [true, true]} : memref<16x8xf16>, vector<16x8xf16>
    %d = vector.transfer_read %c[%c0, %c0], %zf {in_bounds = [true, true]} : memref<16x8xf32>, vector<16x8xf32>
    %r = vector.contract {indexing_maps = [#lhs, #rhs, #acc], iterator_types = ["parallel", "parallel", "reduction"], kind = #vector.kind<add>} %a, %b, %d : vector<16x16xf16>, vector<16x8xf16> into vector<16x8xf32>
    vector.transfer_write %r, %c[%c0, %c0] {in_bounds = [true, true]} : vector<16x8xf32>, memref<16x8xf32>
  }
  return
}

// -----

// The same without a step loop (one query head per kv head): the contraction shares the
// kernel body with the scalar code; only its vector ops are rewritten.
// CHECK-LABEL: func.func @no_step_loop(
// CHECK: arith.muli
// CHECK: nvgpu.mma.sync({{.*}}) {mmaShape = [16, 8, 16]}
// CHECK-NOT: vector.contract
// CHECK: arith.addi
// CHECK: return
func.func @no_step_loop(%k: memref<16x16xf16>, %q: memref<16x8xf16>, %c: memref<16x8xf32>,
                        %n: index, %out: memref<?xindex>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %z = arith.constant 0.0 : f16
  %zf = arith.constant 0.0 : f32
  %offset = arith.muli %n, %c2 : index
  memref.store %offset, %out[%c0] : memref<?xindex>
  %a = vector.transfer_read %k[%c0, %c0], %z {in_bounds = [true, true]} : memref<16x16xf16>, vector<16x16xf16>
  %b = vector.transfer_read %q[%c0, %c0], %z {in_bounds = [true, true]} : memref<16x8xf16>, vector<16x8xf16>
  %d = vector.transfer_read %c[%c0, %c0], %zf {in_bounds = [true, true]} : memref<16x8xf32>, vector<16x8xf32>
  %r = vector.contract {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = ["parallel", "parallel", "reduction"], kind = #vector.kind<add>} %a, %b, %d : vector<16x16xf16>, vector<16x8xf16> into vector<16x8xf32>
  vector.transfer_write %r, %c[%c0, %c0] {in_bounds = [true, true]} : vector<16x8xf32>, memref<16x8xf32>
  %next = arith.addi %offset, %c1 : index
  memref.store %next, %out[%c1] : memref<?xindex>
  return
}

// -----

// bf16 operands: upstream's nvgpu.mma.sync has no bf16 lowering to NVVM, so
// snapkv-gpu-distribute keeps bf16 logits on the scalar thread path.
// BF16: error: 'nvgpu.mma.sync' op failed to deduce operand PTX types
// BF16: func.func @bf16_mma(
// BF16: nvgpu.mma.sync
func.func @bf16_mma(%a: vector<4x2xbf16>, %b: vector<2x2xbf16>, %c: vector<2x2xf32>) -> vector<2x2xf32> {
  %d = nvgpu.mma.sync (%a, %b, %c) {mmaShape = [16, 8, 16]} : (vector<4x2xbf16>, vector<2x2xbf16>, vector<2x2xf32>) -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}
