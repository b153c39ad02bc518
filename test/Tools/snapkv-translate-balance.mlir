// RUN: rm -rf %t && mkdir -p %t
// RUN: snapkv-translate %s --parts 2 -o %t/part
// RUN: llvm-dis %t/part0 -o - | FileCheck %s --check-prefix=PART0
// RUN: llvm-dis %t/part1 -o - | FileCheck %s --check-prefix=PART1
// RUN: snapkv-translate %S/Inputs/with-alias.mlir --parts 2 -o %t/alias
// RUN: llvm-dis %t/alias0 -o - | FileCheck %s --check-prefix=ALIAS0
// RUN: llvm-dis %t/alias1 -o - | FileCheck %s --check-prefix=ALIAS1

// Parts of about the same size, not the same count: @big (five instructions)
// fills part 0 alone and the three small functions go to part 1. Dealing the
// functions out in turn would give {a, c} and {b, big}. An internal function
// and an internal global become hidden externals, so that the parts link; the
// global is defined in part 0 only.

// PART0: @counter = hidden global i32 0
// PART0-DAG: declare i32 @a(i32)
// PART0-DAG: declare i32 @b(i32)
// PART0-DAG: declare hidden i32 @c(i32)
// PART0-DAG: define i32 @big(

// PART1: @counter = external hidden global i32
// PART1-DAG: define i32 @a(
// PART1-DAG: define i32 @b(
// PART1-DAG: define hidden i32 @c(
// PART1-DAG: declare i32 @big(i32)

// A module with an alias goes to llvm::SplitModule, which keeps the alias
// with the function it names.
// ALIAS0-DAG: @alias = alias i32 (i32), ptr @impl
// ALIAS0-DAG: define i32 @impl(
// ALIAS0-DAG: declare i32 @other(i32)
// ALIAS1-DAG: define i32 @other(
// ALIAS1-DAG: declare i32 @impl(i32)
// ALIAS1-NOT: @alias = alias

llvm.mlir.global internal @counter(0 : i32) : i32
llvm.func @a(%x: i32) -> i32 {
  llvm.return %x : i32
}
llvm.func @b(%x: i32) -> i32 {
  llvm.return %x : i32
}
llvm.func internal @c(%x: i32) -> i32 {
  %p = llvm.mlir.addressof @counter : !llvm.ptr
  %v = llvm.load %p : !llvm.ptr -> i32
  llvm.return %v : i32
}
llvm.func @big(%x: i32) -> i32 {
  %0 = llvm.add %x, %x : i32
  %1 = llvm.mul %0, %x : i32
  %2 = llvm.sub %1, %x : i32
  %3 = llvm.call @c(%2) : (i32) -> i32
  llvm.return %3 : i32
}
