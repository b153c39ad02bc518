// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-parallelize{chunks=4 columns=256 reduction-block=128},canonicalize,cse))" | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-parallelize{chunks=4 columns=256 reduction-block=128 reduction-parts=0},canonicalize,cse))" | FileCheck %s --check-prefix=COLUMNS
// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-parallelize{chunks=4 columns=256 reduction-block=128 row-block=0},canonicalize,cse))" | FileCheck %s --check-prefix=WHOLE

// A projection over a dynamic number of tokens: blocks of 256 rows (row-block)
// by 256 output columns go to the threads (16 column blocks per row block), and
// inside each the reduction is taken 128 steps per pass over the block's rows
// (4096 / 128 = 32 passes, in order).
// CHECK-LABEL: func.func @projection
// CHECK: scf.forall (%[[M:.*]], %[[N:.*]]) = (0, 0) to (%{{.*}}, 4096) step (256, 256) shared_outs(%[[OUT:.*]] = %{{.*}})
// CHECK: %[[ROWS:.*]] = affine.min
// CHECK: %[[TILE:.*]] = tensor.extract_slice %[[OUT]][%[[M]], %[[N]]] [%[[ROWS]], 256]
// CHECK: scf.for %[[K:.*]] = %c0 to %c4096 step %c128 iter_args(%{{.*}} = %[[TILE]])
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<?x128xf32>, tensor<128x256xf32>) outs(%{{.*}} : tensor<?x256xf32>)
// CHECK: scf.forall.in_parallel
// CHECK: tensor.parallel_insert_slice
func.func @projection(%x: tensor<?x4096xf32>, %w: tensor<4096x4096xf32>, %init: tensor<?x4096xf32>) -> tensor<?x4096xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<?x4096xf32>, tensor<4096x4096xf32>) outs(%init : tensor<?x4096xf32>) -> tensor<?x4096xf32>
  return %r : tensor<?x4096xf32>
}

// -----

// Attention's matmuls go to the threads head by head (the batch loop); P x V
// over a dynamic prompt length takes its reduction in blocks too.
// CHECK-LABEL: func.func @heads
// CHECK: scf.forall (%{{.*}}) in (32)
// CHECK: scf.for %{{.*}} = %c0 to %{{.*}} step %c128
// CHECK: linalg.batch_matmul {{.*}} outs(%{{.*}} : tensor<1x?x128xf32>)
// CHECK: scf.forall.in_parallel
func.func @heads(%p: tensor<32x?x?xf32>, %v: tensor<32x?x128xf32>, %init: tensor<32x?x128xf32>) -> tensor<32x?x128xf32> {
  %r = linalg.batch_matmul ins(%p, %v : tensor<32x?x?xf32>, tensor<32x?x128xf32>) outs(%init : tensor<32x?x128xf32>) -> tensor<32x?x128xf32>
  return %r : tensor<32x?x128xf32>
}

// -----

// A reduction no longer than twice the block is not blocked; a contraction
// whose vector dimension is dynamic (Q x K^T) is split like any other op.
// CHECK-LABEL: func.func @short_reduction
// CHECK: scf.forall (%{{.*}}) = (0) to (1024) step (256)
// CHECK-NOT: scf.for
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<2x256xf32>, tensor<256x256xf32>)
// CHECK: scf.forall (%{{.*}}) in (4)
// CHECK: linalg.batch_matmul {{.*}} outs(%{{.*}} : tensor<8x?x?xf32>)
func.func @short_reduction(%x: tensor<2x256xf32>, %w: tensor<256x1024xf32>, %init: tensor<2x1024xf32>,
                           %q: tensor<32x?x128xf32>, %kt: tensor<32x128x?xf32>, %s: tensor<32x?x?xf32>)
    -> (tensor<2x1024xf32>, tensor<32x?x?xf32>) {
  %r = linalg.matmul ins(%x, %w : tensor<2x256xf32>, tensor<256x1024xf32>) outs(%init : tensor<2x1024xf32>) -> tensor<2x1024xf32>
  %t = linalg.batch_matmul ins(%q, %kt : tensor<32x?x128xf32>, tensor<32x128x?xf32>) outs(%s : tensor<32x?x?xf32>) -> tensor<32x?x?xf32>
  return %r, %t : tensor<2x1024xf32>, tensor<32x?x?xf32>
}

// -----

