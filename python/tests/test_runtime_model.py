"""snapkv.runtime.model: compile a model module to a shared library once, call
@prefill/@decode through their C interfaces with ctypes.

* On the dynamic fixture it gives exactly (bit for bit) what the harness (one plain call per
  function) gives for prefill and one decode step, and PyTorch's recorded logits within the
  usual tolerance.
* generate() tracks logical and physical cache lengths separately (equal for an unmodified
  module).
* A second CompiledModel on the same text loads the cached library instead of compiling.
* Failed run-time checks, shapes, token ids, positions and memory raise, before or instead
  of ending the process.

No torch needed. The fixture compiles in about 20 s the first time; the library is cached
(default ~/.cache/snapkv/runner, or $SNAPKV_RUNNER_CACHE), so later runs are quick.
"""

import numpy as np
import pytest
from conftest import require_aot_tools
from runtime_inputs import DYNAMIC, EXAMPLE, REPO

from snapkv import runtime
from snapkv.frontend import harness
from snapkv.mlirgen import tools


@pytest.fixture(scope="module")
def text():
    return DYNAMIC.read_text()


@pytest.fixture(scope="module")
def model(text):
    require_aot_tools()
    return runtime.CompiledModel(text)


@pytest.fixture(scope="module")
def example_ids():
    return np.array(EXAMPLE["ids"], dtype=np.int64).reshape(1, -1)


def test_same_as_harness_and_pytorch(model, text, example_ids):
    token, position = EXAMPLE["token"], EXAMPLE["position"]
    logits, caches = model.prefill(example_ids)
    step_logits, step_caches = model.decode(token, position, caches)
    ours = [logits, *caches, step_logits, *step_caches]
    theirs = harness.run_prefill_decode(text, example_ids, token, position)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape, i
        assert a.dtype == np.float32, i
        np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32), err_msg=f"result {i}")
    np.testing.assert_allclose(logits[0, -1], EXAMPLE["prefill_last_logits"], atol=2e-4, rtol=0)
    np.testing.assert_allclose(step_logits[0, 0], EXAMPLE["decode_logits"], atol=2e-4, rtol=0)
    assert int(step_logits[0, 0].argmax()) == EXAMPLE["decode_argmax"]


def test_generate_tracks_logical_and_physical_lengths(model, example_ids):
    steps, length = 5, example_ids.shape[1]
    out = model.generate(example_ids, steps)
    assert len(out["tokens"]) == steps + 1
    assert out["logits"].shape == (steps + 1, model.vocab_size)
    assert out["tokens"] == [int(row.argmax()) for row in out["logits"]]
    assert out["positions"] == [length + g for g in range(steps)]
    assert out["logical_lengths"] == [length + g for g in range(steps + 1)]
    # Unmodified module: the cache holds every token, so physical == logical.
    assert out["physical_lengths"] == out["logical_lengths"]
    assert out["cache_shapes"] == (1, 2, length + steps, 16)
    # The same thing by hand: row 0 is prefill's last row, row 1 the first decode step's.
    logits, caches = model.prefill(example_ids)
    np.testing.assert_array_equal(out["logits"][0], logits[0, -1])
    first, after = model.decode(out["tokens"][0], length, caches)
    np.testing.assert_array_equal(out["logits"][1], first[0, 0])
    for before, now in zip(caches, after):  # appended, never rewritten
        np.testing.assert_array_equal(now[:, :, :length], before)
    for final, now in zip(out["caches"], after):
        np.testing.assert_array_equal(final[:, :, :length + 1], now)


