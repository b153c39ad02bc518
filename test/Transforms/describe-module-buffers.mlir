// snapkv-describe-module marks memref arguments (the caches a decode step
// writes in place after snapkv-append-in-place) and shows the convention the
// pass recorded; a memref with a layout has no shape or element.
// RUN: snapkv-opt %s --snapkv-describe-module -o /dev/null | FileCheck %s

// CHECK:      "arguments": [
// CHECK-NEXT:   {
// CHECK-NEXT:     "transposed": false,
// CHECK-NEXT:     "type": {
// CHECK-NEXT:       "element": "f32",
// CHECK-NEXT:       "memref": true,
// CHECK-NEXT:       "shape": [
// CHECK-NEXT:         1,
// CHECK-NEXT:         2,
// CHECK-NEXT:         null,
// CHECK-NEXT:         4
// CHECK-NEXT:       ],
// CHECK-NEXT:       "text": "memref<1x2x?x4xf32>"
// CHECK:            "text": "tensor<1xi64>"
// CHECK:          "type": {
// CHECK-NEXT:       "text": "memref<4xf32, strided<[2]>>"
// CHECK-NEXT:     },
// CHECK:        "attributes": {
// CHECK-NEXT:     "snapkv.append_in_place": {
// CHECK-NEXT:       "buffers": [
// CHECK-NEXT:         0
// CHECK-NEXT:       ],
// CHECK-NEXT:       "dim": 2,
// CHECK-NEXT:       "rows": 1
func.func @decode(%k: memref<1x2x?x4xf32>, %rows: tensor<1xi64>, %s: memref<4xf32, strided<[2]>>)
    attributes {snapkv.append_in_place = {buffers = [0], dim = 2, rows = 1}} {
  return
}