// One row (a decode step's vector x matrix product) reads every element of the
// matrix once. Its reduction is split into 8 parts (reduction-parts), each a
// contiguous block of 512 rows of the matrix summed into its own zeroed row
// of an [8, 1, 4096] tensor (parts outermost); the parts are then added to
// the init in order. A thousand rows get row and column blocks and a blocked
// reduction.
// CHECK-LABEL: func.func @one_row
// CHECK-SAME: %{{.*}}: tensor<4096x4096xf32>, %[[INIT:[a-z0-9]+]]: tensor<1x4096xf32>
// CHECK: %[[PARTS:[a-z0-9_]+]] = scf.forall (%[[P:.*]]) in (8) shared_outs(%{{.*}} = %{{.*}}) -> (tensor<8x1x4096xf32>)
// CHECK: linalg.fill
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<1x512xf32>, tensor<512x4096xf32>) outs(%{{.*}} : tensor<1x4096xf32>)
// CHECK: tensor.parallel_insert_slice %{{.*}} into %{{.*}}[%[[P]], 0, 0] [1, 1, 4096]
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction", "parallel", "parallel"]} ins(%[[PARTS]] : tensor<8x1x4096xf32>) outs(%[[INIT]] : tensor<1x4096xf32>)
// CHECK: scf.forall (%{{.*}}, %{{.*}}) = (0, 0) to (1000, 4096) step (256, 256)
// CHECK: scf.for %{{.*}} = %c0 to %c4096 step %c128
// CHECK: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<?x128xf32>, tensor<128x256xf32>)
// With reduction-parts=0 the row gets column blocks, its reduction whole.
// COLUMNS-LABEL: func.func @one_row
// COLUMNS: scf.forall (%{{.*}}) = (0) to (4096) step (256)
// COLUMNS-NOT: scf.for
// COLUMNS: linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<1x4096xf32>, tensor<4096x256xf32>)
func.func @one_row(%x: tensor<1x4096xf32>, %w: tensor<4096x4096xf32>, %init: tensor<1x4096xf32>,
                   %xs: tensor<1000x4096xf32>, %inits: tensor<1000x4096xf32>)
    -> (tensor<1x4096xf32>, tensor<1000x4096xf32>) {
  %r = linalg.matmul ins(%x, %w : tensor<1x4096xf32>, tensor<4096x4096xf32>) outs(%init : tensor<1x4096xf32>) -> tensor<1x4096xf32>
  %rs = linalg.matmul ins(%xs, %w : tensor<1000x4096xf32>, tensor<4096x4096xf32>) outs(%inits : tensor<1000x4096xf32>) -> tensor<1000x4096xf32>
  return %r, %rs : tensor<1x4096xf32>, tensor<1000x4096xf32>
}

// -----

// An op whose work grows with the prompt length (a dynamic loop): its
// outermost parallel loop with more than one iteration (the heads, after a
// unit batch loop; the tokens of an op linear in the prompt) in at most
// `chunks` pieces.
// CHECK-LABEL: func.func @elementwise
// CHECK: scf.forall (%{{.*}}) in (4)
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x2x?x?xf32>)
// CHECK: scf.forall.in_parallel
// CHECK: scf.forall (%{{.*}}) in (4)
// CHECK: linalg.generic {{.*}} outs(%{{.*}} : tensor<1x?x64xf32>)
func.func @elementwise(%s: tensor<1x8x?x?xf32>, %x: tensor<1x?x64xf32>, %init: tensor<1x?x64xf32>)
    -> (tensor<1x8x?x?xf32>, tensor<1x?x64xf32>) {
  %p = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>],
                       iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      outs(%s : tensor<1x8x?x?xf32>) {
  ^bb0(%a: f32):
    %e = math.exp %a : f32
    linalg.yield %e : f32
  } -> tensor<1x8x?x?xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<1x?x64xf32>) outs(%init : tensor<1x?x64xf32>) {
  ^bb0(%a: f32, %b: f32):
    %e = math.exp %a : f32
    linalg.yield %e : f32
  } -> tensor<1x?x64xf32>
  return %p, %r : tensor<1x8x?x?xf32>, tensor<1x?x64xf32>
}

// -----

