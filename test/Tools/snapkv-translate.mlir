// RUN: rm -rf %t && mkdir -p %t
// RUN: snapkv-translate %s -o %t/whole.bc
// RUN: llvm-dis %t/whole.bc -o - | FileCheck %s --check-prefix=WHOLE
// RUN: snapkv-translate %s --parts 2 -o %t/part
// RUN: llvm-dis %t/part0 -o - | FileCheck %s --check-prefix=PART0
// RUN: llvm-dis %t/part1 -o - | FileCheck %s --check-prefix=PART1
// RUN: not snapkv-translate %s --parts 0 -o %t/none 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not snapkv-translate %S/Inputs/not-llvm.mlir -o %t/bad 2>&1 | FileCheck %s --check-prefix=BAD

// LLVM-dialect MLIR to bitcode, whole or split by function into parts of
// about the same size (largest function first into the lightest part; here
// @first and @second have two instructions, the others one): each part
// defines half of the functions and declares what it calls in the other.

// WHOLE: define i32 @first
// WHOLE: define i32 @second
// WHOLE: define i32 @third
// WHOLE: define i32 @fourth

// PART0-DAG: define i32 @first
// PART0-DAG: define i32 @third
// PART0-DAG: declare i32 @second
// PART0-NOT: define i32 @second
// PART0-NOT: define i32 @fourth

// PART1-DAG: define i32 @second
// PART1-DAG: define i32 @fourth
// PART1-NOT: define i32 @first
// PART1-NOT: define i32 @third

// ZERO: --parts must be at least 1
// BAD: not-llvm.mlir:2:1: error: Dialect `func' not found for custom op 'func.func'

llvm.func @first(%x: i32) -> i32 {
  %r = llvm.call @second(%x) : (i32) -> i32
  llvm.return %r : i32
}
llvm.func @second(%x: i32) -> i32 {
  %r = llvm.add %x, %x : i32
  llvm.return %r : i32
}
llvm.func @third(%x: i32) -> i32 {
  llvm.return %x : i32
}
llvm.func @fourth(%x: i32) -> i32 {
  llvm.return %x : i32
}
