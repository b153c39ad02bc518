// budget=pyramid copies a prefill function called once per layer, one copy per call; that
// needs every call in the entry block of one function (the layers, in order). Here @prefill
// (the mini model's, from Inputs/) is called from two functions: the rewrite refuses with
// `layer-copies` and leaves the module unchanged.
// RUN: sed -n '1,107p' %S/Inputs/compress-kv-cache-mini.mlir > %t.mlir
// RUN: grep -v '^//' %s >> %t.mlir
// RUN: snapkv-opt %t.mlir -o %t.plain
// RUN: snapkv-opt %t.mlir --snapkv-compress-kv-cache="window=2 capacity=6 budget=pyramid decode-func=" \
// RUN:   -o %t.out 2>&1 | FileCheck %s
// RUN: %strip_refusal %t.out | diff %t.plain -
// RUN: FileCheck %s --check-prefix=ATTR < %t.out
// With both calls in one function (the //TWO lines below) the copies are made, one per call,
// each with its layer's capacity (K = 4, beta 20: 1 + 2 and 7 + 2 positions).
// RUN: sed -n '1,107p' %S/Inputs/compress-kv-cache-mini.mlir > %t.two.mlir
// RUN: sed -n 's|^//TWO ||p' %s >> %t.two.mlir
// RUN: snapkv-opt %t.two.mlir --snapkv-compress-kv-cache="window=2 capacity=6 budget=pyramid decode-func=" \
// RUN:   2>&1 | FileCheck %s --check-prefix=TWO

// CHECK: warning: snapkv-compress-kv-cache left the module unchanged: @prefill: budget=pyramid (or inverted-pyramid) gives each layer its own copy of a function called once per layer, but the calls of @prefill are not all in the entry block of one function
// ATTR: snapkv.refusal = {{{.*}}reason = "layer-copies"
// TWO-NOT:   warning
// TWO-NOT:   func.func @prefill(
// TWO-LABEL: func.func @prefill_layer0(
// TWO:         snapkv.select {{.*}} window 2 capacity 9
// TWO-LABEL: func.func @prefill_layer1(
// TWO:         snapkv.select {{.*}} window 2 capacity 3
// TWO-LABEL: func.func @two(
// TWO:         call @prefill_layer0(
// TWO:         call @prefill_layer1(

//TWO func.func @two(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
//TWO   %0:3 = call @prefill(%q, %k, %v) : (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
//TWO   %1:3 = call @prefill(%0#0, %k, %v) : (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
//TWO   return %1#0, %0#1, %0#2, %1#1, %1#2 : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
//TWO }

func.func @a(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %0:3 = call @prefill(%q, %k, %v) : (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
  return %0#0, %0#1, %0#2 : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}
func.func @b(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) {
  %0:3 = call @prefill(%q, %k, %v) : (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
  return %0#0, %0#1, %0#2 : tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
}
