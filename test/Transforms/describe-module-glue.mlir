// An entry point that only calls its layer functions stays glue (run call by
// call by the Python runner) after snapkv-append-in-place: each layer's row
// counts are a static slice of `rows`, described as a "slice" step, and
// snapkv-drop-glue accepts it.
// RUN: snapkv-opt %s --snapkv-append-in-place --snapkv-describe-module -o /dev/null | FileCheck %s
// RUN: snapkv-opt %s --snapkv-append-in-place --snapkv-drop-glue=functions=decode | FileCheck %s --check-prefix=DROPPED

// CHECK:          "rows": 5
// CHECK:        "glue": [
// CHECK-NEXT:     {
// CHECK-NEXT:       "offsets": [
// CHECK-NEXT:         0
// CHECK-NEXT:       ],
// CHECK-NEXT:       "op": "slice",
// CHECK-NEXT:       "operands": [
// CHECK-NEXT:         5
// CHECK-NEXT:       ],
// CHECK-NEXT:       "results": [
// CHECK-NEXT:         6
// CHECK-NEXT:       ],
// CHECK-NEXT:       "sizes": [
// CHECK-NEXT:         2
// CHECK-NEXT:       ],
// CHECK-NEXT:       "strides": [
// CHECK-NEXT:         1
// CHECK-NEXT:       ],
// CHECK:            "text": "tensor<2xi64>"
// CHECK:            "callee": "layer",
// CHECK-NEXT:       "op": "call",
// CHECK-NEXT:       "operands": [
// CHECK-NEXT:         0,
// CHECK-NEXT:         1,
// CHECK-NEXT:         2,
// CHECK-NEXT:         6
// CHECK:            "offsets": [
// CHECK-NEXT:         2
// CHECK-NEXT:       ],
// CHECK-NEXT:       "op": "slice",
// CHECK:            "op": "return",
// CHECK:        "name": "decode",

// DROPPED-NOT: func.func @decode
// DROPPED: func.func @layer(

func.func private @layer(%h: tensor<1x1x4xf32>, %k: tensor<1x2x?x4xf32>, %v: tensor<1x2x?x4xf32>)
    -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) {
  %x = tensor.expand_shape %h [[0], [1, 2], [3]] output_shape [1, 1, 1, 4] : tensor<1x1x4xf32> into tensor<1x1x1x4xf32>
  %r = tensor.concat dim(1) %x, %x : (tensor<1x1x1x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x2x1x4xf32>
  %ks = tensor.concat dim(2) %k, %r : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  %vs = tensor.concat dim(2) %v, %r : (tensor<1x2x?x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x?x4xf32>
  return %h, %ks, %vs : tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>
}
func.func @decode(%h: tensor<1x1x4xf32>, %k0: tensor<1x2x?x4xf32>, %v0: tensor<1x2x?x4xf32>,
                  %k1: tensor<1x2x?x4xf32>, %v1: tensor<1x2x?x4xf32>)
    -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) {
  %a:3 = call @layer(%h, %k0, %v0) : (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>)
  %b:3 = call @layer(%a#0, %k1, %v1) : (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) -> (tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>)
  return %b#0, %a#1, %a#2, %b#1, %b#2 : tensor<1x1x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>
}
