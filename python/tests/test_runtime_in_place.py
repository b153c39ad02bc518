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
from snapkv.runtime import KVCache, RaggedKVCache


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
    decode layer function takes the buffers, the compiled @decode passes each its `rows`."""
    require_aot_tools()
    text = layers_text()
    rng = np.random.default_rng(0)
    kwargs = dict(weights=random_weights(text), cflags=("-O0",), cache_dir=tmp_path)
    split = runtime.CompiledModel(text, **kwargs)
    functional = runtime.CompiledModel(text, in_place=False, **kwargs)
    whole = runtime.CompiledModel(text, split_entry_points=False, **kwargs)
    assert split.split and split.in_place is not None and whole.in_place == split.in_place
    in_place = runtime.model.append_in_place(text)
    described = runtime.signatures.interface.describe(in_place)
    layer = described.function(runtime.glue_function(in_place, "decode").callees[1])
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
    # The buffers' descriptors are made once, not per step; a buffer that became read-only
    # is refused all the same.
    args = [np.array([[1]]), np.array([0]), *cache.buffers, cache.rows_argument()]
    first, again = model._decode._prepare(args)[1], model._decode._prepare(args)[1]
    assert first[2] is again[2] and first[0] is not again[0]
    cache.buffers[0].flags.writeable = False
    with pytest.raises(ValueError, match="written in place"):
        model._decode._prepare(args)
    cache.buffers[0].flags.writeable = True
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


# --- ragged caches (budget=adaptive) ---------------------------------------------------------

ADAPTIVE = "--snapkv-compress-kv-cache=window=8 capacity=12 gqa=mean budget=adaptive"


@pytest.fixture(scope="module")
def adaptive(text):
    return tools.opt([ADAPTIVE], text=text).stdout


def test_ragged_decode_writes_its_buffers_in_place(adaptive, ids):
    """budget=adaptive: @decode takes each layer's packed buffers and rows [P, 2, B, Hc];
    every step writes the same buffers (no copy), each head one row more; a decode given
    prefill's arrays lays them out with room; growing past the room lays a layer out again,
    keeping every head's rows."""
    require_aot_tools()
    model = runtime.CompiledModel(adaptive)
    assert model.in_place == {"buffers": [2, 3, 4, 5], "dim": 1, "layout": "ragged",
                              "rows": 6}
    assert model.decode_signature.args[6].shape == (2, 2, 1, 2)
    _, results = model.prefill(ids)
    cache = model.cache(results, steps=3)
    assert isinstance(cache, RaggedKVCache)
    before = [[h.copy() for h in cache.heads(i)] for i in range(len(cache))]
    pointers = [b.ctypes.data for b in cache.buffers]
    for g in range(3):
        _, out = model.decode(1 + g, ids.shape[1] + g, cache)
        assert out is cache
    assert [b.ctypes.data for b in cache.buffers] == pointers
    for i, heads in enumerate(before):
        for old, new in zip(heads, cache.heads(i)):
            assert new.shape[0] == old.shape[0] + 3
            np.testing.assert_array_equal(new[:old.shape[0]], old)
    # Past the room: the next step's reserve lays the layer out again, rows kept.
    kept = [[h.copy() for h in cache.heads(i)] for i in range(len(cache))]
    _, out = model.decode(9, ids.shape[1] + 3, cache)
    assert [b.ctypes.data for b in cache.buffers] != pointers
    for i, heads in enumerate(kept):
        for old, new in zip(heads, cache.heads(i)):
            np.testing.assert_array_equal(new[:-1], old)
    # Arrays in: a RaggedKVCache out; the same step as on the laid-out cache.
    _, results = model.prefill(ids)
    logits_a, grown = model.decode(1, ids.shape[1], results)
    logits_b, _ = model.decode(1, ids.shape[1], model.cache(model.prefill(ids)[1], 0))
    assert isinstance(grown, RaggedKVCache)
    np.testing.assert_array_equal(logits_a.view(np.int32), logits_b.view(np.int32))


