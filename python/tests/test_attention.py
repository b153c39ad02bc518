"""`snapkv.attention` compiled by the CPU pipeline (snapkv-opt --snapkv-cpu-pipeline, clang,
called through snapkv.runtime) against the float64 reference `snapkv.reference.attention`.

The compiled op is FlashAttention's online softmax in f32, the op tiled through its
TilingInterface over tiles of query rows and each tile decomposed over tiles of keys;
the shapes below cross every tile boundary (one row, a partial last tile, whole tiles, keys
shorter than one tile, the last key tile overlapping its predecessor), the GQA groups, the
alignment of the causal mask (prefill Lq = Lk, decode Lq = 1, rows that see no key when
Lq > Lk), static and dynamic lengths, a decode step's static single row, f16 and an explicit
scale."""

import ctypes

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import reference, runtime, tools

SMALL_TILES = "query-tile=4 key-tile=8"


def _function(q_shape, kv_shape, elem, scale, tiles, offset=False, key_loop=False, extra=""):
    """`key_loop`: the untiled conversion's form (what IREE gets, one scf.for over key
    tiles of 8) lowered first, then compiled by the same pipeline. `extra`: more clauses
    of the op (softcap, sliding_window)."""
    require_aot_tools()
    ty = {"f32": "f32", "f16": "f16", "bf16": "bf16"}[elem]

    def tensor(shape):
        return "tensor<" + "x".join("?" if d is None else str(d) for d in shape) + f"x{ty}>"

    clause = (f" scale {scale!r}" if scale is not None else "") + extra
    # The offset comes in as a one-element i64 tensor (as a decode step's position does).
    arg, convert, use = "", "", ""
    if offset:
        arg = ", %p: tensor<1xi64>"
        convert = ("  %c0 = arith.constant 0 : index\n"
                   "  %p0 = tensor.extract %p[%c0] : tensor<1xi64>\n"
                   "  %off = arith.index_cast %p0 : i64 to index\n")
        use = " offset %off"
    qt, kvt = tensor(q_shape), tensor(kv_shape)
    text = (f"module {{\nfunc.func @attn(%q: {qt}, %k: {kvt}, %v: {kvt}{arg}) -> {qt} {{\n"
            f"{convert}  %o = snapkv.attention %q, %k, %v{use}{clause}"
            f" outs(%q : {qt}) : {qt}, {kvt}, {kvt} -> {qt}\n"
            f"  return %o : {qt}\n}}\n}}\n")
    pipeline = runtime.PIPELINE.replace("asserts=report", f"asserts=report {tiles}")
    if key_loop:
        text = tools.opt(["--convert-snapkv-to-linalg=key-tile=8"], text=text).stdout
        assert "scf.forall" not in text
    lib = runtime.compile_library(text, label="attention", pipeline=pipeline)
    return runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "attn",
                                    runtime.signature(text, "attn"))


# (B, Hq, Hkv, D, [(Lq, Lk), ...]): with 4-row and 8-key tiles.
LENGTHS = [(1, 1), (3, 3), (4, 4), (5, 5), (8, 8), (9, 9), (17, 17), (40, 40), (1, 1 + 20),
           (1, 8), (2, 30), (12, 5), (6, 7)]


@pytest.mark.parametrize("batch,heads,kv_heads,dim", [(1, 4, 2, 16), (2, 3, 1, 8), (1, 2, 2, 4)])
def test_dynamic_lengths_match_the_reference(batch, heads, kv_heads, dim):
    fn = _function((batch, heads, None, dim), (batch, kv_heads, None, dim), "f32", None,
                   SMALL_TILES)
    rng = np.random.default_rng(batch * 100 + heads * 10 + dim)
    for lq, lk in LENGTHS:
        q = rng.standard_normal((batch, heads, lq, dim), dtype=np.float32)
        k = rng.standard_normal((batch, kv_heads, lk, dim), dtype=np.float32)
        v = rng.standard_normal((batch, kv_heads, lk, dim), dtype=np.float32)
        (out,) = fn(q, k, v)
        expected = reference.attention(q, k, v)
        assert out.shape == expected.shape
        np.testing.assert_allclose(out, expected, rtol=0, atol=2e-6,
                                   err_msg=f"Lq={lq} Lk={lk}")
        if lq > lk:   # rows that see no key are zero, not NaN
            assert not out[:, :, :lq - lk].any()


