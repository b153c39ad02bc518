// The vector x Q8_0 matrix product with int8 activations
// (snapkv-quantize-weights activations=i8): the row is quantized per block of
// 32 (max |x| / 127, rounded to nearest), then one int8 x int8 contraction
// whose body widens the integer product before the two scales.
// RUN: snapkv-opt %s --snapkv-quantize-weights="activations=i8" | FileCheck %s --check-prefix=QUANT
// The weights are taken packed by 4 rows ([K / 4, N, 4], "q8_0_packed").
// With AVX512_VNNI, snapkv-vectorize sums each block's products with
// vpdpbusd (one contiguous 64-byte read of 16 columns x 4 rows, offset to
// unsigned, no shuffles; the 4 activations broadcast), then subtracts 128 x
// the block's sum of activations before the scales; without it, each i32
// lane's 4 bytes (weights and broadcast activations) sign-extended by shifts
// and multiplied in i32.
// RUN: snapkv-opt %s --pass-pipeline="builtin.module(snapkv-quantize-weights{activations=i8},func.func(snapkv-parallelize,snapkv-vectorize{vector-bits=512 int8-microkernel=avx512vnni},canonicalize,cse))" | FileCheck %s --check-prefix=VNNI
// RUN: snapkv-opt %s --pass-pipeline="builtin.module(snapkv-quantize-weights{activations=i8},func.func(snapkv-parallelize,snapkv-vectorize{vector-bits=512 int8-microkernel=none},canonicalize,cse))" | FileCheck %s --check-prefix=PLAIN --implicit-check-not=llvm.inline_asm
// The CPU pipeline chooses from its cpu-features (snapkv-configure-lowering
// marks the op); forcing the feature off takes the fallback.
// RUN: snapkv-opt %s --snapkv-quantize-weights="activations=i8" --snapkv-cpu-pipeline="cpu-features=avx512f,avx512vnni,avx512bw" | FileCheck %s --check-prefix=LLVM
// RUN: snapkv-opt %s --snapkv-quantize-weights="activations=i8" --snapkv-cpu-pipeline="cpu-features=avx512f,-avx512vnni" | FileCheck %s --check-prefix=NOVNNI
// RUN: snapkv-opt %s --snapkv-quantize-weights="activations=i8" --snapkv-cpu-pipeline="cpu-features=avx512f,avx512vnni" --mlir-disable-threading --mlir-print-ir-after=snapkv-configure-lowering -o /dev/null 2>&1 | FileCheck %s --check-prefix=CONFIG
// RUN: not snapkv-opt %s --snapkv-quantize-weights="activations=f16" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not snapkv-opt %s --pass-pipeline="builtin.module(func.func(snapkv-vectorize{int8-microkernel=vnni}))" 2>&1 | FileCheck %s --check-prefix=BADKERNEL

// QUANT-LABEL: func.func @decode(
// QUANT-SAME:    tensor<144x1536x4xi8> {snapkv.quantized = "q8_0_packed", snapkv.transposed, snapkv.weight = "w"}
// QUANT-SAME:    tensor<18x1536xf32> {snapkv.quantized = "q8_0_scales", snapkv.transposed, snapkv.weight = "w"}
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
// QUANT:         %[[G:.*]] = tensor.expand_shape %[[Q]] {{\[}}[0], [1], [2, 3]] output_shape [1, 18, 8, 4]
// QUANT:         %[[P:.*]] = tensor.expand_shape %{{.*}} {{\[}}[0, 1], [2], [3]] output_shape [18, 8, 1536, 4]
// QUANT:         linalg.generic {{.*}}iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%[[G]], %[[P]], %[[SCALES]], %{{.*}} : tensor<1x18x8x4xi8>, tensor<18x8x1536x4xi8>, tensor<1x18xf32>, tensor<18x1536xf32>)
// QUANT:           arith.extsi %{{.*}} : i8 to i32
// QUANT:           arith.extsi %{{.*}} : i8 to i32
// QUANT:           arith.muli
// QUANT:           arith.sitofp %{{.*}} : i32 to f32

