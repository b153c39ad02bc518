// RUN: snapkv-opt %s -split-input-file -verify-diagnostics
// One case per verifier rule of the op (docs/semantics.md); messages name the offending value.

// rank of queries
func.func @f0(%q: tensor<4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op operand #0 must be 4D tensor of 16-bit float or bfloat16 type or 32-bit float values, but got 'tensor<4x2x8xf32>'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// rank of keys
func.func @f1(%q: tensor<1x4x2x8xf32>, %k: tensor<2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op operand #1 must be 4D tensor of 16-bit float or bfloat16 type or 32-bit float values, but got 'tensor<2x8x8xf32>'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// rank of values
func.func @f2(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op operand #2 must be 4D tensor of 16-bit float or bfloat16 type or 32-bit float values, but got 'tensor<1x1x2x8x8xf32>'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// element type not f16/bf16/f32
func.func @f3(%q: tensor<1x4x2x8xf64>, %k: tensor<1x2x8x8xf64>, %v: tensor<1x2x8x8xf64>) {
  // expected-error @+1 {{'snapkv.select' op operand #0 must be 4D tensor of 16-bit float or bfloat16 type or 32-bit float values, but got 'tensor<1x4x2x8xf64>'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf64>, tensor<1x2x8x8xf64>, tensor<1x2x8x8xf64>) -> (tensor<1x4x5x8xf64>, tensor<1x4x5x8xf64>, tensor<1x4x5xi64>)
  return
}

// -----

// integer element type
func.func @f4(%q: tensor<1x4x2x8xi32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op operand #0 must be 4D tensor of 16-bit float or bfloat16 type or 32-bit float values, but got 'tensor<1x4x2x8xi32>'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xi32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// element types differ
func.func @f5(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf16>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op failed to verify that all of {queries, keys, values} have same element type}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf16>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// values element type differs
func.func @f6(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xbf16>) {
  // expected-error @+1 {{'snapkv.select' op failed to verify that all of {queries, keys, values} have same element type}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xbf16>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// dynamic head count
func.func @f7(%q: tensor<1x?x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'queries' dim 1 must be static}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x?x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// dynamic head dim of keys
func.func @f8(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x?xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'keys' dim 3 must be static}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x?xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// batch mismatch
func.func @f9(%q: tensor<2x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op batch size of 'keys' (1) differs from 'queries' (2)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<2x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<2x4x5x8xf32>, tensor<2x4x5x8xf32>, tensor<2x4x5xi64>)
  return
}

// -----

// head dim mismatch
func.func @f10(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op head dim of 'keys' (4) differs from 'queries' (8)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// values head dim mismatch
func.func @f11(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{'snapkv.select' op head dim of 'values' (4) differs from 'queries' (8)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// kv heads of values differ
func.func @f12(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x4x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'values' has 4 kv heads but 'keys' has 2}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x4x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// prompt length of values differs
func.func @f13(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x9x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op prompt length of 'values' (9) differs from 'keys' (8)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x9x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// Hq not a multiple of Hkv
func.func @f14(%q: tensor<1x6x2x8xf32>, %k: tensor<1x4x8x8xf32>, %v: tensor<1x4x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op query heads (6) are not a multiple of key/value heads (4)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x6x2x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> (tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32>, tensor<1x6x5xi64>)
  return
}

// -----

// window < 1
func.func @f15(%q: tensor<1x4x0x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op attribute 'window' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %a, %b, %c = snapkv.select %q, %k, %v window 0 capacity 5 : (tensor<1x4x0x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// capacity == window
func.func @f16(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op capacity (2) must be greater than window (2)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 2 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2xi64>)
  return
}

// -----

// capacity < window
func.func @f17(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op capacity (1) must be greater than window (2)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 1 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x1x8xf32>, tensor<1x4x1x8xf32>, tensor<1x4x1xi64>)
  return
}

// -----

// even kernel
func.func @f18(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op attribute 'kernel' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive and odd}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 kernel 4 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// non-positive kernel
func.func @f19(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op attribute 'kernel' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive and odd}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 kernel -1 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// static W differs from window
func.func @f20(%q: tensor<1x4x3x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'queries' dim 2 (3) must equal window (2)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x3x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// static L < W
func.func @f21(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x3x8xf32>, %v: tensor<1x2x3x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op prompt length of 'keys' (3) is shorter than window (4)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 4 capacity 5 : (tensor<1x4x4x8xf32>, tensor<1x2x3x8xf32>, tensor<1x2x3x8xf32>) -> (tensor<1x4x3x8xf32>, tensor<1x4x3x8xf32>, tensor<1x4x3xi64>)
  return
}

// -----

// non-finite scale
func.func @f22(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op attribute 'scale' failed to satisfy constraint: 32-bit float attribute whose value is finite}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 scale 0x7F800000 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// indices not i64
func.func @f23(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op result #2 must be 3D tensor of 64-bit signless integer values, but got 'tensor<1x4x5xi32>'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi32>)
  return
}

// -----

// kept length contradicts min(L, C)
func.func @f24(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op result 'selected_keys' has type 'tensor<1x4x8x8xf32>', expected 'tensor<1x4x5x8xf32>'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8xi64>)
  return
}

// -----

// gqa mean keeps Hkv heads
func.func @f25(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op result 'selected_keys' has type 'tensor<1x4x5x8xf32>', expected 'tensor<1x2x5x8xf32>'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 gqa mean : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// values result element type
func.func @f26(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op result 'selected_values' has type 'tensor<1x4x5x8xf16>', expected 'tensor<1x4x5x8xf32>'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf16>, tensor<1x4x5xi64>)
  return
}

// -----

// dynamic L gives dynamic S
func.func @f27(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x?x8xf32>, %v: tensor<1x2x?x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op result 'selected_keys' has type 'tensor<1x4x5x8xf32>', expected 'tensor<1x4x?x8xf32>'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// unranked operand
func.func @f28(%q: tensor<*xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op operand #0 must be 4D tensor of 16-bit float or bfloat16 type or 32-bit float values, but got 'tensor<*xf32>'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<*xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// negative window (I64 attributes are read as signed)
func.func @negative_window(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op attribute 'window' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %a, %b, %c = snapkv.select %q, %k, %v window -2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// snapkv.score shares the operand rules of snapkv.select
func.func @score_heads(%q: tensor<1x6x2x8xf32>, %k: tensor<1x4x8x8xf32>, %vi: tensor<1x6x6xf32>, %pi: tensor<1x6x6xf32>) {
  // expected-error @+1 {{'snapkv.score' op query heads (6) are not a multiple of key/value heads (4)}}
  %v, %p = snapkv.score %q, %k window 2 outs(%vi, %pi : tensor<1x6x6xf32>, tensor<1x6x6xf32>) : (tensor<1x6x2x8xf32>, tensor<1x4x8x8xf32>) -> (tensor<1x6x6xf32>, tensor<1x6x6xf32>)
  return
}

// -----

// snapkv.score results are [B, Hc, L - W] f32
func.func @score_result(%q: tensor<1x4x2x8xf16>, %k: tensor<1x2x8x8xf16>, %vi: tensor<1x4x6xf16>, %pi: tensor<1x4x6xf32>) {
  // expected-error @+1 {{'snapkv.score' op operand #2 must be 3D tensor of 32-bit float values, but got 'tensor<1x4x6xf16>'}}
  %v, %p = snapkv.score %q, %k window 2 outs(%vi, %pi : tensor<1x4x6xf16>, tensor<1x4x6xf32>) : (tensor<1x4x2x8xf16>, tensor<1x2x8x8xf16>) -> (tensor<1x4x6xf16>, tensor<1x4x6xf32>)
  return
}

// -----

// gqa max: one row per kv head
func.func @score_pooled_heads(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %vi: tensor<1x4x6xf32>, %pi: tensor<1x4x6xf32>) {
  // expected-error @+1 {{'snapkv.score' op 'votes', 'pooled' and their inits have type 'tensor<1x4x6xf32>', expected 'tensor<1x2x6xf32>'}}
  %v, %p = snapkv.score %q, %k window 2 gqa max outs(%vi, %pi : tensor<1x4x6xf32>, tensor<1x4x6xf32>) : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x6xf32>, tensor<1x4x6xf32>)
  return
}

// -----

func.func @score_short(%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x3x8xf32>, %vi: tensor<1x4x0xf32>, %pi: tensor<1x4x0xf32>) {
  // expected-error @+1 {{'snapkv.score' op prompt length of 'keys' (3) is shorter than window (4)}}
  %v, %p = snapkv.score %q, %k window 4 outs(%vi, %pi : tensor<1x4x0xf32>, tensor<1x4x0xf32>) : (tensor<1x4x4x8xf32>, tensor<1x2x3x8xf32>) -> (tensor<1x4x0xf32>, tensor<1x4x0xf32>)
  return
}

// -----

// sinks belong to scoring recent
func.func @sinks_without_recent(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'sinks' only applies to scoring recent}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 sinks 2 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// seed belongs to scoring random
func.func @seed_without_random(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'seed' only applies to scoring random}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 scoring recent seed 2 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// more sinks than kept prefix positions
func.func @too_many_sinks(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op sinks must be between 0 and capacity - window (3), got 4}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 scoring recent sinks 4 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

func.func @negative_sinks(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op attribute 'sinks' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 scoring recent sinks -1 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

func.func @negative_seed(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op attribute 'seed' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 scoring random seed -1 : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// whole blocks must fill the kept prefix (capacity - window)
func.func @block_not_dividing(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op block (4) must divide capacity - window (6 = 8 - 2)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 8 block 4 : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8xi64>)
  return
}

// -----

// a block larger than capacity - window cannot be kept
func.func @block_above_capacity(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op block (8) must divide capacity - window (3 = 5 - 2)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 block 8 : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

func.func @block_zero(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op attribute 'block' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 block 0 : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// blocks sum pooled votes; recent and random have none
func.func @block_recent(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'block' only applies to the scorings that vote (votes, prefix_votes, sum, norm_sum)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 6 scoring recent block 2 : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x4x6x8xf32>, tensor<1x4x6xi64>)
  return
}

// -----

func.func @score_block_zero(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %vi: tensor<1x4x6xf32>, %pi: tensor<1x4x6xf32>) {
  // expected-error @+1 {{'snapkv.score' op attribute 'block' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %v, %p = snapkv.score %q, %k window 2 block -2 outs(%vi, %pi : tensor<1x4x6xf32>, tensor<1x4x6xf32>) : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x6xf32>, tensor<1x4x6xf32>)
  return
}

// -----

// counters and ranks are i32: a static prompt of 2^31 - 1 positions or more
// is rejected (a dynamic one is checked at run time)
func.func @huge_prompt(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x2147483647x8xf32>, %v: tensor<1x2x2147483647x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op prompt length of 'keys' (2147483647) must be below 2^31 - 1}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x2x8xf32>, tensor<1x2x2147483647x8xf32>, tensor<1x2x2147483647x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// an unknown enum value names the clause
func.func @bad_scoring(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+2 {{expected ::mlir::snapkv::Scoring to be one of: votes, prefix_votes, recent, random}}
  // expected-error @+1 {{failed to parse SnapKV_ScoringAttr parameter 'value'}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 scoring best : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// snapkv.attention: its ODS constraints and the rules of its own verifier.
func.func @attention_rank(%q: tensor<4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.attention' op operand #0 must be 4D tensor of 16-bit float or bfloat16 type or 32-bit float values, but got 'tensor<4x8x8xf32>'}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<4x8x8xf32>) : tensor<4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<4x8x8xf32>
  return
}

// -----

func.func @attention_heads(%q: tensor<1x3x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.attention' op query heads (3) are not a multiple of key/value heads (2)}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x3x8x8xf32>) : tensor<1x3x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x3x8x8xf32>
  return
}

// -----

func.func @attention_values_heads(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x1x8x8xf32>) {
  // expected-error @+1 {{'snapkv.attention' op 'values' has 1 kv heads but 'keys' has 2}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x8x8xf32>) : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x8x8xf32> -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @attention_head_dim(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{'snapkv.attention' op head dim of 'keys' (4) differs from 'queries' (8)}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x8x8xf32>) : tensor<1x4x8x8xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32> -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @attention_lengths(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x9x8xf32>) {
  // expected-error @+1 {{'snapkv.attention' op length of 'values' (9) differs from 'keys' (8)}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x8x8xf32>) : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x9x8xf32> -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @attention_element(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf16>, %v: tensor<1x2x8x8xf16>) {
  // expected-error @+1 {{'snapkv.attention' op failed to verify that all of {queries, keys, values} have same element type}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x8x8xf32>) : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf16>, tensor<1x2x8x8xf16> -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @attention_result(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.attention' op failed to verify that all of {queries, result} have same type}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x8x8xf32>) : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x4x?x8xf32>
  return
}

// -----

func.func @attention_batch(%q: tensor<2x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.attention' op batch size of 'keys' (1) differs from 'queries' (2)}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<2x4x8x8xf32>) : tensor<2x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<2x4x8x8xf32>
  return
}

// -----

func.func @attention_static_dims(%q: tensor<1x?x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.attention' op 'queries' dim 1 must be static}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x?x8x8xf32>) : tensor<1x?x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x?x8x8xf32>
  return
}

// -----

func.func @attention_scale(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.attention' op attribute 'scale' failed to satisfy constraint: 32-bit float attribute whose value is finite}}
  %o = snapkv.attention %q, %k, %v scale 0x7F800000 outs(%q : tensor<1x4x8x8xf32>) : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @attention_softcap(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.attention' op attribute 'softcap' failed to satisfy constraint: 32-bit float attribute whose value is finite and positive}}
  %o = snapkv.attention %q, %k, %v softcap 0.0 outs(%q : tensor<1x4x8x8xf32>) : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @attention_sliding_window(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.attention' op attribute 'sliding_window' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %o = snapkv.attention %q, %k, %v sliding_window 0 outs(%q : tensor<1x4x8x8xf32>) : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @attention_softcap_negative(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{'snapkv.attention' op attribute 'softcap' failed to satisfy constraint: 32-bit float attribute whose value is finite and positive}}
  %o = snapkv.attention %q, %k, %v softcap -30.0 outs(%q : tensor<1x4x8x8xf32>) : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x4x8x8xf32>
  return
}

// -----

func.func @attention_f64(%q: tensor<1x4x8x8xf64>, %k: tensor<1x2x8x8xf64>, %v: tensor<1x2x8x8xf64>) {
  // expected-error @+1 {{'snapkv.attention' op operand #0 must be 4D tensor of 16-bit float or bfloat16 type or 32-bit float values, but got 'tensor<1x4x8x8xf64>'}}
  %o = snapkv.attention %q, %k, %v outs(%q : tensor<1x4x8x8xf64>) : tensor<1x4x8x8xf64>, tensor<1x2x8x8xf64>, tensor<1x2x8x8xf64> -> tensor<1x4x8x8xf64>
  return
}

// -----

func.func @attention_init(%q: tensor<1x4x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>, %i: tensor<1x4x8x8xf16>) {
  // expected-error @+1 {{'snapkv.attention' op failed to verify that all of {queries, init} have same type}}
  %o = snapkv.attention %q, %k, %v outs(%i : tensor<1x4x8x8xf16>) : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x4x8x8xf32>
  return
}

// -----

// keydiff ranks by the keys alone: no block, no snapkv.score
func.func @block_keydiff(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'block' only applies to the scorings that vote (votes, prefix_votes, sum, norm_sum)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 6 scoring keydiff block 2 : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x6x8xf32>, tensor<1x4x6x8xf32>, tensor<1x4x6xi64>)
  return
}

// -----

func.func @score_keydiff(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %vi: tensor<1x4x14xf32>, %pi: tensor<1x4x14xf32>) {
  // expected-error @+1 {{'snapkv.score' op attribute 'scoring' failed to satisfy constraint: what ranks the prefix positions whose value is votes, prefix_votes, sum or norm_sum}}
  %v, %p = snapkv.score %q, %k window 2 scoring keydiff outs(%vi, %pi : tensor<1x4x14xf32>, tensor<1x4x14xf32>) : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x14xf32>, tensor<1x4x14xf32>)
  return
}

// -----

func.func @score_scoring(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %vi: tensor<1x4x14xf32>, %pi: tensor<1x4x14xf32>) {
  // expected-error @+1 {{'snapkv.score' op attribute 'scoring' failed to satisfy constraint: what ranks the prefix positions whose value is votes, prefix_votes, sum or norm_sum}}
  %v, %p = snapkv.score %q, %k window 2 scoring recent outs(%vi, %pi : tensor<1x4x14xf32>, tensor<1x4x14xf32>) : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x14xf32>, tensor<1x4x14xf32>)
  return
}

// -----

func.func @top_positions_scores_type(%s: tensor<1x4x14xf16>, %i: tensor<1x4x5xi64>) {
  // expected-error @+1 {{'snapkv.top_positions' op operand #0 must be 3D tensor of 32-bit float values, but got 'tensor<1x4x14xf16>'}}
  %t = snapkv.top_positions %s window 2 capacity 5 outs(%i : tensor<1x4x5xi64>) : tensor<1x4x14xf16> -> tensor<1x4x5xi64>
  return
}

// -----

func.func @top_positions_dynamic_heads(%s: tensor<1x?x14xf32>, %i: tensor<1x4x5xi64>) {
  // expected-error @+1 {{'snapkv.top_positions' op 'scores' dim 1 must be static}}
  %t = snapkv.top_positions %s window 2 capacity 5 outs(%i : tensor<1x4x5xi64>) : tensor<1x?x14xf32> -> tensor<1x4x5xi64>
  return
}

// -----

func.func @top_positions_capacity(%s: tensor<1x4x14xf32>, %i: tensor<1x4x2xi64>) {
  // expected-error @+1 {{'snapkv.top_positions' op capacity (2) must be greater than window (2)}}
  %t = snapkv.top_positions %s window 2 capacity 2 outs(%i : tensor<1x4x2xi64>) : tensor<1x4x14xf32> -> tensor<1x4x2xi64>
  return
}

// -----

func.func @top_positions_window(%s: tensor<1x4x14xf32>, %i: tensor<1x4x5xi64>) {
  // expected-error @+1 {{'snapkv.top_positions' op attribute 'window' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %t = snapkv.top_positions %s window 0 capacity 5 outs(%i : tensor<1x4x5xi64>) : tensor<1x4x14xf32> -> tensor<1x4x5xi64>
  return
}

// -----

func.func @top_positions_init(%s: tensor<1x4x14xf32>, %i: tensor<1x4x6xi64>) {
  // expected-error @+1 {{'snapkv.top_positions' op 'init' has shape 'tensor<1x4x6xi64>', expected [batch, heads, capacity] = 'tensor<1x4x5xi64>'}}
  %t = snapkv.top_positions %s window 2 capacity 5 outs(%i : tensor<1x4x6xi64>) : tensor<1x4x14xf32> -> tensor<1x4x6xi64>
  return
}

// -----

func.func @top_positions_short(%s: tensor<1x4x2xf32>, %i: tensor<1x4x5xi64>) {
  // expected-error @+1 {{'snapkv.top_positions' op 'scores' holds 2 prefix positions, fewer than capacity - window (3)}}
  %t = snapkv.top_positions %s window 2 capacity 5 outs(%i : tensor<1x4x5xi64>) : tensor<1x4x2xf32> -> tensor<1x4x5xi64>
  return
}

// -----

func.func @top_positions_result(%s: tensor<1x4x14xf32>, %i: tensor<1x4x5xi64>) {
  // expected-error @+1 {{'snapkv.top_positions' op failed to verify that all of {init, result} have same type}}
  %t = snapkv.top_positions %s window 2 capacity 5 outs(%i : tensor<1x4x5xi64>) : tensor<1x4x14xf32> -> tensor<1x4x?xi64>
  return
}

// -----

func.func @gather_heads(%k: tensor<1x3x16x8xf32>, %i: tensor<1x4x5xi64>, %r: tensor<1x4x5x8xf32>) {
  // expected-error @+1 {{'snapkv.gather' op heads of 'indices' (4) are not a multiple of the heads of 'source' (3)}}
  %g = snapkv.gather %k[%i] outs(%r : tensor<1x4x5x8xf32>) : tensor<1x3x16x8xf32>, tensor<1x4x5xi64> -> tensor<1x4x5x8xf32>
  return
}

// -----

func.func @gather_index_type(%k: tensor<1x2x16x8xf32>, %i: tensor<1x4x5xi32>, %r: tensor<1x4x5x8xf32>) {
  // expected-error @+1 {{'snapkv.gather' op operand #1 must be 3D tensor of 64-bit signless integer values, but got 'tensor<1x4x5xi32>'}}
  %g = snapkv.gather %k[%i] outs(%r : tensor<1x4x5x8xf32>) : tensor<1x2x16x8xf32>, tensor<1x4x5xi32> -> tensor<1x4x5x8xf32>
  return
}

// -----

func.func @gather_init_type(%k: tensor<1x2x16x8xf32>, %i: tensor<1x4x5xi64>, %r: tensor<1x4x5x8xf16>) {
  // expected-error @+1 {{'snapkv.gather' op failed to verify that all of {source, init} have same element type}}
  %g = snapkv.gather %k[%i] outs(%r : tensor<1x4x5x8xf16>) : tensor<1x2x16x8xf32>, tensor<1x4x5xi64> -> tensor<1x4x5x8xf16>
  return
}

// -----

func.func @gather_slots(%k: tensor<1x2x16x8xf32>, %i: tensor<1x4x5xi64>, %r: tensor<1x4x6x8xf32>) {
  // expected-error @+1 {{'snapkv.gather' op 'init' has 6 slots but 'indices' has 5}}
  %g = snapkv.gather %k[%i] outs(%r : tensor<1x4x6x8xf32>) : tensor<1x2x16x8xf32>, tensor<1x4x5xi64> -> tensor<1x4x6x8xf32>
  return
}

// -----

func.func @gather_row_size(%k: tensor<1x2x16x8xf32>, %i: tensor<1x4x5xi64>, %r: tensor<1x4x5x4xf32>) {
  // expected-error @+1 {{'snapkv.gather' op row size of 'init' (4) differs from 'source' (8)}}
  %g = snapkv.gather %k[%i] outs(%r : tensor<1x4x5x4xf32>) : tensor<1x2x16x8xf32>, tensor<1x4x5xi64> -> tensor<1x4x5x4xf32>
  return
}

// -----

func.func @gather_empty_source(%k: tensor<1x2x0x8xf32>, %i: tensor<1x4x5xi64>, %r: tensor<1x4x5x8xf32>) {
  // expected-error @+1 {{'snapkv.gather' op 'source' has no rows to gather}}
  %g = snapkv.gather %k[%i] outs(%r : tensor<1x4x5x8xf32>) : tensor<1x2x0x8xf32>, tensor<1x4x5xi64> -> tensor<1x4x5x8xf32>
  return
}

// -----

func.func @score_init(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %vi: tensor<1x4x14xf32>, %pi: tensor<1x4x?xf32>) {
  // expected-error @+1 {{'snapkv.score' op failed to verify that all of {votes_init, pooled_init, votes, pooled} have same type}}
  %v, %p = snapkv.score %q, %k window 2 outs(%vi, %pi : tensor<1x4x14xf32>, tensor<1x4x?xf32>) : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x14xf32>, tensor<1x4x14xf32>)
  return
}

// -----

func.func @adaptive_floor(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x20x8xf32>) {
  // expected-error @+1 {{'snapkv.select_adaptive' op floor must be between 0 and capacity - window (8), got 9}}
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10 floor 9
      : (tensor<1x4x2x8xf32>, tensor<1x2x20x8xf32>, tensor<1x2x20x8xf32>)
      -> (tensor<1x40x8xf32>, tensor<1x40x8xf32>, tensor<1x40xi64>, tensor<1x5xi64>)
  return
}

// -----

func.func @adaptive_negative_floor(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x20x8xf32>) {
  // expected-error @+1 {{'snapkv.select_adaptive' op attribute 'floor' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10 floor -1
      : (tensor<1x4x2x8xf32>, tensor<1x2x20x8xf32>, tensor<1x2x20x8xf32>)
      -> (tensor<1x40x8xf32>, tensor<1x40x8xf32>, tensor<1x40xi64>, tensor<1x5xi64>)
  return
}

// -----

func.func @adaptive_scoring(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x20x8xf32>) {
  // expected-error @+1 {{'snapkv.select_adaptive' op attribute 'scoring' failed to satisfy constraint: what ranks the prefix positions whose value is votes or prefix_votes}}
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10 scoring recent
      : (tensor<1x4x2x8xf32>, tensor<1x2x20x8xf32>, tensor<1x2x20x8xf32>)
      -> (tensor<1x40x8xf32>, tensor<1x40x8xf32>, tensor<1x40xi64>, tensor<1x5xi64>)
  return
}

// -----

func.func @adaptive_offsets(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x20x8xf32>) {
  // expected-error @+1 {{'snapkv.select_adaptive' op result 'offsets' has type 'tensor<1x4xi64>', expected 'tensor<1x5xi64>'}}
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10
      : (tensor<1x4x2x8xf32>, tensor<1x2x20x8xf32>, tensor<1x2x20x8xf32>)
      -> (tensor<1x40x8xf32>, tensor<1x40x8xf32>, tensor<1x40xi64>, tensor<1x4xi64>)
  return
}

// -----

func.func @adaptive_rows(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x8x8xf32>) {
  // A short prompt keeps every position of every head: 4 x 8 rows.
  // expected-error @+1 {{'snapkv.select_adaptive' op result 'selected_keys' has type 'tensor<1x40x8xf32>', expected 'tensor<1x32x8xf32>'}}
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10
      : (tensor<1x4x2x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
      -> (tensor<1x40x8xf32>, tensor<1x40x8xf32>, tensor<1x40xi64>, tensor<1x5xi64>)
  return
}

// -----

func.func @adaptive_window(%q: tensor<1x4x3x8xf32>, %k: tensor<1x2x20x8xf32>) {
  // expected-error @+1 {{'snapkv.select_adaptive' op 'queries' dim 2 (3) must equal window (2)}}
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10
      : (tensor<1x4x3x8xf32>, tensor<1x2x20x8xf32>, tensor<1x2x20x8xf32>)
      -> (tensor<1x40x8xf32>, tensor<1x40x8xf32>, tensor<1x40xi64>, tensor<1x5xi64>)
  return
}

// -----

func.func @adaptive_capacity(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x?x8xf32>) {
  // expected-error @+1 {{'snapkv.select_adaptive' op heads x capacity must be below 2^31 - 1, got 4 x 1073741824}}
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 1073741824
      : (tensor<1x4x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
      -> (tensor<1x?x8xf32>, tensor<1x?x8xf32>, tensor<1x?xi64>, tensor<1x5xi64>)
  return
}

// -----

func.func @select_no_heads(%q: tensor<1x0x2x8xf32>, %k: tensor<1x2x20x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'queries' dim 1 is empty (size 0)}}
  %a:3 = snapkv.select %q, %k, %k window 2 capacity 10
      : (tensor<1x0x2x8xf32>, tensor<1x2x20x8xf32>, tensor<1x2x20x8xf32>)
      -> (tensor<1x0x10x8xf32>, tensor<1x0x10x8xf32>, tensor<1x0x10xi64>)
  return
}

// -----

func.func @adaptive_no_rows(%q: tensor<1x4x2x0xf32>, %k: tensor<1x2x20x0xf32>) {
  // expected-error @+1 {{'snapkv.select_adaptive' op 'queries' dim 3 is empty (size 0)}}
  %a:4 = snapkv.select_adaptive %q, %k, %k window 2 capacity 10
      : (tensor<1x4x2x0xf32>, tensor<1x2x20x0xf32>, tensor<1x2x20x0xf32>)
      -> (tensor<1x40x0xf32>, tensor<1x40x0xf32>, tensor<1x40xi64>, tensor<1x5xi64>)
  return
}

// -----

func.func @score_no_batch(%q: tensor<0x4x2x8xf32>, %k: tensor<0x2x16x8xf32>, %i: tensor<0x4x14xf32>) {
  // expected-error @+1 {{'snapkv.score' op 'queries' dim 0 is empty (size 0)}}
  %v, %p = snapkv.score %q, %k window 2 outs(%i, %i : tensor<0x4x14xf32>, tensor<0x4x14xf32>) : (tensor<0x4x2x8xf32>, tensor<0x2x16x8xf32>) -> (tensor<0x4x14xf32>, tensor<0x4x14xf32>)
  return
}

// -----

func.func @ragged_two_rows(%q: tensor<1x4x2x8xf32>, %k: tensor<1x?x8xf32>, %s: tensor<1x2xi64>) {
  // expected-error @+1 {{'snapkv.ragged_attention' op 'queries' must hold one row per head (dim 2 = 1), got 2}}
  %o = snapkv.ragged_attention %q, %k, %k rows(%s, %s) : tensor<1x4x2x8xf32>, tensor<1x?x8xf32>, tensor<1x?x8xf32>, tensor<1x2xi64> -> tensor<1x4x2x8xf32>
  return
}

// -----

func.func @ragged_heads(%q: tensor<1x4x1x8xf32>, %k: tensor<1x?x8xf32>, %s: tensor<1x3xi64>) {
  // expected-error @+1 {{'snapkv.ragged_attention' op query heads (4) are not a multiple of cache heads (3)}}
  %o = snapkv.ragged_attention %q, %k, %k rows(%s, %s) : tensor<1x4x1x8xf32>, tensor<1x?x8xf32>, tensor<1x?x8xf32>, tensor<1x3xi64> -> tensor<1x4x1x8xf32>
  return
}

// -----

func.func @ragged_rows(%q: tensor<1x4x1x8xf32>, %k: tensor<1x?x4xf32>, %s: tensor<1x2xi64>) {
  // expected-error @+1 {{'snapkv.ragged_attention' op 'keys' must be [batch, rows, head dim] = [1, ?, 8], got 'tensor<1x?x4xf32>'}}
  %o = snapkv.ragged_attention %q, %k, %k rows(%s, %s) : tensor<1x4x1x8xf32>, tensor<1x?x4xf32>, tensor<1x?x4xf32>, tensor<1x2xi64> -> tensor<1x4x1x8xf32>
  return
}

// -----

func.func @ragged_starts(%q: tensor<1x4x1x8xf32>, %k: tensor<1x?x8xf32>, %s: tensor<1x2xi32>) {
  // expected-error @+1 {{'snapkv.ragged_attention' op operand #3 must be 2D tensor of 64-bit signless integer values, but got 'tensor<1x2xi32>'}}
  %o = snapkv.ragged_attention %q, %k, %k rows(%s, %s) : tensor<1x4x1x8xf32>, tensor<1x?x8xf32>, tensor<1x?x8xf32>, tensor<1x2xi32> -> tensor<1x4x1x8xf32>
  return
}

// -----

func.func @ragged_queries_f64(%q: tensor<1x4x1x8xf64>, %k: tensor<1x?x8xf64>, %s: tensor<1x2xi64>) {
  // expected-error @+1 {{'snapkv.ragged_attention' op operand #0 must be 4D tensor of 16-bit float or bfloat16 type or 32-bit float values, but got 'tensor<1x4x1x8xf64>'}}
  %o = snapkv.ragged_attention %q, %k, %k rows(%s, %s) : tensor<1x4x1x8xf64>, tensor<1x?x8xf64>, tensor<1x?x8xf64>, tensor<1x2xi64> -> tensor<1x4x1x8xf64>
  return
}

// -----

func.func @ragged_keys_rank(%q: tensor<1x4x1x8xf32>, %k: tensor<1x2x?x8xf32>, %s: tensor<1x2xi64>) {
  // expected-error @+1 {{'snapkv.ragged_attention' op operand #1 must be 3D tensor of 16-bit float or bfloat16 type or 32-bit float values, but got 'tensor<1x2x?x8xf32>'}}
  %o = snapkv.ragged_attention %q, %k, %k rows(%s, %s) : tensor<1x4x1x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2xi64> -> tensor<1x4x1x8xf32>
  return
}

// -----

func.func @ragged_keys_element(%q: tensor<1x4x1x8xf32>, %k: tensor<1x?x8xf16>, %s: tensor<1x2xi64>) {
  // expected-error @+1 {{'snapkv.ragged_attention' op failed to verify that all of {queries, keys, values} have same element type}}
  %o = snapkv.ragged_attention %q, %k, %k rows(%s, %s) : tensor<1x4x1x8xf32>, tensor<1x?x8xf16>, tensor<1x?x8xf16>, tensor<1x2xi64> -> tensor<1x4x1x8xf32>
  return
}

// -----

func.func @ragged_result(%q: tensor<1x4x1x8xf32>, %k: tensor<1x?x8xf32>, %s: tensor<1x2xi64>) {
  // expected-error @+1 {{'snapkv.ragged_attention' op failed to verify that all of {queries, result} have same type}}
  %o = snapkv.ragged_attention %q, %k, %k rows(%s, %s) : tensor<1x4x1x8xf32>, tensor<1x?x8xf32>, tensor<1x?x8xf32>, tensor<1x2xi64> -> tensor<1x4x1x8xf16>
  return
}

// -----

func.func @ragged_scale(%q: tensor<1x4x1x8xf32>, %k: tensor<1x?x8xf32>, %s: tensor<1x2xi64>) {
  // expected-error @+1 {{'snapkv.ragged_attention' op attribute 'scale' failed to satisfy constraint: 32-bit float attribute whose value is finite}}
  %o = snapkv.ragged_attention %q, %k, %k rows(%s, %s) scale 0x7FC00000 : tensor<1x4x1x8xf32>, tensor<1x?x8xf32>, tensor<1x?x8xf32>, tensor<1x2xi64> -> tensor<1x4x1x8xf32>
  return
}

// -----

// scoring sum reads at least the window's queries
func.func @sum_fewer_queries_than_window(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'queries' dim 2 (2) must be at least window (3): scoring sum / norm_sum reads the last Q >= window prompt queries}}
  %a, %b, %c = snapkv.select %q, %k, %v window 3 capacity 5 scoring sum : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// and no more queries than the prompt has
func.func @sum_more_queries_than_prompt(%q: tensor<1x4x20x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'queries' dim 2 (20) exceeds the prompt length (16): there are no more prompt queries}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 scoring norm_sum : (tensor<1x4x20x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// only the accumulated scorings take a dynamic number of queries
func.func @votes_dynamic_queries(%q: tensor<1x4x?x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'queries' dim 2 must be static}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x?x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// the window's votes take exactly the window's queries
func.func @votes_more_queries(%q: tensor<1x4x6x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) {
  // expected-error @+1 {{'snapkv.select' op 'queries' dim 2 (6) must equal window (2)}}
  %a, %b, %c = snapkv.select %q, %k, %v window 2 capacity 5 : (tensor<1x4x6x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x4x5x8xf32>, tensor<1x4x5x8xf32>, tensor<1x4x5xi64>)
  return
}

// -----

// select_adaptive shares out the window's votes only
func.func @adaptive_sum(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) {
  // expected-error @+1 {{whose value is votes or prefix_votes}}
  %a, %b, %c, %d = snapkv.select_adaptive %q, %k, %v window 2 capacity 5 scoring sum : (tensor<1x4x2x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> (tensor<1x20x8xf32>, tensor<1x20x8xf32>, tensor<1x20xi64>, tensor<1x5xi64>)
  return
}