def test_static_shapes_scale_and_default_tiles():
    """A static prompt of 100 tokens with the pipeline's own tiles (32 rows, 64 keys) and an
    explicit scale; large logits (scale 2) exercise the running maximum's rescaling."""
    fn = _function((1, 6, 100, 32), (1, 2, 100, 32), "f32", 2.0, "")
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal(s, dtype=np.float32)
               for s in [(1, 6, 100, 32), (1, 2, 100, 32), (1, 2, 100, 32)])
    (out,) = fn(q, k, v)
    np.testing.assert_allclose(out, reference.attention(q, k, v, 2.0), rtol=0, atol=1e-5)


@pytest.mark.parametrize("heads,kv_heads,dim", [(6, 2, 16), (4, 4, 32), (3, 1, 64), (6, 2, 8)])
def test_a_decode_step_is_one_row_tile(heads, kv_heads, dim):
    """A static single query row (a decode step) against a dynamic cache: the tile's rows are
    the query heads of one kv head (MHA: one head), the logits dot products along D; a D that
    is not a multiple of 16 keeps the one-row tile of the general form."""
    fn = _function((1, heads, 1, dim), (1, kv_heads, None, dim), "f32", None, "")
    rng = np.random.default_rng(11)
    for lk in (1, 63, 64, 65, 200):
        q = rng.standard_normal((1, heads, 1, dim), dtype=np.float32)
        k, v = (rng.standard_normal((1, kv_heads, lk, dim), dtype=np.float32)
                for _ in range(2))
        (out,) = fn(q, k, v)
        np.testing.assert_allclose(out, reference.attention(q, k, v), rtol=0, atol=2e-6,
                                   err_msg=f"Lk={lk}")


def test_an_explicit_offset_hides_the_keys_past_it():
    """`offset` places query row 0 among the keys: a decode step's position below the cache
    length hides the keys past it, a negative one leaves rows without keys (zero); offsets
    beyond 32 bits either way mean every key or none."""
    fn = _function((1, 4, None, 8), (1, 2, None, 8), "f32", None, SMALL_TILES, offset=True)
    rng = np.random.default_rng(5)
    for lq, lk, offset in [(1, 20, 19), (1, 20, 7), (1, 20, 40), (3, 20, 2), (5, 20, -2),
                           (1, 20, -1), (12, 12, 0), (2, 20, 2**40), (2, 20, -2**40)]:
        q = rng.standard_normal((1, 4, lq, 8), dtype=np.float32)
        k, v = (rng.standard_normal((1, 2, lk, 8), dtype=np.float32) for _ in range(2))
        (out,) = fn(q, k, v, np.array([offset], dtype=np.int64))
        np.testing.assert_allclose(out, reference.attention(q, k, v, offset=offset), rtol=0,
                                   atol=2e-6, err_msg=f"Lq={lq} Lk={lk} offset={offset}")


def test_a_decode_step_with_an_offset():
    """The decode form (head rows, split keys) with an explicit offset: keys past it hidden,
    splits left without keys, a row that sees no key at all (zero)."""
    fn = _function((1, 6, 1, 32), (1, 2, None, 32), "f32", None, SMALL_TILES, offset=True)
    rng = np.random.default_rng(6)
    for lk, offset in [(20, 19), (20, 7), (20, 0), (20, 40), (20, -1), (300, 150), (300, 2**40),
                       (1, 0), (2, -2**40)]:
        q = rng.standard_normal((1, 6, 1, 32), dtype=np.float32)
        k, v = (rng.standard_normal((1, 2, lk, 32), dtype=np.float32) for _ in range(2))
        (out,) = fn(q, k, v, np.array([offset], dtype=np.int64))
        np.testing.assert_allclose(out, reference.attention(q, k, v, offset=offset), rtol=0,
                                   atol=2e-6, err_msg=f"Lk={lk} offset={offset}")


