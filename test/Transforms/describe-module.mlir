// snapkv-describe-module: the module's interface as JSON, the module unchanged.
// RUN: snapkv-opt %s --snapkv-describe-module -o %t.out | FileCheck %s
// RUN: snapkv-opt %s -o %t.plain
// RUN: diff %t.plain %t.out
// An input without functions still gives the object.
// RUN: echo "module {}" | snapkv-opt --snapkv-describe-module -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=EMPTY

module attributes {snapkv.refusal = {function = "prefill", message = "m", reason = "no-attention"}, other.attr = 1 : i64} {
  // The glue: only calls, a cast and the return.
  func.func @prefill(%ids: tensor<1x?xi64>, %w: tensor<8x4xf32> {snapkv.weight = "model.w", snapkv.transposed}) -> (tensor<1x?x4xf32>, tensor<1x2x?x4xf32>) {
    %h = call @embed(%ids, %w) : (tensor<1x?xi64>, tensor<8x4xf32>) -> tensor<1x?x4xf32>
    %l:2 = call @layer(%h) : (tensor<1x?x4xf32>) -> (tensor<1x?x4xf32>, tensor<1x2x?x4xf32>)
    %c = tensor.cast %l#1 : tensor<1x2x?x4xf32> to tensor<1x2x?x4xf32>
    return %l#0, %c : tensor<1x?x4xf32>, tensor<1x2x?x4xf32>
  }
  func.func private @embed(%ids: tensor<1x?xi64>, %w: tensor<8x4xf32>) -> tensor<1x?x4xf32>
  func.func private @layer(%h: tensor<1x?x4xf32>) -> (tensor<1x?x4xf32>, tensor<1x2x?x4xf32>) attributes {snapkv.exposed_scores = ["window=2 capacity=4"]} {
    %c0 = arith.constant 0 : index
    %n = tensor.dim %h, %c0 : tensor<1x?x4xf32>
    %q = tensor.empty() : tensor<1x4x2x4xf32>
    %k = tensor.empty(%n) : tensor<1x2x?x4xf32>
    %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 4 gqa mean scale 5.000000e-01 : (tensor<1x4x2x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>) -> (tensor<1x2x?x4xf32>, tensor<1x2x?x4xf32>, tensor<1x2x?xi64>)
    return %h, %ko : tensor<1x?x4xf32>, tensor<1x2x?x4xf32>
  }
}

