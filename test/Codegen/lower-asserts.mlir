// RUN: snapkv-opt %s --snapkv-lower-asserts | FileCheck %s --implicit-check-not=cf.assert

// A failed cf.assert writes its message and a newline to fd 2 and aborts; no
// cf.assert is left (--implicit-check-not covers the whole output).
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
// CHECK-NEXT: return
func.func @check(%ok: i1) {
  cf.assert %ok, "length too short"
  return
}
