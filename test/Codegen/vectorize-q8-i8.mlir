// The vector x Q8_0 matrix product with int8 activations
// (snapkv-quantize-weights activations=i8): the row is quantized per block of
// 32 (max |x| / 127, rounded to nearest), then one int8 x int8 contraction
// whose body widens the integer product before the two scales.
// RUN: snapkv-opt %s --snapkv-quantize-weights="activations=i8" | FileCheck %s --check-prefix=QUANT
// With AVX512_VNNI, snapkv-vectorize sums each block's products with
// vpdpbusd (4 rows of weights offset to unsigned and interleaved per i32
// lane, the 4 activations broadcast), then subtracts 128 x the block's sum of
// activations before the scales; without it, each product widened to i32.
// RUN: snapkv-opt %s --pass-pipeline="builtin.module(snapkv-quantize-weights{activations=i8},func.func(snapkv-parallelize,snapkv-vectorize{vector-bits=512 int8-microkernel=avx512vnni},canonicalize,cse))" | FileCheck %s --check-prefix=VNNI
// RUN: snapkv-opt %s --pass-pipeline="builtin.module(snapkv-quantize-weights{activations=i8},func.func(snapkv-parallelize,snapkv-vectorize{vector-bits=512 int8-microkernel=none},canonicalize,cse))" | FileCheck %s --check-prefix=PLAIN --implicit-check-not=llvm.inline_asm
// The CPU pipeline chooses from its cpu-features (snapkv-configure-lowering
// marks the op); forcing the feature off takes the fallback.
// RUN: snapkv-opt %s --snapkv-quantize-weights="activations=i8" --snapkv-cpu-pipeline="cpu-features=avx512f,avx512vnni,avx512bw" | FileCheck %s --check-prefix=LLVM
// RUN: snapkv-opt %s --snapkv-quantize-weights="activations=i8" --snapkv-cpu-pipeline="cpu-features=avx512f,-avx512vnni" | FileCheck %s --check-prefix=NOVNNI
// RUN: snapkv-opt %s --snapkv-quantize-weights="activations=i8" --snapkv-cpu-pipeline="cpu-features=avx512f,avx512vnni" --mlir-disable-threading --mlir-print-ir-after=snapkv-configure-lowering -o /dev/null 2>&1 | FileCheck %s --check-prefix=CONFIG
// RUN: not snapkv-opt %s --snapkv-quantize-weights="activations=f16" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not snapkv-opt %s --pass-pipeline="builtin.module(func.func(snapkv-vectorize{int8-microkernel=vnni}))" 2>&1 | FileCheck %s --check-prefix=BADKERNEL

// QUANT-LABEL: func.func private @layer(
// QUANT:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// QUANT:           math.absf
// QUANT:           arith.maximumf
// QUANT:         } -> tensor<1x18xf32>
// QUANT:         %[[SCALES:.*]] = linalg.generic
// QUANT:           arith.divf %{{.*}}, %cst{{.*}} : f32
// QUANT:         %[[Q:.*]] = linalg.generic
// QUANT:           math.round
// QUANT:           arith.fptosi %{{.*}} : f32 to i8
// QUANT:         } -> tensor<1x18x32xi8>
// QUANT:         linalg.generic {{.*}}iterator_types = ["parallel", "reduction", "reduction", "parallel"]} ins(%[[Q]], %{{.*}}, %[[SCALES]], %{{.*}} : tensor<1x18x32xi8>, tensor<18x32x1536xi8>, tensor<1x18xf32>, tensor<18x1536xf32>)
// QUANT:           arith.extsi %{{.*}} : i8 to i32
// QUANT:           arith.extsi %{{.*}} : i8 to i32
// QUANT:           arith.muli
// QUANT:           arith.sitofp %{{.*}} : i32 to f32

// VNNI-LABEL: func.func private @layer(
// VNNI:         scf.forall
// VNNI:           scf.for %[[B:.*]] = %c0 to %c3 step %c1
// VNNI:             scf.for %{{.*}} = %c0 to %c8 step %c1
// VNNI:               vector.bitcast %{{.*}} : vector<4xi8> to vector<1xi32>
// VNNI:               scf.for %{{.*}} = %c0 to %c1536 step %c64
// VNNI-COUNT-4:         arith.xori %{{.*}} : vector<64xi8>
// VNNI:                 vector.shuffle
// VNNI:                 llvm.inline_asm "vpdpbusd $3, $2, $0", "=v,0,v,v" %{{.*}} : (vector<16xi32>, vector<64xi8>, vector<64xi8>) -> vector<16xi32>
// VNNI:             vector.reduction <add>, %{{.*}} : vector<32xi32> into i32
// VNNI:             scf.for %{{.*}} = %c0 to %c1536 step %c64
// VNNI:               arith.subi %{{.*}} : vector<64xi32>
// VNNI:               arith.sitofp %{{.*}} : vector<64xi32> to vector<64xf32>
// VNNI:               vector.fma

// PLAIN-LABEL: func.func private @layer(
// PLAIN:         scf.for %{{.*}} = %c0 to %c32 step %c1
// PLAIN:           arith.extsi %{{.*}} : i8 to i32
// PLAIN:           scf.for %{{.*}} = %c0 to %c1536 step %c64
// PLAIN:             arith.extsi %{{.*}} : vector<64xi8> to vector<64xi32>
// PLAIN:             arith.muli %{{.*}} : vector<64xi32>
// PLAIN:             arith.addi %{{.*}} : vector<64xi32>
// PLAIN:         arith.sitofp %{{.*}} : vector<64xi32> to vector<64xf32>

// LLVM: llvm.inline_asm "vpdpbusd $3, $2, $0", "=v,0,v,v"
// NOVNNI-NOT: vpdpbusd
// CONFIG: linalg.generic {{.*}}snapkv.microkernel = #snapkv.microkernel<avx512vnni>
// BAD: snapkv-quantize-weights: activations must be float or i8, got 'f16'
// BADKERNEL: snapkv-vectorize: int8-microkernel must be auto, avx512vnni or none, got 'vnni'

func.func @decode(%x: tensor<1x576xf32>, %w: tensor<576x1536xf32> {snapkv.weight = "w", snapkv.transposed}) -> tensor<1x1536xf32> {
  %y = call @layer(%x, %w) : (tensor<1x576xf32>, tensor<576x1536xf32>) -> tensor<1x1536xf32>
  return %y : tensor<1x1536xf32>
}

func.func private @layer(%x: tensor<1x576xf32>, %w: tensor<576x1536xf32>) -> tensor<1x1536xf32> {
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<1x1536xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<1x1536xf32>) -> tensor<1x1536xf32>
  %y = linalg.matmul ins(%x, %w : tensor<1x576xf32>, tensor<576x1536xf32>) outs(%c : tensor<1x1536xf32>) -> tensor<1x1536xf32>
  return %y : tensor<1x1536xf32>
}
