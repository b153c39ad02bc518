// RUN: snapkv-opt %s --split-input-file --snapkv-expose-scores="functions=layer through-callers=true" --verify-diagnostics | FileCheck %s

// A layer function called twice by the entry point (one call per layer, as
// `snapkv export --hf` writes models): the layer returns its select's five
// arrays, each call takes them, and the entry point returns them after its
// own results, call by call; both functions record the clauses.
// CHECK-LABEL: func.func private @layer
// CHECK-SAME: -> (tensor<1x1x3xi64>, tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x3xi64>, tensor<1x1x2xf32>, tensor<1x1x2xf32>)
// CHECK-SAME: snapkv.exposed_scores = ["window=2 capacity=3 kernel=5 pooling=avg gqa=expand order=position"]
// CHECK-LABEL: func.func @prefill
// CHECK-SAME: -> (tensor<1x1x3xi64>, tensor<1x1x3xi64>, tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x3xi64>, tensor<1x1x2xf32>, tensor<1x1x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x3xi64>, tensor<1x1x2xf32>, tensor<1x1x2xf32>)
// CHECK-SAME: attributes {foo, snapkv.exposed_scores = ["window=2 capacity=3 kernel=5 pooling=avg gqa=expand order=position", "window=2 capacity=3 kernel=5 pooling=avg gqa=expand order=position"]}
// CHECK: %[[A:.*]]:6 = call @layer(%arg0, %arg1) {bar}
// CHECK: %[[B:.*]]:6 = call @layer(%arg0, %arg2)
// CHECK: return %[[A]]#0, %[[B]]#0, %[[A]]#1, %[[A]]#2, %[[A]]#3, %[[A]]#4, %[[A]]#5, %[[B]]#1, %[[B]]#2, %[[B]]#3, %[[B]]#4, %[[B]]#5 :
func.func private @layer(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64> {
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 3
      : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>)
      -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  return %idx : tensor<1x1x3xi64>
}
func.func @prefill(%q: tensor<1x1x2x2xf32>, %k0: tensor<1x1x4x2xf32>, %k1: tensor<1x1x4x2xf32>)
    -> (tensor<1x1x3xi64>, tensor<1x1x3xi64>) attributes {foo} {
  %a = call @layer(%q, %k0) {bar} : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64>
  %b = call @layer(%q, %k1) : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64>
  return %a, %b : tensor<1x1x3xi64>, tensor<1x1x3xi64>
}

// -----

// A caller that is called itself would pass the results on to nobody: refused.
// expected-error @below {{snapkv-expose-scores: @layer is called by @middle, which is called itself}}
func.func private @layer(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64> {
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 3
      : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>)
      -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  return %idx : tensor<1x1x3xi64>
}
func.func private @middle(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64> {
  %a = call @layer(%q, %k) : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64>
  return %a : tensor<1x1x3xi64>
}
func.func @top(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64> {
  %a = call @middle(%q, %k) : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64>
  return %a : tensor<1x1x3xi64>
}

// -----

// A call inside a region (here an scf.execute_region) has no return to pass to.
// expected-error @below {{snapkv-expose-scores: @layer is used other than by a func.call at the top of a function}}
func.func private @layer(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64> {
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 3
      : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>)
      -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  return %idx : tensor<1x1x3xi64>
}
func.func @top(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64> {
  %r = scf.execute_region -> tensor<1x1x3xi64> {
    %a = func.call @layer(%q, %k) : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64>
    scf.yield %a : tensor<1x1x3xi64>
  }
  return %r : tensor<1x1x3xi64>
}
