// RUN: snapkv-opt %s -split-input-file -verify-diagnostics | FileCheck %s
// snapkv.sdpa (SDPA kept by the export): the generic form the export writes
// parses into the op (printed in its own form); the verifier checks that the
// extents agree.

// CHECK-LABEL: func.func @generic
// CHECK: snapkv.sdpa %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} scale 1.250000e-01 outs(%{{.*}} : tensor<4x?x8xf32>) : tensor<4x?x8xf32>, tensor<4x?x8xf32>, tensor<4x?x8xf32>, tensor<4x?x?xi1> -> tensor<4x?x8xf32>
// CHECK: snapkv.sdpa %{{.*}}, %{{.*}}, %{{.*}} outs(%{{.*}} : tensor<4x1x8xbf16>) : tensor<4x1x8xbf16>, tensor<4x?x8xbf16>, tensor<4x?x8xbf16> -> tensor<4x1x8xbf16>
func.func @generic(%q: tensor<4x?x8xf32>, %k: tensor<4x?x8xf32>, %v: tensor<4x?x8xf32>, %m: tensor<4x?x?xi1>, %i: tensor<4x?x8xf32>,
                   %q1: tensor<4x1x8xbf16>, %k1: tensor<4x?x8xbf16>, %i1: tensor<4x1x8xbf16>) -> (tensor<4x?x8xf32>, tensor<4x1x8xbf16>) {
  %0 = "snapkv.sdpa"(%q, %k, %v, %m, %i) {scale = 0.125 : f64} : (tensor<4x?x8xf32>, tensor<4x?x8xf32>, tensor<4x?x8xf32>, tensor<4x?x?xi1>, tensor<4x?x8xf32>) -> tensor<4x?x8xf32>
  %1 = "snapkv.sdpa"(%q1, %k1, %k1, %i1) : (tensor<4x1x8xbf16>, tensor<4x?x8xbf16>, tensor<4x?x8xbf16>, tensor<4x1x8xbf16>) -> tensor<4x1x8xbf16>
  return %0, %1 : tensor<4x?x8xf32>, tensor<4x1x8xbf16>
}

// -----

func.func @heads(%q: tensor<4x2x8xf32>, %k: tensor<2x3x8xf32>, %i: tensor<4x2x8xf32>) -> tensor<4x2x8xf32> {
  // expected-error @+1 {{'snapkv.sdpa' op the batch-head extents differ}}
  %0 = snapkv.sdpa %q, %k, %k outs(%i : tensor<4x2x8xf32>) : tensor<4x2x8xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32> -> tensor<4x2x8xf32>
  return %0 : tensor<4x2x8xf32>
}

// -----

func.func @head_dim(%q: tensor<4x2x8xf32>, %k: tensor<4x3x4xf32>, %v: tensor<4x3x8xf32>, %i: tensor<4x2x8xf32>) -> tensor<4x2x8xf32> {
  // expected-error @+1 {{'snapkv.sdpa' op 'queries' and 'keys' have different head dims}}
  %0 = snapkv.sdpa %q, %k, %v outs(%i : tensor<4x2x8xf32>) : tensor<4x2x8xf32>, tensor<4x3x4xf32>, tensor<4x3x8xf32> -> tensor<4x2x8xf32>
  return %0 : tensor<4x2x8xf32>
}

// -----

func.func @lengths(%q: tensor<4x2x8xf32>, %k: tensor<4x3x8xf32>, %v: tensor<4x5x8xf32>, %i: tensor<4x2x8xf32>) -> tensor<4x2x8xf32> {
  // expected-error @+1 {{'snapkv.sdpa' op 'keys' and 'values' have different lengths}}
  %0 = snapkv.sdpa %q, %k, %v outs(%i : tensor<4x2x8xf32>) : tensor<4x2x8xf32>, tensor<4x3x8xf32>, tensor<4x5x8xf32> -> tensor<4x2x8xf32>
  return %0 : tensor<4x2x8xf32>
}

// -----

func.func @mask(%q: tensor<4x2x8xf32>, %k: tensor<4x3x8xf32>, %m: tensor<4x2x2xi1>, %i: tensor<4x2x8xf32>) -> tensor<4x2x8xf32> {
  // expected-error @+1 {{'snapkv.sdpa' op 'mask' 'tensor<4x2x2xi1>' is not [N, Lq, Lk]}}
  %0 = snapkv.sdpa %q, %k, %k mask %m outs(%i : tensor<4x2x8xf32>) : tensor<4x2x8xf32>, tensor<4x3x8xf32>, tensor<4x3x8xf32>, tensor<4x2x2xi1> -> tensor<4x2x8xf32>
  return %0 : tensor<4x2x8xf32>
}

// -----

func.func @types(%q: tensor<4x2x8xf32>, %k: tensor<4x3x8xf16>, %i: tensor<4x2x8xf32>) -> tensor<4x2x8xf32> {
  // expected-error @+1 {{'snapkv.sdpa' op failed to verify that all of {queries, keys, values, init} have same element type}}
  %0 = snapkv.sdpa %q, %k, %k outs(%i : tensor<4x2x8xf32>) : tensor<4x2x8xf32>, tensor<4x3x8xf16>, tensor<4x3x8xf16> -> tensor<4x2x8xf32>
  return %0 : tensor<4x2x8xf32>
}
