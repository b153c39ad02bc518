// The GPU benchmark shape (B=1, Hq=32, Hkv=8, D=128, W=32, C=2048, kernel 5 avg) at a
// static L = 32768, f16 and bf16, expand and mean.
func.func @f16_expand(%q: tensor<1x32x32x128xf16>, %k: tensor<1x8x32768x128xf16>, %v: tensor<1x8x32768x128xf16>)
    -> (tensor<1x32x2048x128xf16>, tensor<1x32x2048x128xf16>, tensor<1x32x2048xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 32 capacity 2048
      : (tensor<1x32x32x128xf16>, tensor<1x8x32768x128xf16>, tensor<1x8x32768x128xf16>)
      -> (tensor<1x32x2048x128xf16>, tensor<1x32x2048x128xf16>, tensor<1x32x2048xi64>)
  return %ko, %vo, %idx : tensor<1x32x2048x128xf16>, tensor<1x32x2048x128xf16>, tensor<1x32x2048xi64>
}

func.func @bf16_mean(%q: tensor<1x32x32x128xbf16>, %k: tensor<1x8x32768x128xbf16>, %v: tensor<1x8x32768x128xbf16>)
    -> (tensor<1x8x2048x128xbf16>, tensor<1x8x2048x128xbf16>, tensor<1x8x2048xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 32 capacity 2048 gqa mean
      : (tensor<1x32x32x128xbf16>, tensor<1x8x32768x128xbf16>, tensor<1x8x32768x128xbf16>)
      -> (tensor<1x8x2048x128xbf16>, tensor<1x8x2048x128xbf16>, tensor<1x8x2048xi64>)
  return %ko, %vo, %idx : tensor<1x8x2048x128xbf16>, tensor<1x8x2048x128xbf16>, tensor<1x8x2048xi64>
}
