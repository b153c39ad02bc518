// RUN: not snapkv-opt %s --pass-pipeline="builtin.module(func.func(snapkv-parallelize{chunks=0}))" 2>&1 | FileCheck %s

// CHECK: error: snapkv-parallelize: chunks, columns and reduction-block must be positive
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