// A body with a run-time check stays at the top of the function (a check
// that reports to the caller returns from the function body), and so does
// an op already inside a loop.
// CHECK-LABEL: func.func @checked_gather
// CHECK-NOT: scf.forall
// CHECK: linalg.generic
// CHECK: cf.assert
// CHECK: scf.for
// CHECK-NOT: scf.forall
// CHECK: linalg.generic
// CHECK: return
func.func @checked_gather(%ids: tensor<?xindex>, %table: tensor<256x?xf32>, %init: tensor<?x?xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c256 = arith.constant 256 : index
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%ids : tensor<?xindex>) outs(%init : tensor<?x?xf32>) {
  ^bb0(%i: index, %o: f32):
    %ok = arith.cmpi ult, %i, %c256 : index
    cf.assert %ok, "index must be smaller than dim size"
    %j = linalg.index 1 : index
    %e = tensor.extract %table[%i, %j] : tensor<256x?xf32>
    linalg.yield %e : f32
  } -> tensor<?x?xf32>
  %s = scf.for %it = %c0 to %c2 step %c1 iter_args(%acc = %init) -> tensor<?x?xf32> {
    %n = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>],
                         iterator_types = ["parallel", "parallel"]}
        outs(%acc : tensor<?x?xf32>) {
    ^bb0(%o: f32):
      %t = arith.addf %o, %o : f32
      linalg.yield %t : f32
    } -> tensor<?x?xf32>
    scf.yield %n : tensor<?x?xf32>
  }
  return %r, %s : tensor<?x?xf32>, tensor<?x?xf32>
}

// -----

// Column blocks are halved until there are four: 512 columns with
// columns=256 go to the threads in blocks of 128. A projection no wider than
// 64 columns is split along its tokens instead.
// CHECK-LABEL: func.func @narrow
// CHECK: scf.forall (%{{.*}}, %{{.*}}) = (0, 0) to (%{{.*}}, 512) step (256, 128)
// CHECK: linalg.matmul {{.*}} outs(%{{.*}} : tensor<?x128xf32>)
// CHECK: scf.forall.in_parallel
// CHECK: scf.forall (%{{.*}}) in (4)
// CHECK: linalg.matmul {{.*}} outs(%{{.*}} : tensor<?x64xf32>)
func.func @narrow(%x: tensor<?x64xf32>, %w: tensor<64x512xf32>, %init: tensor<?x512xf32>,
                  %v: tensor<64x64xf32>, %init2: tensor<?x64xf32>) -> (tensor<?x512xf32>, tensor<?x64xf32>) {
  %r = linalg.matmul ins(%x, %w : tensor<?x64xf32>, tensor<64x512xf32>) outs(%init : tensor<?x512xf32>) -> tensor<?x512xf32>
  %s = linalg.matmul ins(%x, %v : tensor<?x64xf32>, tensor<64x64xf32>) outs(%init2 : tensor<?x64xf32>) -> tensor<?x64xf32>
  return %r, %s : tensor<?x512xf32>, tensor<?x64xf32>
}

// -----

// A block that does not divide the columns would make every block's size
// dynamic: 576 columns with columns=256 are halved to 128, then lowered to
// 96, the largest multiple of 32 that divides 576 (six static blocks).
// CHECK-LABEL: func.func @uneven
// CHECK: scf.forall (%{{.*}}, %{{.*}}) = (0, 0) to (%{{.*}}, 576) step (256, 96)
// CHECK: linalg.matmul {{.*}} outs(%{{.*}} : tensor<?x96xf32>)
func.func @uneven(%x: tensor<?x576xf32>, %w: tensor<576x576xf32>, %init: tensor<?x576xf32>) -> tensor<?x576xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<?x576xf32>, tensor<576x576xf32>) outs(%init : tensor<?x576xf32>) -> tensor<?x576xf32>
  return %r : tensor<?x576xf32>
}

// -----

// The rows are split too, row-block at a time: the threads get many equal
// pieces (192 columns are only three blocks of 64, two of them on one of two
// threads), and a block's partial sums stay in the caches between the passes
// over its reduction. row-block=0 keeps whole columns of rows.
// CHECK-LABEL: func.func @row_blocks
// CHECK: scf.forall (%{{.*}}, %{{.*}}) = (0, 0) to (%{{.*}}, 192) step (256, 64)
// CHECK: linalg.matmul {{.*}} outs(%{{.*}} : tensor<?x64xf32>)
// WHOLE-LABEL: func.func @row_blocks
// WHOLE: scf.forall (%{{.*}}) = (0) to (192) step (64)
func.func @row_blocks(%x: tensor<?x576xf32>, %w: tensor<576x192xf32>, %init: tensor<?x192xf32>) -> tensor<?x192xf32> {
  %r = linalg.matmul ins(%x, %w : tensor<?x576xf32>, tensor<576x192xf32>) outs(%init : tensor<?x192xf32>) -> tensor<?x192xf32>
  return %r : tensor<?x192xf32>
}
