// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-optimize-math))" | FileCheck %s --implicit-check-not=math.exp

// exp becomes a polynomial in vector registers (no libm call per lane);
// other math ops are left alone.
// CHECK-LABEL: func.func @exp
// CHECK: math.fma {{.*}} : vector<16xf32>
func.func @exp(%x: vector<16xf32>) -> vector<16xf32> {
  %e = math.exp %x : vector<16xf32>
  return %e : vector<16xf32>
}

// -----

// CHECK-LABEL: func.func @others
// CHECK: math.log
func.func @others(%x: vector<16xf32>) -> vector<16xf32> {
  %e = math.log %x : vector<16xf32>
  return %e : vector<16xf32>
}
