// An alias must stay in the part that defines what it refers to: snapkv-translate
// leaves modules with aliases to llvm::SplitModule (see snapkv-translate-balance.mlir).
llvm.func @impl(%x: i32) -> i32 {
  llvm.return %x : i32
}
llvm.mlir.alias external @alias : !llvm.func<i32 (i32)> {
  %0 = llvm.mlir.addressof @impl : !llvm.ptr
  llvm.return %0 : !llvm.ptr
}
llvm.func @other(%x: i32) -> i32 {
  %0 = llvm.add %x, %x : i32
  llvm.return %0 : i32
}