def test_a_ragged_head_without_room_is_a_failed_check(adaptive, ids):
    require_aot_tools()
    model = runtime.CompiledModel(adaptive)
    _, results = model.prefill(ids)
    cache = RaggedKVCache([results[i:i + 3] for i in range(0, len(results), 3)], spare=0)
    token, position = np.array([[1]], dtype=np.int64), np.array([ids.shape[1]], dtype=np.int64)
    with pytest.raises(runtime.CompiledCheckError, match="a head has no room for the new row"):
        model._decode(token, position, *cache.buffers, cache.rows_argument())
    rows = cache.rows_argument()
    rows[0, 1, 0, 0] = -1
    with pytest.raises(runtime.CompiledCheckError, match="start or length is negative"):
        model._decode(token, position, *cache.buffers, rows)


def test_ragged_one_function_per_layer(tmp_path):
    """budget=adaptive on a model exported with one function per layer: the runner's glue
    (prefill's offsets results, a [1, 2, B, Hc] slice of rows per call) gives the whole
    module's tokens, logits and caches bit for bit."""
    require_aot_tools()
    text = tools.opt(["--snapkv-compress-kv-cache=window=2 capacity=4 budget=adaptive "
                      "prefill-func=prefill_layer decode-func=decode_layer"],
                     text=layers_text()).stdout
    kwargs = dict(weights=random_weights(text), cflags=("-O0",), cache_dir=tmp_path)
    split = runtime.CompiledModel(text, **kwargs)
    whole = runtime.CompiledModel(text, split_entry_points=False, **kwargs)
    assert split.split and split.ragged and whole.ragged
    ids = np.random.default_rng(0).integers(0, 64, (1, 12))
    got, want = split.generate(ids, 5), whole.generate(ids, 5)
    assert got["tokens"] == want["tokens"]
    np.testing.assert_array_equal(got["logits"].view(np.int32), want["logits"].view(np.int32))
    for i in range(len(got["caches"])):
        for x, y in zip(got["caches"].heads(i), want["caches"].heads(i)):
            np.testing.assert_array_equal(x, y)


def test_ragged_kv_cache_checks_and_lays_out():
    keys = np.arange(2 * 5 * 2, dtype=np.float32).reshape(2, 5, 2)
    offsets = np.array([[0, 2, 5], [0, 4, 5]])
    cache = RaggedKVCache([(keys, -keys, offsets)], spare=1)
    # Heads laid out with one spare row each; batch rows share the longest length.
    assert cache.starts.tolist() == [[[0, 3], [0, 5]]]
    assert cache.rows_argument().tolist() == [[[[0, 3], [0, 5]], [[2, 3], [4, 1]]]]
    assert cache.buffers[0].shape == (2, 7, 2)
    np.testing.assert_array_equal(cache[0], keys)
    np.testing.assert_array_equal(cache[1], -keys)
    assert cache.nbytes == 2 * 10 * 2 * 4 and cache.rows == 5
    assert cache.allocated == 2 * (2 * 7 * 2 * 4)  # the room after each head included
    cache.reserve(3)  # too little room: laid out again, rows kept
    assert np.all(np.diff(cache.starts[0], axis=1) >= cache.lengths[0][:, :-1] + 3)
    np.testing.assert_array_equal(cache[0], keys)
    cache.appended()
    assert cache.lengths.tolist() == [[[3, 4], [5, 2]]]
    assert [h.shape[0] for h in cache.heads(0)] == [3, 4]
    with pytest.raises(ValueError, match="ascending offsets"):
        RaggedKVCache([(keys, keys, np.array([[0, 3, 2], [0, 1, 5]]))])
    with pytest.raises(ValueError, match="spare rows must be >= 0"):
        RaggedKVCache([(keys, keys, offsets)], spare=-1)