// CHECK:      {
// CHECK-NEXT:   "attributes": {
// CHECK-NEXT:     "snapkv.refusal": {
// CHECK-NEXT:       "function": "prefill",
// CHECK-NEXT:       "message": "m",
// CHECK-NEXT:       "reason": "no-attention"
// CHECK-NEXT:     }
// CHECK-NEXT:   },
// CHECK-NEXT:   "functions": [
// CHECK-NEXT:     {
// CHECK-NEXT:       "arguments": [
// CHECK-NEXT:         {
// CHECK-NEXT:           "transposed": false,
// CHECK-NEXT:           "type": {
// CHECK-NEXT:             "element": "i64",
// CHECK-NEXT:             "shape": [
// CHECK-NEXT:               1,
// CHECK-NEXT:               null
// CHECK-NEXT:             ],
// CHECK-NEXT:             "text": "tensor<1x?xi64>"
// CHECK-NEXT:           },
// CHECK-NEXT:           "weight": null
// CHECK-NEXT:         },
// CHECK-NEXT:         {
// CHECK-NEXT:           "transposed": true,
// CHECK:                "weight": "model.w"
// CHECK:            "attributes": {},
// CHECK-NEXT:       "callees": [
// CHECK-NEXT:         "embed",
// CHECK-NEXT:         "layer"
// CHECK-NEXT:       ],
// CHECK-NEXT:       "external": false,
// CHECK-NEXT:       "glue": [
// CHECK-NEXT:         {
// CHECK-NEXT:           "callee": "embed",
// CHECK-NEXT:           "op": "call",
// CHECK-NEXT:           "operands": [
// CHECK-NEXT:             0,
// CHECK-NEXT:             1
// CHECK-NEXT:           ],
// CHECK-NEXT:           "results": [
// CHECK-NEXT:             2
// CHECK-NEXT:           ]
// CHECK-NEXT:         },
// CHECK-NEXT:         {
// CHECK-NEXT:           "callee": "layer",
// CHECK-NEXT:           "op": "call",
// CHECK-NEXT:           "operands": [
// CHECK-NEXT:             2
// CHECK-NEXT:           ],
// CHECK-NEXT:           "results": [
// CHECK-NEXT:             3,
// CHECK-NEXT:             4
// CHECK-NEXT:           ]
// CHECK-NEXT:         },
// CHECK-NEXT:         {
// CHECK-NEXT:           "op": "cast",
// CHECK-NEXT:           "operands": [
// CHECK-NEXT:             4
// CHECK-NEXT:           ],
// CHECK-NEXT:           "results": [
// CHECK-NEXT:             5
// CHECK-NEXT:           ],
// CHECK-NEXT:           "type": {
// CHECK:                  "text": "tensor<1x2x?x4xf32>"
// CHECK:                "op": "return",
// CHECK-NEXT:           "operands": [
// CHECK-NEXT:             3,
// CHECK-NEXT:             5
// CHECK-NEXT:           ]
// CHECK:            "name": "prefill",
// CHECK:            "selects": [],
// CHECK:            "visibility": "public"
// CHECK:            "external": true,
// CHECK-NEXT:       "glue": null,
// CHECK:            "name": "embed",
// CHECK:            "visibility": "private"
// CHECK:            "attributes": {
// CHECK-NEXT:         "snapkv.exposed_scores": [
// CHECK-NEXT:           "window=2 capacity=4"
// CHECK-NEXT:         ]
// CHECK-NEXT:       },
// CHECK-NEXT:       "callees": [],
// CHECK-NEXT:       "external": false,
// CHECK-NEXT:       "glue": null,
// CHECK:            "name": "layer",
// CHECK:            "selects": [
// CHECK-NEXT:         {
// CHECK-NEXT:           "block": 1,
// CHECK-NEXT:           "capacity": 4,
// CHECK-NEXT:           "gqa": "mean",
// CHECK-NEXT:           "kernel": 5,
// CHECK-NEXT:           "op": "snapkv.select",
// CHECK-NEXT:           "operands": [
// CHECK:                "order": "position",
// CHECK-NEXT:           "pooling": "avg",
// CHECK-NEXT:           "properties": "{block = 1 : i64, capacity = 4 : i64, gqa = #snapkv<gqa mean>, kernel = 5 : i64, order = #snapkv<order position>, pooling = #snapkv<pooling avg>, scale = 5.000000e-01 : f32, scoring = #snapkv<scoring votes>, window = 2 : i64}",
// CHECK-NEXT:           "results": [
// CHECK:                    "text": "tensor<1x2x?xi64>"
// CHECK:                "scale": 0.5,
// CHECK-NEXT:           "scoring": "votes",
// CHECK-NEXT:           "seed": null,
// CHECK-NEXT:           "sinks": null,
// CHECK-NEXT:           "window": 2
// CHECK-NEXT:         }
// CHECK-NEXT:       ],
// CHECK-NEXT:       "tensor_types": [
// CHECK-NEXT:         {
// CHECK:                "text": "tensor<1x4x2x4xf32>"
// CHECK:                "text": "tensor<1x2x?x4xf32>"
// CHECK:                "text": "tensor<1x2x?xi64>"
// CHECK:                "text": "tensor<1x?x4xf32>"
// CHECK-NEXT:         }
// CHECK-NEXT:       ],
// CHECK-NEXT:       "visibility": "private"
// CHECK-NEXT:     }
// CHECK-NEXT:   ],
// CHECK-NEXT:   "version": 1
// CHECK-NEXT: }

// EMPTY:      {
// EMPTY-NEXT:   "attributes": {},
// EMPTY-NEXT:   "functions": [],
// EMPTY-NEXT:   "version": 1
// EMPTY-NEXT: }
