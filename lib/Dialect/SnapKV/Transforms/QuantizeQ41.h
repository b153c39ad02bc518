//===- QuantizeQ41.h - products by GGUF Q4_1 weights ------------*- C++ -*-===//

#ifndef SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_QUANTIZEQ41_H
#define SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_QUANTIZEQ41_H

#include "mlir/IR/Builders.h"

namespace mlir::snapkv {

/// `init + x * W` for the Q4_1 weight W of `bytes` (`[k / 2, n]` i8: per
/// block of 32 rows, 16 rows of bytes, value j in the low nibble of byte row
/// j and value 16 + j in its high nibble), `scales` and `mins` (`[k / 32, n]`
/// f32): one linalg.generic of q41ContractionMaps (Q41Contraction.h), `x`
/// (`[1, k]`, f32 or bf16) widened in its body. `int8Activations`: `x`
/// quantized per block of 32 first (quantizeActivationBlocks), the generic of
/// q41Int8ContractionMaps.
Value buildQ41Contraction(OpBuilder &b, Location loc, Value x, Value bytes,
                          Value scales, Value mins, Value init,
                          bool int8Activations);

/// `x` (`[1, k]`, f32 or bf16) quantized per block of 32 as GGUF Q8_0
/// quantizes: `scale = max|x| / 127` and `a = round(x / scale)` (a multiply
/// by `1 / scale`, 0 for a block of zeros). Returns `a` (`[1, k / 32, 32]`
/// i8) and the scales (`[1, k / 32]` f32). Defined in QuantizeWeights.cpp
/// (the Q8_0 products' `activations=i8`).
std::pair<Value, Value> quantizeActivationBlocks(OpBuilder &b, Location loc,
                                                 Value x);

/// The `[k, n]` weight of `bytes`, `scales` and `mins` in `type`: `q * d +
/// m` in f32 (gguf-py's dequantization), rounded to `type` if that is not
/// f32.
Value buildQ41Dequantize(OpBuilder &b, Location loc, Value bytes, Value scales,
                         Value mins, Type type);

} // namespace mlir::snapkv

#endif // SNAPKV_LIB_DIALECT_SNAPKV_TRANSFORMS_QUANTIZEQ41_H
