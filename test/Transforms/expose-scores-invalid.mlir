// RUN: snapkv-opt %s --split-input-file --snapkv-expose-scores --verify-diagnostics
// RUN: not snapkv-opt %s --snapkv-expose-scores=functions=nothere -o /dev/null 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not snapkv-opt %s --snapkv-expose-scores=functions=plain -o /dev/null 2>&1 | FileCheck %s --check-prefix=PLAIN

// MISSING: error: snapkv-expose-scores: no function @nothere
// PLAIN: error: snapkv-expose-scores: @plain holds no snapkv.select

// A called function would no longer match its callers: refused, unchanged.
// expected-error @below {{snapkv-expose-scores: @inner is called in this module (its callers would not match the new results; through-callers passes them out)}}
func.func @inner(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64> {
  %ko, %vo, %idx = snapkv.select %q, %k, %k window 2 capacity 3
      : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>, tensor<1x1x4x2xf32>)
      -> (tensor<1x1x3x2xf32>, tensor<1x1x3x2xf32>, tensor<1x1x3xi64>)
  return %idx : tensor<1x1x3xi64>
}
func.func @outer(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64> {
  %r = call @inner(%q, %k) : (tensor<1x1x2x2xf32>, tensor<1x1x4x2xf32>) -> tensor<1x1x3xi64>
  return %r : tensor<1x1x3xi64>
}

// -----

// Without a select there is nothing to expose (an error when named).
func.func @plain() {
  return
}
