"""The two CPU forms of the scoring give the same bits.

``--snapkv-cpu-pipeline`` keeps one (batch, query head)'s logits between the softmax
statistics and the votes (``keep-logits``, the default) and, for gqa mean/max, folds each
head's votes into its kv head's row in head order; ``keep-logits=false`` recomputes the
logits per tile and aggregates the G heads per key tile. Both must produce the same votes
and pooled scores bit for bit (same operations, same order), and both must match the
reference. B = 2, G = 2 and L = 300 (four full key tiles and a partial one) exercise the
row-to-kv-head mapping and the padded last tile.
"""

import ctypes

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import reference, runtime

B, HQ, HKV, W, L, D = 2, 4, 2, 8, 300, 16


def score_module(gqa):
    hc = HQ if gqa == "expand" else HKV
    clause = "" if gqa == "expand" else f" gqa {gqa}"
    tq, tk = f"tensor<{B}x{HQ}x{W}x{D}xf32>", f"tensor<{B}x{HKV}x{L}x{D}xf32>"
    tv = f"tensor<{B}x{hc}x{L - W}xf32>"
    return f"""module {{
  func.func @s(%q: {tq}, %k: {tk}) -> ({tv}, {tv}) {{
    %vi = tensor.empty() : {tv}
    %pi = tensor.empty() : {tv}
    %v, %p = snapkv.score %q, %k window {W}{clause} outs(%vi, %pi : {tv}, {tv})
        : ({tq}, {tk}) -> ({tv}, {tv})
    return %v, %p : {tv}, {tv}
  }}
}}
"""


@pytest.mark.parametrize("gqa", ["expand", "mean", "max"])
def test_kept_and_recomputed_logits_give_the_same_bits(gqa, tmp_path):
    require_aot_tools()
    rng = np.random.default_rng(0)
    q = (rng.standard_normal((B, HQ, W, D)) * 3).astype(np.float32)
    k = rng.standard_normal((B, HKV, L, D)).astype(np.float32)
    text = score_module(gqa)
    recompute = runtime.PIPELINE.replace("asserts=report", "asserts=report keep-logits=false")
    assert recompute != runtime.PIPELINE
    results = []
    for pipeline in (runtime.PIPELINE, recompute):
        lib = runtime.compile_library(text, cache_dir=tmp_path, pipeline=pipeline)
        fn = runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "s",
                                      runtime.signature(text, "s"))
        results.append(fn(q, k))
    kept, again = results
    for a, b in zip(kept, again):
        assert a.tobytes() == b.tobytes()
    # And the reference's votes (float64; capacity L - 1, so that it scores) to f32 rounding.
    ref = reference.select(q, k, k, W, L - 1, gqa=gqa)
    np.testing.assert_allclose(kept[0], ref.votes, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(kept[1], ref.pooled, rtol=2e-5, atol=1e-6)