def _compacted(window=8, capacity=16):
    done = __import__("subprocess").run(
        [str(tools()[0]), f"--snapkv-compress-kv-cache=window={window} capacity={capacity} "
                          "gqa=expand", str(DYNAMIC)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_generate_on_a_compacted_module(model, text, example_ids):
    """After snapkv-compress-kv-cache the cache is shorter than the logical length and has
    as many heads as the rewritten signature says."""
    capacity, steps, length = 16, 3, example_ids.shape[1]
    compact = runtime.CompiledModel(_compacted(capacity=capacity))
    heads = compact.cache_types[0].shape[1]
    assert heads == 4  # gqa=expand: Hq heads
    out = compact.generate(example_ids, steps)
    assert out["logical_lengths"] == [length + g for g in range(steps + 1)]
    assert out["physical_lengths"] == [capacity + g for g in range(steps + 1)]
    assert out["positions"] == [length + g for g in range(steps)]
    assert out["cache_shapes"] == (1, heads, capacity + steps, 16)
    # Prefill's logits are not touched by the rewrite (only what is cached shrinks).
    np.testing.assert_array_equal(out["logits"][0], model.generate(example_ids, 0)["logits"][0])


def test_second_model_on_the_same_text_uses_the_cache(model, text, monkeypatch):
    """No tool runs and the library is not rewritten (any compile step would fail here)."""
    import subprocess

    def no_tools(*args, **kwargs):
        raise AssertionError(f"a cached model ran {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "run", no_tools)
    monkeypatch.setattr(subprocess, "Popen", no_tools)
    # The cache touches a hit's mtime (LRU eviction), so "not rewritten" is the
    # same file (inode) with the same bytes.
    path = model.library.path
    before = (path.stat().st_ino, path.read_bytes())
    again = runtime.CompiledModel(text)
    assert again.from_cache
    assert again.library.path == model.library.path
    assert (path.stat().st_ino, path.read_bytes()) == before


# Prints the minor page faults of a second 1,024-token prefill (a fresh process: what glibc
# does with a freed block depends on what the process freed before).
SECOND_PREFILL_FAULTS = """
import resource, sys
import numpy as np
from snapkv import runtime
model = runtime.CompiledModel(open(sys.argv[1]).read())
ids = np.random.default_rng(0).integers(0, 256, size=(1, 1024), dtype=np.int64)
model.prefill(ids)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
model.prefill(ids)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, model.heap.cache_limit,
      model.heap.cached, model.last_prefill["kept_heap_bytes"], model.heap.live)
"""


def test_a_second_prefill_reuses_the_heap_instead_of_faulting_pages_in(model):
    """The library keeps the large blocks it frees (heap.c): a second prefill takes them
    back instead of mapping fresh pages that the kernel faults in and zeroes (glibc gives
    blocks above its mmap threshold back to the kernel at free). Measured: about 2,000
    minor faults with the cache off ($SNAPKV_HEAP_CACHE_MB=0), 0-1 with it on."""
    import os
    import subprocess
    import sys

    def second_call(megabytes):
        env = dict(os.environ, SNAPKV_HEAP_CACHE_MB=megabytes,
                   SNAPKV_RUNNER_CACHE=str(model.library.path.parent),
                   PYTHONPATH=os.pathsep.join([str(REPO / "python"),
                                               os.environ.get("PYTHONPATH", "")]))
        out = subprocess.run([sys.executable, "-c", SECOND_PREFILL_FAULTS, str(DYNAMIC)],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return [int(v) for v in out.stdout.split()]

    uncached, limit, kept, reported, live = second_call("0")
    assert limit == kept == reported == live == 0
    cached, limit, kept, reported, live = second_call("1024")
    assert limit == 1 << 30 and kept == reported > 0 and live == 0
    assert uncached > 500 and cached < 100, (uncached, cached)


def test_shapes_and_ids_are_checked(model, example_ids):
    _, caches = model.prefill(example_ids[:, :4])
    with pytest.raises(ValueError, match="does not fit"):
        model.decode(1, 4, [c[:, :1] for c in caches])  # 1 head where the module wants 2
    with pytest.raises(ValueError, match="token ids"):
        model.decode(model.vocab_size, 4, caches)  # would abort in the embedding's cf.assert


def test_a_failed_check_raises_instead_of_killing_the_process(example_ids):
    """A 4-token prompt is shorter than the SnapKV window: the compiled prefill's run-time
    check reports to the caller (no abort), and the library keeps working afterwards."""
    require_aot_tools()
    compact = runtime.CompiledModel(_compacted())
    with pytest.raises(runtime.CompiledCheckError) as caught:
        compact.generate(example_ids[:, :4], 2)
    assert str(caught.value) == ("@prefill stopped on a failed run-time check: snapkv: the "
                                 "prompt is shorter than the observation window")
    assert caught.value.function == "prefill"
    out = compact.generate(example_ids, 2)  # the next call starts with a clear error slot
    assert out["physical_lengths"] == [16, 17, 18]


def test_positions_and_memory_are_checked_before_the_call(text):
    require_aot_tools()
    model = runtime.CompiledModel.from_file(DYNAMIC)
    assert model.max_positions == 4096
    ids = np.zeros((1, 4090), dtype=np.int64)
    with pytest.raises(runtime.ResourceLimitError,
                       match=r"a 4,090-token prompt and 16 decode steps reach position 4,105, "
                             r"past the model's max_position_embeddings \(4,096"):
        model.generate(ids, 16)
    # No max_positions: memory still counts. As imported, attention holds [4, L, L] scores.
    unlimited = runtime.CompiledModel(text, in_place=False)
    with pytest.raises(runtime.ResourceLimitError,
                       match=r"@prefill on a 1,000,000-token prompt needs at least 16,000.0 GB "
                             r"for one tensor<4x\?x\?xf32> alone"):
        unlimited.check_limits(1_000_000)
    # Fused first (in_place=True runs snapkv-fuse-attention): memory linear in L.
    fused = runtime.CompiledModel(text)
    fused.check_limits(1_000_000)
    with pytest.raises(runtime.ResourceLimitError,
                       match=r"@prefill on a 1,000,000,000-token prompt needs at least "
                             r"1,024.0 GB for one tensor<\?x256xf32> alone"):
        fused.check_limits(1_000_000_000)
