"""The seed's worked example (L=8, W=2, C=5, D=2, kernel 3, avg pooling), compiled with
`snapkv-opt --snapkv-cpu-pipeline` and run with `mlir-runner`:  python -m snapkv.demo

Votes and pooled scores come from the compiled `snapkv.score`, kept positions and gathered
rows from the compiled `snapkv.select`; the Python reference is printed beside them."""

import math
import sys

import numpy as np

from .mlirgen import Case, ToolError, dense_hex, parse_memrefs, run_cases, run_module, tensor_type

A = [1, 2, 10, 8, 1, 1, 2, 1]   # exp(logit) of query 6 over positions 0..7 (7 is masked)
B = [1, 1, 8, 12, 1, 1, 1, 1]   # exp(logit) of query 7
WINDOW, CAPACITY, KERNEL = 2, 5, 3


def example_case(order):
    # q6 = [sqrt2, 0], q7 = [0, sqrt2] and k_j = [ln a_j, ln b_j]: with the default scale
    # 1/sqrt(2) the logits are exactly ln a_j and ln b_j. Values are [j, -j].
    k = np.array([[math.log(a), math.log(b)] for a, b in zip(A, B)], np.float32)
    q = np.array([[math.sqrt(2), 0], [0, math.sqrt(2)]], np.float32)
    v = np.array([[j, -j] for j in range(len(A))], np.float32)
    return Case(q[None, None], k[None, None], v[None, None], WINDOW, CAPACITY,
                kernel=KERNEL, pooling="avg", order=order)


def compiled_scores(case):
    """(votes, pooled) of the compiled `snapkv.score`, read back bit-exactly as f32."""
    prefix = case.k.shape[2] - case.window
    q_t, k_t = tensor_type(case.q.shape, "f32"), tensor_type(case.k.shape, "f32")
    out_t = tensor_type((1, 1, prefix), "f32")
    bits_t = tensor_type((1, 1, prefix), "i32")
    identity = "affine_map<(a, b, c) -> (a, b, c)>"
    prints = ""
    for name in ("votes", "pooled"):
        prints += f"""
  %{name}_e = tensor.empty() : {bits_t}
  %{name}_b = linalg.generic {{indexing_maps = [{identity}, {identity}],
      iterator_types = ["parallel", "parallel", "parallel"]}}
      ins(%{name} : {out_t}) outs(%{name}_e : {bits_t}) {{
  ^bb0(%x: f32, %o: i32):
    %y = arith.bitcast %x : f32 to i32
    linalg.yield %y : i32
  }} -> {bits_t}
  %{name}_m = bufferization.to_buffer %{name}_b : {bits_t} to memref<1x1x{prefix}xi32>
  %{name}_u = memref.cast %{name}_m : memref<1x1x{prefix}xi32> to memref<*xi32>
  call @printMemrefI32(%{name}_u) : (memref<*xi32>) -> ()"""
    text = f"""func.func private @printMemrefI32(memref<*xi32>) attributes {{llvm.emit_c_interface}}
func.func @main() {{
  %q = arith.constant dense<{dense_hex(case.q)}> : {q_t}
  %k = arith.constant dense<{dense_hex(case.k)}> : {k_t}
  %votes_init = tensor.empty() : {out_t}
  %pooled_init = tensor.empty() : {out_t}
  %votes, %pooled = snapkv.score %q, %k window {case.window} kernel {case.kernel}
      outs(%votes_init, %pooled_init : {out_t}, {out_t})
      : ({q_t}, {k_t}) -> ({out_t}, {out_t}){prints}
  return
}}
"""
    votes, pooled = parse_memrefs(run_module(text))
    def as_f32(a):
        return a.astype(np.int32).view(np.float32)[0, 0]

    return as_f32(votes), as_f32(pooled)


def report(order, case, compiled, scores):
    ref = case.reference()
    ref_idx = ref.indices[0, 0].tolist()
    got_idx = compiled.indices[0, 0].tolist()
    kept = set(got_idx)
    prefix = len(A) - WINDOW
    print(f"\norder {order}")
    votes, pooled = scores
    print(f"{'position':>8}  {'votes':>10}  {'(reference)':>11}  {'pooled':>10}  "
          f"{'(reference)':>11}  {'kept':>4}")
    for j in range(len(A)):
        if j < prefix:
            cells = (f"{votes[j]:>10.6f}  {ref.votes[0, 0, j]:>11.6f}  "
                     f"{pooled[j]:>10.6f}  {ref.pooled[0, 0, j]:>11.6f}")
        else:
            cells = f"{'window':>10}  {'':>11}  {'window':>10}  {'':>11}"
        print(f"{j:>8}  {cells}  {'yes' if j in kept else 'no':>4}")
    values = np.asarray(compiled.values, dtype=np.int32).view(np.float32)[0, 0]
    print(f"kept indices (compiled):  {got_idx}")
    print(f"kept indices (reference): {ref_idx}")
    print(f"gathered values (compiled): {values.tolist()}")
    close = np.allclose(votes, ref.votes[0, 0], rtol=1e-5, atol=1e-7) and np.allclose(
        pooled, ref.pooled[0, 0], rtol=1e-5, atol=1e-7)
    agree = close and got_idx == ref_idx and np.array_equal(
        compiled.values, ref.values.view(np.int32)) and np.array_equal(
        compiled.keys, ref.keys.view(np.int32))
    print("compiled and reference " + ("agree (scores to 1e-5, same indices, bit-exact K/V)"
                                       if agree else "DISAGREE"))
    return agree


def main():
    print(f"SnapKV worked example: L={len(A)}, W={WINDOW}, C={CAPACITY}, D=2, "
          f"kernel {KERNEL}, avg pooling")
    print("votes = sum over the window queries of the full causal softmax; "
          "pooled = avg_pool1d(votes, 3, pad 1, count_include_pad)")
    print("columns: compiled (snapkv.score / snapkv.select, f32) and the float64 Python reference")
    cases = [example_case("position"), example_case("score")]
    try:
        outputs = run_cases(cases)
        scores = compiled_scores(cases[0])
    except ToolError as error:
        print(f"\ncannot run the compiled example: {error}", file=sys.stderr)
        return 1
    agree = [report(case.order, case, out, scores) for case, out in zip(cases, outputs)]
    return 0 if all(agree) else 1


if __name__ == "__main__":
    sys.exit(main())