def test_f16_rounds_the_f32_result():
    fn = _function((1, 2, None, 16), (1, 1, None, 16), "f16", None, SMALL_TILES)
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float16)
               for s in [(1, 2, 19, 16), (1, 1, 19, 16), (1, 1, 19, 16)])
    (out,) = fn(q, k, v)
    assert out.dtype == np.float16
    expected = reference.attention(q, k, v, elem="f16")
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=0, atol=2e-3)


@pytest.mark.parametrize("features", ["host", "-avx512bf16"])
def test_bf16_rounds_the_probabilities_and_the_result(features):
    """bf16 operands: the logits and softmax statistics in f32, the probabilities rounded to
    bf16 for P x V (accumulated in f32), the result rounded: a prefill across tiles and a
    decode step, with the vdpbf16ps microkernel where this CPU has it and with the fallback
    (operands widened to f32)."""
    from snapkv.dtypes import bf16_to_f32, f32_to_bf16
    rng = np.random.default_rng(4)
    tiles = f"{SMALL_TILES} cpu-features={features}"
    for q_shape, kv_shape, lengths in [((1, 4, None, 32), (1, 2, None, 32), [(19, 19), (40, 40)]),
                                       ((1, 6, 1, 32), (1, 2, None, 32), [(1, 20), (1, 300)])]:
        fn = _function(q_shape, kv_shape, "bf16", None, tiles)
        for lq, lk in lengths:
            q = f32_to_bf16(rng.standard_normal((1, q_shape[1], lq, 32), dtype=np.float32))
            k, v = (f32_to_bf16(rng.standard_normal((1, 2, lk, 32), dtype=np.float32))
                    for _ in range(2))
            (out,) = fn(q, k, v)
            assert out.dtype == np.uint16
            # bf16: 8 bits of mantissa in P and in the result.
            np.testing.assert_allclose(bf16_to_f32(out), reference.attention(q, k, v, elem="bf16"),
                                       rtol=0, atol=3e-2, err_msg=f"Lq={lq} Lk={lk}")