// VNNI-LABEL: func.func private @layer(
// VNNI:         scf.forall
// VNNI:           tensor.collapse_shape %{{.*}} {{\[}}[0], [1], [2, 3]] : tensor<3x8x1536x4xi8> into tensor<3x8x6144xi8>
// VNNI:           scf.for %[[B:.*]] = %c0 to %c3 step %c1
// VNNI:             scf.for %{{.*}} = %c0 to %c8 step %c1
// VNNI:               vector.bitcast %{{.*}} : vector<4xi8> to vector<1xi32>
// VNNI:               scf.for %{{.*}} = %c0 to %c1536 step %c64
// VNNI-NOT:             vector.shuffle
// VNNI:                 vector.transfer_read %{{.*}} : tensor<3x8x6144xi8>, vector<64xi8>
// VNNI-NOT:             vector.shuffle
// VNNI:                 arith.xori %{{.*}} : vector<64xi8>
// VNNI-NOT:             vector.shuffle
// VNNI:                 llvm.inline_asm "vpdpbusd $3, $2, $0", "=v,0,v,v" %{{.*}} : (vector<16xi32>, vector<64xi8>, vector<64xi8>) -> vector<16xi32>
// VNNI-COUNT-3:         llvm.inline_asm "vpdpbusd
// VNNI:             vector.reduction <add>, %{{.*}} : vector<32xi32> into i32
// VNNI:             scf.for %{{.*}} = %c0 to %c1536 step %c64
// VNNI:               arith.subi %{{.*}} : vector<64xi32>
// VNNI:               arith.sitofp %{{.*}} : vector<64xi32> to vector<64xf32>
// VNNI:               vector.fma

// PLAIN-LABEL: func.func private @layer(
// PLAIN:         scf.for %{{.*}} = %c0 to %c8 step %c1
// PLAIN:           scf.for %{{.*}} = %c0 to %c1536 step %c64
// PLAIN:             vector.transfer_read %{{.*}} : tensor<3x8x6144xi8>, vector<64xi8>
// PLAIN:             vector.bitcast %{{.*}} : vector<64xi8> to vector<16xi32>
// PLAIN:             arith.shli %{{.*}} : vector<16xi32>
// PLAIN:             arith.shrsi %{{.*}} : vector<16xi32>
// PLAIN:             arith.muli %{{.*}} : vector<16xi32>
// PLAIN:             arith.addi %{{.*}} : vector<16xi32>
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

// A prompt's rows (dynamic): quantized per row and block too, then per strip
// of 64 columns, tiles of 4 rows whose 4 x 4 i32 sums stay in registers over
// a block's 8 groups (each 64-byte weight read shared by the 4 rows), the
// rest of the rows one at a time.
// QUANT-LABEL: func.func private @prefill_layer(
// QUANT:         } -> tensor<?x18x32xi8>
// QUANT:         linalg.generic {{.*}}iterator_types = ["parallel", "reduction", "reduction", "reduction", "parallel"]} ins(%{{.*}} : tensor<?x18x8x4xi8>, tensor<18x8x1536x4xi8>, tensor<?x18xf32>, tensor<18x1536xf32>)
// QUANT-NOT:     linalg.matmul
// VNNI-LABEL: func.func private @prefill_layer(
// VNNI:         scf.forall
// VNNI:           vector.reduction <add>, %{{.*}} : vector<32xi32> into i32
// VNNI:           scf.for %{{.*}} = %c0 to %c256 step %c64
// VNNI:             scf.for %{{.*}} = %c0 to %{{.*}} step %c4
// VNNI:               scf.for %{{.*}} = %c0 to %c18 step %c1
// VNNI:                 scf.for %{{.*}} = %c0 to %c8 step %c1 iter_args({{.*}}) -> (vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>)
// VNNI-COUNT-4:           vector.transfer_read %{{.*}} : tensor<18x8x1024xi8>, vector<64xi8>
// VNNI-COUNT-16:          llvm.inline_asm "vpdpbusd
// VNNI:                 arith.subi %{{.*}} : vector<16xi32>
// VNNI:                 vector.fma
// VNNI:             scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1
// VNNI-COUNT-4:         llvm.inline_asm "vpdpbusd
// PLAIN-LABEL: func.func private @prefill_layer(
// PLAIN:         scf.for %{{.*}} = %c0 to %c8 step %c1 iter_args({{.*}}) -> (vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>, vector<16xi32>)
// PLAIN:           arith.shrsi %{{.*}} : vector<16xi32>
// PLAIN:           arith.muli %{{.*}} : vector<16xi32>

func.func @prefill(%x: tensor<?x576xf32>, %w: tensor<576x1536xf32> {snapkv.weight = "w", snapkv.transposed}) -> tensor<?x1536xf32> {
  %y = call @prefill_layer(%x, %w) : (tensor<?x576xf32>, tensor<576x1536xf32>) -> tensor<?x1536xf32>
  return %y : tensor<?x1536xf32>
}

func.func private @prefill_layer(%x: tensor<?x576xf32>, %w: tensor<576x1536xf32>) -> tensor<?x1536xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %x, %c0 : tensor<?x576xf32>
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty(%m) : tensor<?x1536xf32>
  %c = linalg.fill ins(%zero : f32) outs(%init : tensor<?x1536xf32>) -> tensor<?x1536xf32>
  %y = linalg.matmul ins(%x, %w : tensor<?x576xf32>, tensor<576x1536xf32>) outs(%c : tensor<?x1536xf32>) -> tensor<?x1536xf32>
  return %y : tensor<?x1536xf32>
}
