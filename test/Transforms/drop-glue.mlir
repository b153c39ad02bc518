// snapkv-drop-glue erases entry points that only call, and makes the callees they define
// public (declarations stay private).
// RUN: snapkv-opt %s -split-input-file -verify-diagnostics \
// RUN:   --snapkv-drop-glue="functions=prefill" | FileCheck %s

// CHECK-LABEL: module
// CHECK-NOT:   func.func @prefill
// CHECK:       func.func private @embed(
// CHECK:       func.func @layer(
// CHECK:       func.func private @unused(
module {
  func.func @prefill(%ids: tensor<1x?xi64>) -> tensor<1x?x4xf32> {
    %h = call @embed(%ids) : (tensor<1x?xi64>) -> tensor<1x?x4xf32>
    %c = tensor.cast %h : tensor<1x?x4xf32> to tensor<1x?x4xf32>
    %l = call @layer(%c) : (tensor<1x?x4xf32>) -> tensor<1x?x4xf32>
    return %l : tensor<1x?x4xf32>
  }
  func.func private @embed(%ids: tensor<1x?xi64>) -> tensor<1x?x4xf32>
  func.func private @layer(%h: tensor<1x?x4xf32>) -> tensor<1x?x4xf32> {
    return %h : tensor<1x?x4xf32>
  }
  func.func private @unused(%h: tensor<1x?x4xf32>) -> tensor<1x?x4xf32> {
    return %h : tensor<1x?x4xf32>
  }
}

// -----

// expected-error @below {{snapkv-drop-glue: no function @prefill}}
module {
  func.func @decode() {
    return
  }
}

// -----

module {
  // expected-error @below {{snapkv-drop-glue: @prefill holds more than func.call, tensor.cast, static tensor.extract_slice and func.return}}
  func.func @prefill(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = arith.addf %x, %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}
