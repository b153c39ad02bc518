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

// Operands in shared memory, as snapkv-gpu-launch hands it out (views of the dynamic
// shared buffer, cast to generic pointers): the reads go to the workgroup views, so upstream
// loads the MMA operands with ldmatrix (keys x4, the transposed queries x2.trans) and the
// accumulator with shared-memory vector loads. bf16 operands are read as f16 views of the
// same bytes (the fragment layout is that of any 16-bit type) and the MMA is the bf16
// nvvm.mma.sync on their 32-bit registers.
// CHECK-LABEL: func.func @shared_bf16(
// CHECK-DAG: %[[K:.*]] = memref.view %{{.*}}[%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<64x16xf16, #gpu.address_space<workgroup>>
// CHECK-DAG: %[[KS:.*]] = memref.subview %[[K]][%{{.*}}, 0] [16, 16] [1, 1] : {{.*}} to memref<16x16xf16, strided<[16, 1], offset: ?>, #gpu.address_space<workgroup>>
// CHECK-DAG: %[[Q:.*]] = memref.view %{{.*}}[%c2048][] : {{.*}} to memref<16x8xf16, #gpu.address_space<workgroup>>
// CHECK-DAG: nvgpu.ldmatrix %[[KS]][{{.*}}] {numTiles = 4 : i32, transpose = false}
// CHECK-DAG: nvgpu.ldmatrix %[[Q]][{{.*}}] {numTiles = 2 : i32, transpose = true}
// CHECK-DAG: vector.load %{{.*}} : memref<16x8xf32, #gpu.address_space<workgroup>>, vector<2xf32>
// CHECK: vector.bitcast %{{.*}} : vector<2xf16> to vector<1xi32>
// CHECK: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK: vector.store %{{.*}} : memref<16x8xf32, #gpu.address_space<workgroup>>, vector<2xf32>
// CHECK-NOT: nvgpu.mma.sync
// CHECK-NOT: vector.contract
#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#acc = affine_map<(m, n, k) -> (m, n)>
#ws = #gpu.address_space<workgroup>
func.func @shared_bf16(%smem: memref<?xi8, #ws>, %t: index) {
  %c0 = arith.constant 0 : index
  %c2048 = arith.constant 2048 : index
  %c2304 = arith.constant 2304 : index
  %z = arith.constant 0.0 : bf16
  %zf = arith.constant 0.0 : f32
  %kv = memref.view %smem[%c0][] : memref<?xi8, #ws> to memref<64x16xbf16, #ws>
  %kg = memref.memory_space_cast %kv : memref<64x16xbf16, #ws> to memref<64x16xbf16>
  %k = memref.subview %kg[%t, 0] [16, 16] [1, 1] : memref<64x16xbf16> to memref<16x16xbf16, strided<[16, 1], offset: ?>>
  %qv = memref.view %smem[%c2048][] : memref<?xi8, #ws> to memref<16x8xbf16, #ws>
  %q = memref.memory_space_cast %qv : memref<16x8xbf16, #ws> to memref<16x8xbf16>
  %cv = memref.view %smem[%c2304][] : memref<?xi8, #ws> to memref<16x8xf32, #ws>
  %c = memref.memory_space_cast %cv : memref<16x8xf32, #ws> to memref<16x8xf32>
  %a = vector.transfer_read %k[%c0, %c0], %z {in_bounds = [true, true]} : memref<16x16xbf16, strided<[16, 1], offset: ?>>, vector<16x16xbf16>
  %b = vector.transfer_read %q[%c0, %c0], %z {in_bounds = [true, true]} : memref<16x8xbf16>, vector<16x8xbf16>
  %d = vector.transfer_read %c[%c0, %c0], %zf {in_bounds = [true, true]} : memref<16x8xf32>, vector<16x8xf32>
  %r = vector.contract {indexing_maps = [#lhs, #rhs, #acc], iterator_types = ["parallel", "parallel", "reduction"], kind = #vector.kind<add>} %a, %b, %d : vector<16x16xbf16>, vector<16x8xbf16> into vector<16x8xf32>
  vector.transfer_write %r, %c[%c0, %c0] {in_bounds = [true, true]} : vector<16x8xf32>, memref<16x8xf32>
  return
}

// -----

// A bf16 contraction whose operands are not in shared memory cannot be retyped (no view of
// the same bytes as f16): an error, not an f16 MMA on bf16 bits.
#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#acc = affine_map<(m, n, k) -> (m, n)>
func.func @bf16_global(%k: memref<16x16xbf16>, %q: memref<16x8xbf16>, %c: memref<16x8xf32>) {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  %zf = arith.constant 0.0 : f32
  // expected-error @below {{snapkv-gpu-mma-sync: a bf16 MMA operand that is not read from shared memory}}
  %a = vector.transfer_read %k[%c0, %c0], %z {in_bounds = [true, true]} : memref<16x16xbf16>, vector<16x16xbf16>
  %b = vector.transfer_read %q[%c0, %c0], %z {in_bounds = [true, true]} : memref<16x8xbf16>, vector<16x8xbf16>
  %d = vector.transfer_read %c[%c0, %c0], %zf {in_bounds = [true, true]} : memref<16x8xf32>, vector<16x8xf32>
  %r = vector.contract {indexing_maps = [#lhs, #rhs, #acc], iterator_types = ["parallel", "parallel", "reduction"], kind = #vector.kind<add>} %a, %b, %d : vector<16x16xbf16>, vector<16x8xbf16> into vector<16x8xf32>
  vector.transfer_write %r, %c[%c0, %c0] {in_bounds = [true, true]} : vector<16x8xf32>, memref<16x8xf32>
  return
}

// -----

// A block holding an f16 and a bf16 contraction: one would be lowered as the other's type.
#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#acc = affine_map<(m, n, k) -> (m, n)>
#ws = #gpu.address_space<workgroup>
func.func @mixed_block(%smem: memref<?xi8, #ws>) {
  %c0 = arith.constant 0 : index
  %c512 = arith.constant 512 : index
  %c1024 = arith.constant 1024 : index
  %c1536 = arith.constant 1536 : index
  %c2048 = arith.constant 2048 : index
  %zh = arith.constant 0.0 : f16
  %zb = arith.constant 0.0 : bf16
  %zf = arith.constant 0.0 : f32
  %kh = memref.view %smem[%c0][] : memref<?xi8, #ws> to memref<16x16xf16, #ws>
  %qh = memref.view %smem[%c512][] : memref<?xi8, #ws> to memref<16x8xf16, #ws>
  %kb = memref.view %smem[%c1024][] : memref<?xi8, #ws> to memref<16x16xbf16, #ws>
  %qb = memref.view %smem[%c1536][] : memref<?xi8, #ws> to memref<16x8xbf16, #ws>
  %c = memref.view %smem[%c2048][] : memref<?xi8, #ws> to memref<16x8xf32, #ws>
  %a1 = vector.transfer_read %kh[%c0, %c0], %zh {in_bounds = [true, true]} : memref<16x16xf16, #ws>, vector<16x16xf16>
  %b1 = vector.transfer_read %qh[%c0, %c0], %zh {in_bounds = [true, true]} : memref<16x8xf16, #ws>, vector<16x8xf16>
  %a2 = vector.transfer_read %kb[%c0, %c0], %zb {in_bounds = [true, true]} : memref<16x16xbf16, #ws>, vector<16x16xbf16>
  %b2 = vector.transfer_read %qb[%c0, %c0], %zb {in_bounds = [true, true]} : memref<16x8xbf16, #ws>, vector<16x8xbf16>
  %d = vector.transfer_read %c[%c0, %c0], %zf {in_bounds = [true, true]} : memref<16x8xf32, #ws>, vector<16x8xf32>
  %r1 = vector.contract {indexing_maps = [#lhs, #rhs, #acc], iterator_types = ["parallel", "parallel", "reduction"], kind = #vector.kind<add>} %a1, %b1, %d : vector<16x16xf16>, vector<16x8xf16> into vector<16x8xf32>
  %r2 = vector.contract {indexing_maps = [#lhs, #rhs, #acc], iterator_types = ["parallel", "parallel", "reduction"], kind = #vector.kind<add>} %a2, %b2, %r1 : vector<16x16xbf16>, vector<16x8xbf16> into vector<16x8xf32>
  // expected-error @below {{snapkv-gpu-mma-sync: bf16 and other contractions in one block}}
  vector.transfer_write %r2, %c[%c0, %c0] {in_bounds = [true, true]} : vector<16x8xf32>, memref<16x8xf32, #ws>
  return
}

// -----

// Why snapkv-gpu-mma-sync lowers bf16 MMAs itself: upstream's nvgpu.mma.sync has no bf16
// lowering to NVVM.
// BF16: error: 'nvgpu.mma.sync' op failed to deduce operand PTX types
// BF16: func.func @bf16_mma(
// BF16: nvgpu.mma.sync
// snapkv-gpu-mma-sync leaves an nvgpu.mma.sync it did not make alone.
// CHECK-LABEL: func.func @bf16_mma(
// CHECK: nvgpu.mma.sync
func.func @bf16_mma(%a: vector<4x2xbf16>, %b: vector<2x2xbf16>, %c: vector<2x2xf32>) -> vector<2x2xf32> {
  %d = nvgpu.mma.sync (%a, %b, %c) {mmaShape = [16, 8, 16]} : (vector<4x2xbf16>, vector<2x2xbf16>, vector<2x2xf32>) -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}
