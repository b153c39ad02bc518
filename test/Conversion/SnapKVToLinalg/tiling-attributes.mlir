// tiling=cpu records how to tile the formulation, as data (#snapkv.tile on a group's root,
// snapkv.fuse on the producers fused into its tile); snapkv-tile-and-fuse applies it. The
// record survives printing: tiling the printed IR gives what one process gives.
// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=cpu | FileCheck %s
// RUN: snapkv-opt %s --convert-snapkv-to-linalg | FileCheck %s --check-prefix=NONE
// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=gpu | FileCheck %s --check-prefix=GPU
// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=cpu -o %t.annotated
// RUN: snapkv-opt %t.annotated --snapkv-tile-and-fuse -o %t.two
// RUN: snapkv-opt %s --convert-snapkv-to-linalg=tiling=cpu --snapkv-tile-and-fuse -o %t.one
// RUN: diff %t.one %t.two
// Groups are numbered per function when the conversion runs on each function on its own,
// and tiled per function.
// RUN: snapkv-opt %s --pass-pipeline="builtin.module(func.func(convert-snapkv-to-linalg{tiling=cpu}),snapkv-tile-and-fuse)" \
// RUN:   | FileCheck %s --check-prefix=PERFUNC --implicit-check-not=snapkv.tile

// With keep-logits, one (batch, query head) row at a time: the queries of the row (group 0),
// then the tile statistics (group 1), into whose tile the logits and their fills are fused.
// CHECK-LABEL: func.func @mean
// CHECK:       scf.for
// CHECK:         linalg.generic {{.*}} attrs = {snapkv.tile = #snapkv.tile<group = 0, sizes = [1, 1, 1, 0, 0], mapping = forall>}
// CHECK:         linalg.fill {snapkv.fuse = array<i64: 1>}
// CHECK:         %[[LOGITS:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<1x1x1x40x1x4xf32>) attrs = {snapkv.fuse = array<i64: 1>}
// CHECK:         linalg.generic {{.*}} ins(%[[LOGITS]], {{.*}} attrs = {snapkv.fuse = array<i64: 1>}
// CHECK:         linalg.generic {{.*}} ins(%[[LOGITS]], {{.*}} attrs = {snapkv.tile = #snapkv.tile<group = 1, sizes = [1, 1, 1, 1, 0, 0], mapping = forall>}
// NONE-NOT: snapkv.tile
// NONE-NOT: snapkv.fuse
// GPU: snapkv.tile = #snapkv.tile<group = 0, sizes = [1, 1, 1, 0, 0, 0], mapping = gpu_blocks>
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
