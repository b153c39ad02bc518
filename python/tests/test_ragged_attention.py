"""`snapkv.ragged_attention` (a decode step over a ragged cache, each head its own rows)
compiled by the CPU pipeline against the float64 reference `snapkv.reference.ragged_attention`:
heads of different lengths packed back to back (what `snapkv.select_adaptive` leaves), heads
with room between them (where decoding appends), GQA groups and one head per query head, a
head of one row, f16, an explicit scale, and the run-time checks of the rows."""

import ctypes

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import reference, runtime


def _function(batch, q_heads, cache_heads, dim, elem="f32", scale=None):
    require_aot_tools()
    q_t = f"tensor<{batch}x{q_heads}x1x{dim}x{elem}>"
    rows_t = f"tensor<{batch}x?x{dim}x{elem}>"
    index_t = f"tensor<{batch}x{cache_heads}xi64>"
    clause = f" scale {scale!r}" if scale is not None else ""
    text = (f"module {{\nfunc.func @ragged(%q: {q_t}, %k: {rows_t}, %v: {rows_t}, "
            f"%s: {index_t}, %l: {index_t}) -> {q_t} {{\n"
            f"  %o = snapkv.ragged_attention %q, %k, %v rows(%s, %l){clause}"
            f" : {q_t}, {rows_t}, {rows_t}, {index_t} -> {q_t}\n"
            f"  return %o : {q_t}\n}}\n}}\n")
    lib = runtime.compile_library(text, label="ragged attention")
    return runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "ragged",
                                    runtime.signature(text, "ragged"))


def _layout(rng, batch, heads, room):
    """Per (b, head) a length in [1, 150] and a start: the heads one after another with
    `room` unused rows after each. Returns (starts, lengths, total rows)."""
    lengths = rng.integers(1, 151, size=(batch, heads))
    spans = lengths + room
    starts = np.concatenate([np.zeros((batch, 1), dtype=np.int64),
                             np.cumsum(spans, axis=1)[:, :-1]], axis=1)
    return starts.astype(np.int64), lengths.astype(np.int64), int(spans.sum(axis=1).max())


@pytest.mark.parametrize("batch,q_heads,cache_heads,dim,room",
                         [(1, 9, 3, 64, 0), (2, 4, 4, 16, 7), (1, 6, 2, 8, 3), (2, 8, 1, 32, 0)])
def test_each_head_attends_its_own_rows(batch, q_heads, cache_heads, dim, room):
    fn = _function(batch, q_heads, cache_heads, dim)
    rng = np.random.default_rng(q_heads * 100 + dim + room)
    for _ in range(3):
        starts, lengths, total = _layout(rng, batch, cache_heads, room)
        q = rng.standard_normal((batch, q_heads, 1, dim), dtype=np.float32)
        k, v = (rng.standard_normal((batch, total, dim), dtype=np.float32) for _ in range(2))
        (out,) = fn(q, k, v, starts, lengths)
        np.testing.assert_allclose(out, reference.ragged_attention(q, k, v, starts, lengths),
                                   rtol=0, atol=2e-6)
    # One row per head: the output is that row's value.
    ones = np.ones((batch, cache_heads), dtype=np.int64)
    (out,) = fn(q, k, v, starts, ones)
    group = q_heads // cache_heads
    for b in range(batch):
        for h in range(q_heads):
            assert np.array_equal(out[b, h, 0], v[b, starts[b, h // group]])


def test_f16_and_an_explicit_scale():
    fn = _function(1, 4, 2, 16, elem="f16", scale=2.0)
    rng = np.random.default_rng(5)
    starts, lengths, total = _layout(rng, 1, 2, 0)
    q = rng.standard_normal((1, 4, 1, 16)).astype(np.float16)
    k, v = (rng.standard_normal((1, total, 16)).astype(np.float16) for _ in range(2))
    (out,) = fn(q, k, v, starts, lengths)
    want = reference.ragged_attention(q, k, v, starts, lengths, scale=2.0, elem="f16")
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=0, atol=2e-3)


@pytest.mark.parametrize("starts,lengths,message", [
    ([[0, 5]], [[5, 0]], "a head has no rows"),
    ([[0, -1]], [[5, 3]], "rows start before row 0"),
    ([[0, 8]], [[5, 3]], "rows end past the cache"),
])
def test_rows_outside_the_cache_are_reported(starts, lengths, message):
    fn = _function(1, 2, 2, 8)
    q = np.zeros((1, 2, 1, 8), dtype=np.float32)
    k = v = np.zeros((1, 10, 8), dtype=np.float32)
    with pytest.raises(runtime.CompiledCheckError, match=message):
        fn(q, k, v, np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64))
