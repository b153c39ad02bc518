// snapkv-tile-and-fuse applies the tiling recorded in the IR, one group at a time.
// RUN: snapkv-opt %s -split-input-file -verify-diagnostics --snapkv-tile-and-fuse \
// RUN:   | FileCheck %s --implicit-check-not=snapkv.tile --implicit-check-not=snapkv.fuse

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// A row sum (group 0) whose producer, an elementwise exp, is fused into each row's tile:
// the exp of one row at a time, never of the whole matrix.
// CHECK-LABEL: func.func @fused_row
// CHECK:         scf.forall (%[[I:.*]]) in (8) shared_outs(%[[OUT:.*]] = %{{.*}}) -> (tensor<8xf32>)
// CHECK:           %[[X:.*]] = tensor.extract_slice %{{.*}}[%[[I]], 0] [1, 16] [1, 1] : tensor<8x16xf32> to tensor<1x16xf32>
// CHECK:           %[[E:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<1x16xf32>)
// CHECK:             math.exp
// CHECK:           linalg.generic {{.*}} ins(%[[E]] : tensor<1x16xf32>)
// CHECK:             arith.addf
// CHECK:         return
func.func @fused_row(%x: tensor<8x16xf32>) -> tensor<8xf32> {
  %e0 = tensor.empty() : tensor<8x16xf32>
  %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x16xf32>) outs(%e0 : tensor<8x16xf32>) attrs = {snapkv.fuse = array<i64: 0>} {
  ^bb0(%in: f32, %out: f32):
    %v = math.exp %in : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8xf32>) -> tensor<8xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%exp : tensor<8x16xf32>) outs(%init : tensor<8xf32>)
      attrs = {snapkv.tile = #snapkv.tile<group = 0, sizes = [1, 0], mapping = forall>} {
  ^bb0(%in: f32, %out: f32):
    %v = arith.addf %in, %out : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %sum : tensor<8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>

// gpu_blocks: the tiled loops become GPU blocks, the innermost on x. The producer is
// also returned, so the loop computes it in its tile and yields it.
// CHECK-LABEL: func.func @blocks
// CHECK:         %[[R:.*]]:2 = scf.forall (%{{.*}}, %{{.*}}) = (0, 0) to (8, 16) step (2, 4) shared_outs({{.*}}) -> (tensor<8x16xf32>, tensor<8x16xf32>)
// CHECK:           math.exp
// CHECK:           arith.mulf
// CHECK:         } {mapping = [#gpu.block<y>, #gpu.block<x>]}
// CHECK:         return %[[R]]#{{[01]}}, %[[R]]#{{[01]}}
func.func @blocks(%x: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %e0 = tensor.empty() : tensor<8x16xf32>
  %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<8x16xf32>) outs(%e0 : tensor<8x16xf32>) attrs = {snapkv.fuse = array<i64: 3>} {
  ^bb0(%in: f32, %out: f32):
    %v = math.exp %in : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %e1 = tensor.empty() : tensor<8x16xf32>
  %sq = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%exp : tensor<8x16xf32>) outs(%e1 : tensor<8x16xf32>)
      attrs = {snapkv.tile = #snapkv.tile<group = 3, sizes = [2, 4], mapping = gpu_blocks>} {
  ^bb0(%in: f32, %out: f32):
    %v = arith.mulf %in, %in : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  return %sq, %exp : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

#id = affine_map<(d0) -> (d0)>

// Groups are tiled consumers first; a producer of no group stays outside the loops.
// CHECK-LABEL: func.func @two_groups
// CHECK:         linalg.generic {{.*}} ins(%{{.*}} : tensor<4xf32>)
// CHECK:           math.sqrt
// CHECK:         scf.forall
// CHECK:           math.exp
// CHECK:         scf.forall
// CHECK:           math.log
func.func @two_groups(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %v = math.sqrt %in : f32
    linalg.yield %v : f32
  } -> tensor<4xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<4xf32>) outs(%e : tensor<4xf32>)
      attrs = {snapkv.tile = #snapkv.tile<group = 0, sizes = [1], mapping = forall>} {
  ^bb0(%in: f32, %out: f32):
    %v = math.exp %in : f32
    linalg.yield %v : f32
  } -> tensor<4xf32>
  %c = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%b : tensor<4xf32>) outs(%e : tensor<4xf32>)
      attrs = {snapkv.tile = #snapkv.tile<group = 1, sizes = [2], mapping = forall>} {
  ^bb0(%in: f32, %out: f32):
    %v = math.log %in : f32
    linalg.yield %v : f32
  } -> tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

func.func @not_tileable() -> tensor<4xf32> {
  // expected-error @below {{snapkv-tile-and-fuse: tensor.empty is not tileable (TilingInterface)}}
  %e = tensor.empty() {snapkv.tile = #snapkv.tile<group = 0, sizes = [1], mapping = forall>} : tensor<4xf32>
  return %e : tensor<4xf32>
}

// -----

#id = affine_map<(d0) -> (d0)>
func.func @wrong_sizes(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  // expected-error @below {{snapkv-tile-and-fuse: 2 tile sizes for an op with 1 loops}}
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>)
      attrs = {snapkv.tile = #snapkv.tile<group = 0, sizes = [1, 1], mapping = forall>} {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4xf32>
  return %b : tensor<4xf32>
}

// -----

#id = affine_map<(d0) -> (d0)>
func.func @two_roots(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>)
      attrs = {snapkv.tile = #snapkv.tile<group = 0, sizes = [1], mapping = forall>} {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4xf32>
  // expected-error @below {{snapkv-tile-and-fuse: two roots of tile group 0}}
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<4xf32>) outs(%e : tensor<4xf32>)
      attrs = {snapkv.tile = #snapkv.tile<group = 0, sizes = [1], mapping = forall>} {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4xf32>
  return %b : tensor<4xf32>
}

// -----

func.func @reduction_tiled(%x: tensor<8xf32>, %e: tensor<f32>) -> tensor<f32> {
  // expected-error @below {{snapkv-tile-and-fuse: loop 0 is a reduction; only parallel loops are tiled}}
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>], iterator_types = ["reduction"]}
      ins(%x : tensor<8xf32>) outs(%e : tensor<f32>)
      attrs = {snapkv.tile = #snapkv.tile<group = 0, sizes = [2], mapping = forall>} {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  return %r : tensor<f32>
}

// -----

#id = affine_map<(d0) -> (d0)>
func.func @buffers(%x: memref<4xf32>, %y: memref<4xf32>) {
  // expected-error @below {{snapkv-tile-and-fuse: the op works on buffers; groups are tiled on tensors}}
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : memref<4xf32>) outs(%y : memref<4xf32>)
      attrs = {snapkv.tile = #snapkv.tile<group = 0, sizes = [2], mapping = forall>} {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  return
}
