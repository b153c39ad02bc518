// f16 MHA (G = 1) with W = 8, D = 16: the smallest tensor-core shape, one MMA per step and
// no step loop (one head per kv head), so the warp's contraction sits directly in the kernel
// body next to its scalar index arithmetic.
func.func @mha(%q: tensor<1x2x8x16xf16>, %k: tensor<1x2x?x16xf16>, %v: tensor<1x2x?x16xf16>)
    -> (tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 8 capacity 24
      : (tensor<1x2x8x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>)
      -> (tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>)
  return %ko, %vo, %idx : tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>
}
