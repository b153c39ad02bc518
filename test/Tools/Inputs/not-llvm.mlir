// Input of snapkv-translate.mlir: not lowered to the LLVM dialect.
func.func @f(%x: i32) -> i32 {
  return %x : i32
}
