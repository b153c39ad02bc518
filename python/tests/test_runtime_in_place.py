"""Decode steps that write their caches in place (snapkv-append-in-place + runtime.KVCache).

* The compiled module's @decode takes buffers plus `rows` and returns logits only; generate()
  gives bit for bit the tokens, logits and caches of the functional decode (in_place=False),
  for the original and the SnapKV-rewritten module, on one function and on one function per
  layer (the glue the Python runner calls).
* No step copies a cache: the buffers stay the same arrays (same memory) across steps, and a
  KVCache made from arrays grows geometrically.
* A full buffer is a run-time check of the compiled code (an exception, not a write past the
  buffer); a buffer passed as a copy would lose the write, so it is refused.
"""

import numpy as np
import pytest
from conftest import require_aot_tools
from runtime_inputs import DYNAMIC, EXAMPLE, MODELS, layers_text, random_weights

from snapkv import runtime, tools
from snapkv.runtime import KVCache


@pytest.fixture(scope="module")
def text():
    return DYNAMIC.read_text()


@pytest.fixture(scope="module")
def compacted(text):
    return tools.opt(["--snapkv-compress-kv-cache=window=8 capacity=16 gqa=mean"],
                     text=text).stdout


@pytest.fixture(scope="module")
def ids():
    return np.array(EXAMPLE["ids"], dtype=np.int64).reshape(1, -1)


def _same(a, b):
    assert a["tokens"] == b["tokens"]
    np.testing.assert_array_equal(a["logits"].view(np.int32), b["logits"].view(np.int32))
    assert a["physical_lengths"] == b["physical_lengths"]
    assert len(a["caches"]) == len(b["caches"])
    for x, y in zip(a["caches"], b["caches"]):
        np.testing.assert_array_equal(np.asarray(x).view(np.int32), np.asarray(y).view(np.int32))


@pytest.mark.parametrize("which", ["original", "compacted"])
def test_in_place_decode_is_the_functional_decode(text, compacted, ids, which):
    require_aot_tools()
    source = text if which == "original" else compacted
    in_place = runtime.CompiledModel(source)
    functional = runtime.CompiledModel(source, in_place=False)
    assert in_place.in_place == {"buffers": [2, 3, 4, 5], "dim": 2, "rows": 6}
    assert functional.in_place is None
    assert [t.buffer for t in in_place.decode_signature.args] == [False, False] + [True] * 4 \
        + [False]
    assert len(in_place.decode_signature.results) == 1
    steps = 12
    got, want = in_place.generate(ids, steps), functional.generate(ids, steps)
    _same(got, want)
    assert isinstance(got["caches"], KVCache)
    assert got["caches"].rows == got["physical_lengths"][-1]


def test_one_function_per_layer(tmp_path):
    """The entry points only call layer functions (as `snapkv export --hf` writes them): the
    decode layer function takes the buffers, the runner passes `rows` to every call."""
    require_aot_tools()
    text = layers_text()
    rng = np.random.default_rng(0)
    kwargs = dict(weights=random_weights(text), cflags=("-O0",), cache_dir=tmp_path)
    split = runtime.CompiledModel(text, **kwargs)
    functional = runtime.CompiledModel(text, in_place=False, **kwargs)
    whole = runtime.CompiledModel(text, split_entry_points=False, **kwargs)
    assert split.split and split.in_place is not None and whole.in_place == split.in_place
    described = runtime.signatures.interface.describe(runtime.model.append_in_place(text))
    layer = described.function(split._decode.glue.callees[1])
    assert layer.attributes["snapkv.append_in_place"]["dim"] == 2
    ids = rng.integers(0, 64, (1, 12))
    got = split.generate(ids, 5)
    _same(got, functional.generate(ids, 5))
    _same(got, whole.generate(ids, 5))


