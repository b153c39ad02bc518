// KeyDiff scores (scoring keydiff, docs/semantics.md) lower for the CPU row by row: the
// keys' squared norms, the anchor (sum of unit keys over all L rows), the prefix keys' dot
// products with it, then 1 - cosine; with gqa expand a kv head's scores are broadcast to its
// query heads. The differential test checks the numbers; tiling=gpu is an error naming the op.
// RUN: snapkv-opt %s --convert-snapkv-to-linalg="tiling=cpu" | FileCheck %s
// RUN: snapkv-opt %s --convert-snapkv-to-linalg="tiling=gpu" -verify-diagnostics -o /dev/null
// CHECK-LABEL: func.func @keydiff
// The select stays whole on the CPU (no stage form): its run-time checks first, then each
// step tiled through TilingInterface into an scf.forall over its (batch, head) rows.
// CHECK:         cf.assert %{{.*}}, "snapkv.select: prompt length (keys dim 2) must be below 2^31 - 1"
// CHECK:         scf.forall (%{{.*}}, %{{.*}}) in (1, 2) shared_outs({{.*}}) -> (tensor<1x2x?xf32>)
// CHECK:         linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}} : tensor<1x1x?x4xf16>) outs(%{{.*}} : tensor<1x1x?xf32>)
// CHECK:           arith.extf
// CHECK:         scf.forall (%{{.*}}, %{{.*}}) in (1, 2) shared_outs({{.*}}) -> (tensor<1x2x4xf32>)
// CHECK:         linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}}, %{{.*}} : tensor<1x1x?x4xf16>, tensor<1x1x?xf32>) outs(%{{.*}} : tensor<1x1x4xf32>)
// CHECK:           math.sqrt
// CHECK:         math.sqrt
// CHECK:         arith.subf
// CHECK:         scf.forall (%{{.*}}, %{{.*}}) in (1, 2) shared_outs({{.*}}) -> (tensor<1x2x2x?xf32>)
// CHECK:         linalg.broadcast ins(%{{.*}} : tensor<1x1x?xf32>) outs(%{{.*}} : tensor<1x1x2x?xf32>) dimensions = [2]
// CHECK:         tensor.collapse_shape {{.*}} {{\[}}[0], [1, 2], [3]] : tensor<1x2x2x?xf32> into tensor<1x4x?xf32>
func.func @keydiff(%q: tensor<1x4x2x4xf16>, %k: tensor<1x2x?x4xf16>) -> tensor<1x4x?xi64> {
  // expected-error @+1 {{'snapkv.select' op has no GPU lowering (target=gpu); it is lowered for the CPU only}}
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 6 scoring keydiff : (tensor<1x4x2x4xf16>, tensor<1x2x?x4xf16>, tensor<1x2x?x4xf16>) -> (tensor<1x4x?x4xf16>, tensor<1x4x?x4xf16>, tensor<1x4x?xi64>)
  return %idx : tensor<1x4x?xi64>
}
