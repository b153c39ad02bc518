"""The seed's worked example (L=8, W=2, C=5, D=2, kernel 3, avg pooling), compiled with
`snapkv-opt --snapkv-cpu-pipeline` and run with `mlir-runner`:  python -m snapkv.demo

The op returns only K, V and indices, so votes and pooled scores come from the Python
reference; the kept positions and gathered rows come from the compiled code."""

import math
import sys

import numpy as np

from .mlirgen import Case, ToolError, run_cases

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


def report(order, case, compiled):
    ref = case.reference()
    ref_idx = ref.indices[0, 0].tolist()
    got_idx = compiled.indices[0, 0].tolist()
    kept = set(got_idx)
    prefix = len(A) - WINDOW
    print(f"\norder {order}")
    print(f"{'position':>8}  {'votes (Python ref)':>18}  {'pooled (Python ref)':>19}  "
          f"{'kept (compiled)':>15}")
    for j in range(len(A)):
        votes = f"{ref.votes[0, 0, j]:.6f}" if j < prefix else "window"
        pooled = f"{ref.pooled[0, 0, j]:.6f}" if j < prefix else "window"
        print(f"{j:>8}  {votes:>18}  {pooled:>19}  {'yes' if j in kept else 'no':>15}")
    values = np.asarray(compiled.values, dtype=np.int32).view(np.float32)[0, 0]
    print(f"kept indices (compiled):  {got_idx}")
    print(f"kept indices (reference): {ref_idx}")
    print(f"gathered values (compiled): {values.tolist()}")
    agree = got_idx == ref_idx and np.array_equal(
        compiled.values, ref.values.view(np.int32)) and np.array_equal(
        compiled.keys, ref.keys.view(np.int32))
    print("compiled and reference " + ("agree (indices and bit-exact K/V)" if agree
                                       else "DISAGREE"))
    return agree


def main():
    print(f"SnapKV worked example: L={len(A)}, W={WINDOW}, C={CAPACITY}, D=2, "
          f"kernel {KERNEL}, avg pooling")
    print("votes = sum over the window queries of the full causal softmax; "
          "pooled = avg_pool1d(votes, 3, pad 1, count_include_pad)")
    cases = [example_case("position"), example_case("score")]
    try:
        outputs = run_cases(cases)
    except ToolError as error:
        print(f"\ncannot run the compiled example: {error}", file=sys.stderr)
        return 1
    agree = [report(case.order, case, out) for case, out in zip(cases, outputs)]
    return 0 if all(agree) else 1


if __name__ == "__main__":
    sys.exit(main())
