// tiling=gpu records the GPU kernels of the formulation as data (#snapkv.tile on a group's
// root, snapkv.fuse on the producers fused into its block loop); snapkv-tile-and-fuse applies
// it. The record survives printing: tiling the printed IR gives what one process gives. The
// CPU records none (it tiles the stage ops through TilingInterface), nor does an untiled op.
// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=gpu | FileCheck %s
// RUN: snapkv-opt %s --convert-snapkv-to-linalg | FileCheck %s --check-prefix=NONE
// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=cpu | FileCheck %s --check-prefix=NONE
// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=gpu -o %t.annotated
// RUN: snapkv-opt %t.annotated --snapkv-tile-and-fuse -o %t.two
// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=gpu --snapkv-tile-and-fuse -o %t.one
// RUN: diff %t.one %t.two
// Groups are numbered per function when the conversion runs on each function on its own,
// and tiled per function.
// RUN: snapkv-opt %s --pass-pipeline="builtin.module(func.func(convert-snapkv-to-linalg{tiling=gpu}),snapkv-tile-and-fuse)" \
// RUN:   | FileCheck %s --check-prefix=PERFUNC --implicit-check-not=snapkv.tile

// The tile statistics, one block per (batch, kv head, key tile) (group 0), with the staged
// queries and key tiles, the logits and their fills fused into it; then the row statistics,
// one block per (batch, kv head) (group 1).
// CHECK-LABEL: func.func @mean
// CHECK:       linalg.generic {{.*}} outs(%{{.*}} : tensor<2x2x2x8x4xf32>) attrs =  {snapkv.fuse = array<i64: 0>}
// CHECK:       linalg.fill {snapkv.fuse = array<i64: 0>}
// CHECK:       %[[LOGITS:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<2x2x1x40x2x4xf32>) attrs =  {snapkv.fuse = array<i64: 0>}
// CHECK:       linalg.generic {{.*}} ins(%[[LOGITS]], {{.*}} attrs =  {snapkv.fuse = array<i64: 0>}
// CHECK:       linalg.generic {{.*}} ins(%[[LOGITS]], {{.*}} snapkv.tile = #snapkv.tile<group = 0, sizes = [1, 1, 1, 0, 0, 0], mapping = gpu_blocks>
// CHECK:       snapkv.tile = #snapkv.tile<group = 1, sizes = [1, 1, 0, 0], mapping = gpu_blocks>
// NONE-NOT: snapkv.tile
// NONE-NOT: snapkv.fuse
// PERFUNC-LABEL: func.func @mean
// PERFUNC: scf.forall
// PERFUNC-LABEL: func.func @expand
// PERFUNC: scf.forall
func.func @mean(%q: tensor<2x4x4x8xf32>, %k: tensor<2x2x40x8xf32>, %v: tensor<2x2x40x8xf32>)
    -> (tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 4 capacity 16 gqa mean
      : (tensor<2x4x4x8xf32>, tensor<2x2x40x8xf32>, tensor<2x2x40x8xf32>)
      -> (tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16xi64>)
  return %a, %b, %c : tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16xi64>
}

func.func @expand(%q: tensor<2x4x4x8xf32>, %k: tensor<2x2x40x8xf32>, %v: tensor<2x2x40x8xf32>)
    -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16xi64>) {
  %a, %b, %c = snapkv.select %q, %k, %v window 4 capacity 16
      : (tensor<2x4x4x8xf32>, tensor<2x2x40x8xf32>, tensor<2x2x40x8xf32>)
      -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16xi64>)
  return %a, %b, %c : tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16xi64>
}
