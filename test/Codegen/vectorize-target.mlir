// The vector width comes from the target the IR names (upstream's DLTI
// target description, max_vector_op_width of the "CPU" device), so the output
// does not depend on the machine that runs snapkv-opt; vector-bits overrides
// it. An elementwise op over 256 elements takes four registers per step.
// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-vectorize))" | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(snapkv-vectorize{vector-bits=512}))" | FileCheck %s --check-prefix=OPTION

// CHECK-LABEL: func.func @avx2
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<32xf32>
// OPTION-LABEL: func.func @avx2
// OPTION: arith.addf %{{.*}}, %{{.*}} : vector<64xf32>
module attributes {dlti.target_system_spec = #dlti.target_system_spec<
    "CPU" = #dlti.target_device_spec<"max_vector_op_width" = 256 : i64>>} {
  func.func @avx2(%a: tensor<256xf32>, %b: tensor<256xf32>) -> tensor<256xf32> {
    %e = tensor.empty() : tensor<256xf32>
    %r = linalg.add ins(%a, %b : tensor<256xf32>, tensor<256xf32>) outs(%e : tensor<256xf32>) -> tensor<256xf32>
    return %r : tensor<256xf32>
  }
}

// -----

// CHECK-LABEL: func.func @sse
// CHECK: arith.addf %{{.*}}, %{{.*}} : vector<16xf32>
module attributes {dlti.target_system_spec = #dlti.target_system_spec<
    "CPU" = #dlti.target_device_spec<"max_vector_op_width" = 128 : i64>>} {
  func.func @sse(%a: tensor<256xf32>, %b: tensor<256xf32>) -> tensor<256xf32> {
    %e = tensor.empty() : tensor<256xf32>
    %r = linalg.add ins(%a, %b : tensor<256xf32>, tensor<256xf32>) outs(%e : tensor<256xf32>) -> tensor<256xf32>
    return %r : tensor<256xf32>
  }
}
