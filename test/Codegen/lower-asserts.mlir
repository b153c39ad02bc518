// RUN: snapkv-opt %s --split-input-file --snapkv-lower-asserts | FileCheck %s
// RUN: snapkv-opt %s --split-input-file --snapkv-lower-asserts=mode=report | FileCheck %s --check-prefix=REPORT
// RUN: not snapkv-opt %s --snapkv-lower-asserts=mode=bogus 2>&1 | FileCheck %s --check-prefix=BADMODE

// BADMODE: for the --mode option: Cannot find option named 'bogus'!

// mode=abort (the default): a failed cf.assert writes its message and a
// newline to fd 2 and aborts.
// CHECK: llvm.mlir.global internal constant @snapkv_assert_msg_0("length too short\0A")
// CHECK: llvm.func @abort()
// CHECK: llvm.func @write(i32, !llvm.ptr, i64) -> i64
// CHECK-LABEL: func.func @check
// CHECK: cf.cond_br %arg0, ^[[OK:.*]], ^[[FAIL:.*]]
// CHECK: ^[[FAIL]]:
// CHECK: %[[MSG:.*]] = llvm.mlir.addressof @snapkv_assert_msg_0
// CHECK: %[[FD:.*]] = llvm.mlir.constant(2 : i32)
// CHECK: %[[LEN:.*]] = llvm.mlir.constant(17 : i64)
// CHECK: llvm.call @write(%[[FD]], %{{.*}}, %[[LEN]])
// CHECK: llvm.call @abort()
// CHECK: llvm.unreachable
// CHECK: ^[[OK]]:
// CHECK: return %arg1
// CHECK-NOT: cf.assert

// mode=report: the message (NUL-terminated) goes to the error slot, the
// function returns placeholders, its callers check the slot after the call,
// public functions clear it on entry, @snapkv_last_error reads it.
// REPORT-DAG: llvm.mlir.global internal constant @[[MSG:snapkv_assert_msg_0]]("length too short\00")
// REPORT-DAG: llvm.mlir.global internal @snapkv_error_slot() {{.*}} : !llvm.ptr {
// REPORT-DAG: llvm.func @snapkv_last_error() -> !llvm.ptr {
// REPORT-LABEL: func.func @check(%arg0: i1, %arg1: memref<?xf32>) -> (memref<?xf32>, index, f32)
// REPORT-NEXT: %[[SLOT:.*]] = llvm.mlir.addressof @snapkv_error_slot
// REPORT-NEXT: %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// REPORT-NEXT: llvm.store %[[NULL]], %[[SLOT]]
// REPORT-NEXT: cf.cond_br %arg0, ^[[OK:.*]], ^[[FAIL:.*]]
// REPORT: ^[[OK]]:
// REPORT: return %arg1
// REPORT: ^[[FAIL]]:
// REPORT-NEXT: %[[A:.*]] = llvm.mlir.addressof @[[MSG]]
// REPORT-NEXT: %[[TEXT:.*]] = llvm.getelementptr %[[A]][0, 0]
// REPORT-NEXT: %[[SLOT2:.*]] = llvm.mlir.addressof @snapkv_error_slot
// REPORT-NEXT: llvm.store %[[TEXT]], %[[SLOT2]]
// REPORT-NEXT: cf.br ^[[EXIT:.*]]
// REPORT: ^[[EXIT]]:
// REPORT-NEXT: %[[Z:.*]] = llvm.mlir.zero : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
// REPORT-NEXT: %[[M:.*]] = builtin.unrealized_conversion_cast %[[Z]] {{.*}} to memref<?xf32>
// REPORT-NEXT: %[[I:.*]] = arith.constant 0 : index
// REPORT-NEXT: %[[F:.*]] = arith.constant 0.000000e+00 : f32
// REPORT-NEXT: return %[[M]], %[[I]], %[[F]]
// REPORT-NOT: cf.assert
func.func @check(%ok: i1, %m: memref<?xf32>) -> (memref<?xf32>, index, f32) {
  cf.assert %ok, "length too short"
  %c = arith.constant 1 : index
  %f = arith.constant 1.0 : f32
  return %m, %c, %f : memref<?xf32>, index, f32
}

// -----

// REPORT-LABEL: func.func private @helper
// REPORT-NOT: llvm.store %{{.*}}, %{{.*}} : !llvm.ptr, !llvm.ptr
// REPORT: cf.cond_br
// REPORT-LABEL: func.func @caller
// REPORT: call @helper(%arg0)
// REPORT-NEXT: %[[SLOT:.*]] = llvm.mlir.addressof @snapkv_error_slot
// REPORT-NEXT: %[[MSG:.*]] = llvm.load %[[SLOT]] : !llvm.ptr -> !llvm.ptr
// REPORT-NEXT: %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// REPORT-NEXT: %[[OK:.*]] = llvm.icmp "eq" %[[MSG]], %[[NULL]]
// REPORT-NEXT: cf.cond_br %[[OK]], ^[[CONT:.*]], ^[[EXIT:.*]]
// REPORT: ^[[CONT]]:
// REPORT-NEXT: arith.constant 7 : i32
// REPORT: ^[[EXIT]]:
// REPORT-NEXT: %[[Z:.*]] = arith.constant 0 : i32
// REPORT-NEXT: return %[[Z]] : i32
// A function that cannot fail only clears the slot.
// REPORT-LABEL: func.func @safe
// REPORT-NEXT: llvm.mlir.addressof @snapkv_error_slot
// REPORT-NEXT: llvm.mlir.zero
// REPORT-NEXT: llvm.store
// REPORT-NEXT: return
func.func private @helper(%ok: i1) {
  cf.assert %ok, "helper failed"
  return
}
func.func @caller(%ok: i1) -> i32 {
  call @helper(%ok) : (i1) -> ()
  %c = arith.constant 7 : i32
  return %c : i32
}
func.func @safe() {
  return
}

// -----

// mode=report also checks heap allocations: a null pointer from malloc is a
// failed check ("out of memory"), not a crash later. mode=abort leaves them.
// REPORT: llvm.mlir.global internal constant @[[OOM:snapkv_assert_msg_0]]("out of memory: @alloc could not allocate a memref<?xf32>\00")
// REPORT-LABEL: func.func @alloc
// REPORT: %[[M:.*]] = memref.alloc(%arg0) : memref<?xf32>
// REPORT-NEXT: %[[P:.*]] = memref.extract_aligned_pointer_as_index %[[M]]
// REPORT-NEXT: %[[Z:.*]] = arith.constant 0 : index
// REPORT-NEXT: %[[OK:.*]] = arith.cmpi ne, %[[P]], %[[Z]]
// REPORT-NEXT: cf.cond_br %[[OK]]
// REPORT: llvm.mlir.addressof @[[OOM]]
// CHECK-LABEL: func.func @alloc
// CHECK-NOT: extract_aligned_pointer
// CHECK: return
func.func @alloc(%n: index) -> memref<?xf32> {
  %m = memref.alloc(%n) : memref<?xf32>
  return %m : memref<?xf32>
}