def test_the_untiled_key_loop_form_matches_the_reference():
    """The untiled conversion (no lowering configuration: what `iree_backend` hands IREE)
    lowers the op to one loop over key tiles of linalg ops over every row: the same
    lengths, GQA groups, decode rows, offsets (rows without keys are zero) and f16."""
    rng = np.random.default_rng(21)
    fn = _function((1, 4, None, 16), (1, 2, None, 16), "f32", None, "", key_loop=True)
    for lq, lk in LENGTHS:
        q = rng.standard_normal((1, 4, lq, 16), dtype=np.float32)
        k, v = (rng.standard_normal((1, 2, lk, 16), dtype=np.float32) for _ in range(2))
        (out,) = fn(q, k, v)
        np.testing.assert_allclose(out, reference.attention(q, k, v), rtol=0, atol=2e-6,
                                   err_msg=f"Lq={lq} Lk={lk}")
    fn = _function((1, 4, None, 8), (1, 2, None, 8), "f32", 2.0, "", offset=True,
                   key_loop=True)
    for lq, lk, offset in [(1, 20, 7), (3, 20, 2), (5, 20, -2), (12, 12, 0), (2, 20, 2**40),
                           (2, 20, -2**40), (9, 30, 21)]:
        q = rng.standard_normal((1, 4, lq, 8), dtype=np.float32)
        k, v = (rng.standard_normal((1, 2, lk, 8), dtype=np.float32) for _ in range(2))
        (out,) = fn(q, k, v, np.array([offset], dtype=np.int64))
        np.testing.assert_allclose(out, reference.attention(q, k, v, 2.0, offset=offset),
                                   rtol=0, atol=2e-6, err_msg=f"Lq={lq} Lk={lk} "
                                   f"offset={offset}")
    fn = _function((1, 6, 1, 32), (1, 2, None, 32), "f32", None, "", offset=True,
                   key_loop=True)
    for lk, offset in [(20, 19), (20, 7), (300, 150), (20, -1), (1, 0)]:
        q = rng.standard_normal((1, 6, 1, 32), dtype=np.float32)
        k, v = (rng.standard_normal((1, 2, lk, 32), dtype=np.float32) for _ in range(2))
        (out,) = fn(q, k, v, np.array([offset], dtype=np.int64))
        np.testing.assert_allclose(out, reference.attention(q, k, v, offset=offset), rtol=0,
                                   atol=2e-6, err_msg=f"decode Lk={lk} offset={offset}")
    # Static lengths (the row slices are dynamic in a static buffer) and no keys at all.
    fn = _function((1, 6, 100, 32), (1, 2, 100, 32), "f32", 2.0, "", key_loop=True)
    q, k, v = (rng.standard_normal(s, dtype=np.float32)
               for s in [(1, 6, 100, 32), (1, 2, 100, 32), (1, 2, 100, 32)])
    (out,) = fn(q, k, v)
    # f32 sums of 100 large logits (scale 2): relative error of a few 1e-6.
    np.testing.assert_allclose(out, reference.attention(q, k, v, 2.0), rtol=1e-5, atol=1e-5)
    fn = _function((1, 2, 3, 8), (1, 1, 0, 8), "f32", None, "", key_loop=True)
    (out,) = fn(rng.standard_normal((1, 2, 3, 8), dtype=np.float32),
                *(np.zeros((1, 1, 0, 8), np.float32),) * 2)
    assert out.shape == (1, 2, 3, 8) and not out.any()
    fn = _function((1, 2, None, 16), (1, 1, None, 16), "f16", None, "", key_loop=True)
    q, k, v = (rng.standard_normal(s).astype(np.float16)
               for s in [(1, 2, 19, 16), (1, 1, 19, 16), (1, 1, 19, 16)])
    (out,) = fn(q, k, v)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), reference.attention(q, k, v, elem="f16"),
                               rtol=0, atol=2e-3)


def test_softcap_and_sliding_window_match_the_reference():
    """`softcap` and `sliding_window`: the CPU pipeline's tiles and the untiled conversion's
    whole decomposition. Large logits (scale 2) reach the cap; the window hides all but the
    last 5 keys up to each row's position, across key tiles and offsets."""
    rng = np.random.default_rng(41)
    for key_loop in (False, True):
        fn = _function((1, 4, None, 8), (1, 2, None, 8), "f32", 2.0,
                       "" if key_loop else SMALL_TILES, offset=True, key_loop=key_loop,
                       extra=" softcap 3.0 sliding_window 5")
        for lq, lk, offset in [(1, 20, 19), (1, 20, 7), (3, 20, 2), (12, 12, 0), (9, 30, 21),
                               (5, 20, -2), (2, 20, 2**40)]:
            q = rng.standard_normal((1, 4, lq, 8), dtype=np.float32)
            k, v = (rng.standard_normal((1, 2, lk, 8), dtype=np.float32) for _ in range(2))
            (out,) = fn(q, k, v, np.array([offset], dtype=np.int64))
            expected = reference.attention(q, k, v, 2.0, offset=offset, softcap=3.0,
                                           sliding_window=5)
            np.testing.assert_allclose(out, expected, rtol=0, atol=2e-6,
                                       err_msg=f"key_loop={key_loop} Lq={lq} Lk={lk} "
                                       f"offset={offset}")


def test_values_shorter_than_keys_are_a_reported_error():
    """Dynamic lengths the verifier cannot compare: values shorter than keys stop the call with
    a message naming them, instead of reading past the values."""
    fn = _function((1, 2, None, 8), (1, 1, None, 8), "f32", None, SMALL_TILES)
    q = np.zeros((1, 2, 4, 8), dtype=np.float32)
    k, v = np.zeros((1, 1, 12, 8), dtype=np.float32), np.zeros((1, 1, 5, 8), dtype=np.float32)
    with pytest.raises(runtime.CompiledCheckError,
                       match="length of 'values' differs from 'keys'"):
        fn(q, k, v)