def test_steps_write_the_same_buffers(text, ids):
    require_aot_tools()
    model = runtime.CompiledModel(text)
    _, caches = model.prefill(ids)
    cache = model.cache(caches, steps=4)
    pointers = [b.ctypes.data for b in cache.buffers]
    assert cache.capacity == ids.shape[1] + 4
    for g in range(4):
        logits, out = model.decode(1 + g, ids.shape[1] + g, cache)
        assert out is cache
    assert [b.ctypes.data for b in cache.buffers] == pointers
    assert cache.rows == ids.shape[1] + 4 and cache[0].shape[2] == ids.shape[1] + 4
    # Arrays in: a KVCache out, with room to spare; growing past it copies once, to 1.5x.
    _, caches = model.prefill(ids)
    logits, grown = model.decode(1, ids.shape[1], caches)
    assert isinstance(grown, KVCache) and grown.capacity == ids.shape[1] + 16
    np.testing.assert_array_equal(grown[0][:, :, :-1], caches[0])
    capacities = {grown.capacity}
    for g in range(1, 40):
        model.decode(1, ids.shape[1] + g, grown)
        capacities.add(grown.capacity)
    assert grown.rows == ids.shape[1] + 40
    assert len(capacities) <= 3  # geometric growth, not a copy per step


def test_a_full_buffer_is_a_failed_check_not_a_write_past_it(text, ids):
    require_aot_tools()
    model = runtime.CompiledModel(text)
    _, caches = model.prefill(ids)
    cache = KVCache(caches, spare=0)
    token, position = np.array([[1]], dtype=np.int64), np.array([ids.shape[1]], dtype=np.int64)
    with pytest.raises(runtime.CompiledCheckError, match="no room for the new row"):
        model._decode(token, position, *cache.buffers, cache.rows_argument())
    with pytest.raises(runtime.CompiledCheckError, match="a row count is negative"):
        model._decode(token, position, *cache.buffers,
                      np.full(len(cache.buffers), -1, dtype=np.int64))
    # A copy would take the write: buffers must be passed as they are.
    strided = np.empty(cache.buffers[0].shape[:3] + (32,), np.float32)[..., ::2]
    with pytest.raises(ValueError, match="written in place, so it must be a writable "
                                         "C-contiguous float32 array"):
        model._decode(token, position, strided, *cache.buffers[1:], cache.rows_argument())


def test_a_module_the_pass_refuses_keeps_the_functional_decode():
    """The static fixture's caches have a static length (64 rows: no room for another), so
    snapkv-append-in-place leaves @decode as it is and the runner returns new arrays."""
    require_aot_tools()
    model = runtime.CompiledModel((MODELS / "tiny_llama.mlir").read_text())
    assert model.in_place is None
    assert not any(t.buffer for t in model.decode_signature.args)
    ids = np.arange(64, dtype=np.int64).reshape(1, 64) % 200
    logits, caches = model.prefill(ids)
    assert isinstance(model.cache(caches, 4), list)
    step, grown = model.decode(int(logits[0, -1].argmax()), 64, caches)
    assert isinstance(grown, list) and grown[0].shape[2] == 65


def test_kv_cache_checks_its_input():
    ragged = KVCache([np.ones((1, 2, 3, 4), np.float32), np.ones((1, 2, 5, 4), np.float32)],
                     spare=1)
    assert ragged.rows == (3, 5) and ragged.rows_argument().tolist() == [3, 5]
    ragged.reserve(2)  # grows both buffers, each keeping its own rows
    assert ragged.capacity >= 5 and [c.shape[2] for c in ragged] == [3, 5]
    ragged.appended()
    assert ragged.rows_argument().tolist() == [4, 6] and ragged[1].shape == (1, 2, 6, 4)
    with pytest.raises(ValueError, match=r"must be \[B, H, T, D\] arrays"):
        KVCache([np.zeros((2, 3, 4), np.float32)])
    with pytest.raises(ValueError, match="spare rows must be >= 0"):
        KVCache([np.zeros((1, 2, 3, 4), np.float32)], spare=-1)
    cache = KVCache([np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)], spare=2)
    assert cache.capacity == 5 and cache.nbytes == 96 and len(cache) == 1
    np.testing.assert_array_equal(cache[0], np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4))
    assert "3 rows of 5" in repr(cache)
