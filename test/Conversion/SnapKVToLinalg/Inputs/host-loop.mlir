// A loop over a dynamic number of positions at function level (what the
// previous lowering's compaction was): check_host_loops.py must reject it.
func.func @host_loop(%t: tensor<?xi64>) -> tensor<?xi64> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %t, %c0 : tensor<?xi64>
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %t) -> (tensor<?xi64>) {
    %x = arith.index_cast %i : index to i64
    %u = tensor.insert %x into %acc[%i] : tensor<?xi64>
    scf.yield %u : tensor<?xi64>
  }
  return %r : tensor<?xi64>
}
