func.func @f32_static_expand(%q: tensor<1x4x4x16xf32>, %k: tensor<1x2x64x16xf32>, %v: tensor<1x2x64x16xf32>)
    -> (tensor<1x4x16x16xf32>, tensor<1x4x16x16xf32>, tensor<1x4x16xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 16 kernel 3
      : (tensor<1x4x4x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>)
      -> (tensor<1x4x16x16xf32>, tensor<1x4x16x16xf32>, tensor<1x4x16xi64>)
  return %ko, %vo, %idx : tensor<1x4x16x16xf32>, tensor<1x4x16x16xf32>, tensor<1x4x16xi64>
}

func.func @f32_dynamic_mean(%q: tensor<1x4x4x16xf32>, %k: tensor<1x2x?x16xf32>, %v: tensor<1x2x?x16xf32>)
    -> (tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 16 kernel 3 gqa mean
      : (tensor<1x4x4x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>)
      -> (tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?xi64>)
  return %ko, %vo, %idx : tensor<1x2x?x16xf32>, tensor<1x2x?x16xf32>, tensor<1x2x?xi64>
}

func.func @f32_static_max(%q: tensor<1x4x4x16xf32>, %k: tensor<1x2x64x16xf32>, %v: tensor<1x2x64x16xf32>)
    -> (tensor<1x2x16x16xf32>, tensor<1x2x16x16xf32>, tensor<1x2x16xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 16 kernel 3 gqa max order score
      : (tensor<1x4x4x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>)
      -> (tensor<1x2x16x16xf32>, tensor<1x2x16x16xf32>, tensor<1x2x16xi64>)
  return %ko, %vo, %idx : tensor<1x2x16x16xf32>, tensor<1x2x16x16xf32>, tensor<1x2x16xi64>
}

func.func @f16_dynamic_expand(%q: tensor<1x4x4x16xf16>, %k: tensor<1x2x?x16xf16>, %v: tensor<1x2x?x16xf16>)
    -> (tensor<1x4x?x16xf16>, tensor<1x4x?x16xf16>, tensor<1x4x?xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 16 kernel 3 order score
      : (tensor<1x4x4x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>)
      -> (tensor<1x4x?x16xf16>, tensor<1x4x?x16xf16>, tensor<1x4x?xi64>)
  return %ko, %vo, %idx : tensor<1x4x?x16xf16>, tensor<1x4x?x16xf16>, tensor<1x4x?xi64>
}

func.func @f16_static_mean(%q: tensor<1x4x4x16xf16>, %k: tensor<1x2x64x16xf16>, %v: tensor<1x2x64x16xf16>)
    -> (tensor<1x2x16x16xf16>, tensor<1x2x16x16xf16>, tensor<1x2x16xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 16 kernel 3 gqa mean
      : (tensor<1x4x4x16xf16>, tensor<1x2x64x16xf16>, tensor<1x2x64x16xf16>)
      -> (tensor<1x2x16x16xf16>, tensor<1x2x16x16xf16>, tensor<1x2x16xi64>)
  return %ko, %vo, %idx : tensor<1x2x16x16xf16>, tensor<1x2x16x16xf16>, tensor<1x2x16xi64>
}

func.func @f16_dynamic_max(%q: tensor<1x4x4x16xf16>, %k: tensor<1x2x?x16xf16>, %v: tensor<1x2x?x16xf16>)
    -> (tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 16 kernel 3 gqa max
      : (tensor<1x4x4x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>)
      -> (tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>)
  return %ko, %vo, %idx : tensor<1x2x?x16xf16>, tensor<1x2x?x16xf16>, tensor<1x2x?xi64>
}

func.func @bf16_dynamic_expand(%q: tensor<1x4x4x16xbf16>, %k: tensor<1x2x?x16xbf16>, %v: tensor<1x2x?x16xbf16>)
    -> (tensor<1x4x?x16xbf16>, tensor<1x4x?x16xbf16>, tensor<1x4x?xi64>) {
  %ko, %vo, %idx = snapkv.select %q, %k, %v window 4 capacity 16 kernel 3
      : (tensor<1x4x4x16xbf16>, tensor<1x2x?x16xbf16>, tensor<1x2x?x16xbf16>)
      -> (tensor<1x4x?x16xbf16>, tensor<1x4x?x16xbf16>, tensor<1x4x?xi64>)
  return %ko, %vo, %idx : tensor<1x4x?x16xbf16>, tensor<1x4x?x16xbf16>, tensor<1x4x?xi64>
}
