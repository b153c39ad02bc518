// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-optimize-math))" | FileCheck %s

// exp becomes a polynomial in vector registers (no libm call per lane).
// CHECK-LABEL: func.func @exp
// CHECK-NOT: math.exp
// CHECK: math.fma {{.*}} : vector<16xf32>
// CHECK-NOT: math.exp
// CHECK: return
func.func @exp(%x: vector<16xf32>) -> vector<16xf32> {
  %e = math.exp %x : vector<16xf32>
  return %e : vector<16xf32>
}

// -----

// A contract multiply feeding an add becomes an FMA, also through the
// unit-dim shape_cast the vectoriser inserts.
// CHECK-LABEL: func.func @contract
// CHECK: %[[A:.*]] = vector.shape_cast %arg0 : vector<4x16x1xf32> to vector<4x16xf32>
// CHECK: %[[B:.*]] = vector.shape_cast %arg1 : vector<4x16x1xf32> to vector<4x16xf32>
// CHECK: math.fma %[[A]], %[[B]], %arg2 : vector<4x16xf32>
func.func @contract(%a: vector<4x16x1xf32>, %b: vector<4x16x1xf32>, %acc: vector<4x16xf32>) -> vector<4x16xf32> {
  %m = arith.mulf %a, %b fastmath<contract> : vector<4x16x1xf32>
  %c = vector.shape_cast %m : vector<4x16x1xf32> to vector<4x16xf32>
  %s = arith.addf %acc, %c : vector<4x16xf32>
  return %s : vector<4x16xf32>
}

// -----

// Without `contract` the multiply and add stay separate (rounding differs).
// CHECK-LABEL: func.func @no_contract
// CHECK-NOT: math.fma
// CHECK: arith.mulf
// CHECK-NOT: math.fma
// CHECK: arith.addf
// CHECK-NOT: math.fma
// CHECK: return
func.func @no_contract(%a: vector<16xf32>, %b: vector<16xf32>, %acc: vector<16xf32>) -> vector<16xf32> {
  %m = arith.mulf %a, %b : vector<16xf32>
  %s = arith.addf %acc, %m : vector<16xf32>
  return %s : vector<16xf32>
}
