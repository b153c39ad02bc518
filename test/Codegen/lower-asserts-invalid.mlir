// RUN: snapkv-opt %s --split-input-file --snapkv-lower-asserts=mode=report --verify-diagnostics

// In report mode a check must be able to return from its function.
func.func @nested(%ok: i1) {
  scf.execute_region {
    // expected-error @below {{snapkv-lower-asserts: mode=report cannot return from a check inside 'scf.execute_region' (lower it to a function body first, e.g. with convert-scf-to-cf)}}
    cf.assert %ok, "nested"
    scf.yield
  }
  return
}

// -----

func.func private @may_fail(%ok: i1) {
  cf.assert %ok, "may fail"
  return
}
func.func @nested_call(%ok: i1) {
  scf.execute_region {
    // expected-error @below {{snapkv-lower-asserts: mode=report cannot return from a call of @may_fail (which can fail) inside 'scf.execute_region'}}
    func.call @may_fail(%ok) : (i1) -> ()
    scf.yield
  }
  return
}

// -----

// expected-error @below {{snapkv-lower-asserts: mode=report defines @snapkv_last_error, which this module already has}}
llvm.func @snapkv_last_error() -> !llvm.ptr
func.func @f(%ok: i1) {
  cf.assert %ok, "f"
  return
}
