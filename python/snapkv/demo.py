"""The seed's worked example (L=8, W=2, C=5, D=2, kernel 3, avg pooling), compiled with
`snapkv-opt --snapkv-cpu-pipeline` (then snapkv-translate and clang) and called in process:
python -m snapkv.demo

Votes and pooled scores come from the compiled `snapkv.score`, kept positions and gathered
rows from the compiled `snapkv.select`; the Python reference is printed beside them."""

import math
import sys

import numpy as np

from .mlirgen import Case, ToolError, call, compile_functions, dense_hex, run_cases, tensor_type
from .runtime.signatures import Signature, TensorType

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
    """(votes, pooled) of the compiled `snapkv.score`, as the f32 it computed."""
    prefix = case.k.shape[2] - case.window
    q_t, k_t = tensor_type(case.q.shape, "f32"), tensor_type(case.k.shape, "f32")
    out_t = tensor_type((1, 1, prefix), "f32")
    text = f"""func.func @scores() -> ({out_t}, {out_t}) {{
  %q = arith.constant dense<{dense_hex(case.q)}> : {q_t}
  %k = arith.constant dense<{dense_hex(case.k)}> : {k_t}
  %votes_init = tensor.empty() : {out_t}
  %pooled_init = tensor.empty() : {out_t}
  %votes, %pooled = snapkv.score %q, %k window {case.window} kernel {case.kernel}
      outs(%votes_init, %pooled_init : {out_t}, {out_t})
      : ({q_t}, {k_t}) -> ({out_t}, {out_t})
  return %votes, %pooled : {out_t}, {out_t}
}}
"""
    scores = TensorType((1, 1, prefix), "f32")
    function = compile_functions(text, {"scores": Signature((), (scores, scores))},
                                 label="snapkv.score")["scores"]
    votes, pooled = call(function)
    return votes[0, 0], pooled[0, 0]


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
