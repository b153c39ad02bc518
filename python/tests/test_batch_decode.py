"""``@decode_batch``: one compiled decode step that advances many sequences of different
lengths at once (``snapkv export --hf --batch``, ``snapkv-append-in-place layout=pool``,
:class:`snapkv.runtime.KVPool`, ``CompiledModel.decode_batch``).

Every sequence's greedy tokens are exactly those of its single-sequence run
(``CompiledModel.generate``), with the full cache, SnapKV (uniform) and ``budget=adaptive``,
while sequences join and leave the batch at different steps (a batch of one included), the
pool grows and segments run out of room. A step of k sequences calls the smallest exported
step that takes them (sizes 1, 2, 4, 8: what the engine exports for ``decode_batch=8``).
The retrieval model (2 layers), W=16, C=64.
"""

import numpy as np
import pytest
from conftest import require_aot_tools
from serving_inputs import CAPACITY, MODEL, WINDOW

from snapkv import hf
from snapkv.runtime import KVPool
from snapkv.serving.loading import decode_batch_sizes

SETTINGS = {
    "full": None,
    "snapkv": hf.Compaction(window=WINDOW, capacity=CAPACITY),
    "adaptive": hf.Compaction(window=WINDOW, capacity=CAPACITY, budget="adaptive"),
}
LENGTHS = (40, 150, 300, 97)  # below and above C
STEPS = 10


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def model(request):
    require_aot_tools()
    return hf.load(MODEL, SETTINGS[request.param],
                   options=hf.ExportOptions(batch=decode_batch_sizes(8)))


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(3)
    return [rng.integers(4, 256, n) for n in LENGTHS]


def run_batched(model, prompts, starts, steps, spare=2, rows=32):
    """Greedy tokens of every prompt, sequence i joining the batch at step ``starts[i]``
    and leaving after `steps` decode steps, all running ones advanced by one
    ``decode_batch`` call per step. Small `spare` and `rows` make segments and pools grow."""
    pool = model.pool(rows=rows)
    tokens, fed, running, step, sizes = {}, {}, [], 0, []
    while len(tokens) < len(prompts) or running:
        for i, start in enumerate(starts):
            if start == step:
                logits, caches = model.prefill(prompts[i][None])
                model.add_to_pool(pool, i, caches, spare=spare)
                tokens[i], fed[i] = [int(np.argmax(logits[0, -1]))], 0
                running.append(i)
        if running:
            sizes.append(len(running))
            logits = model.decode_batch([tokens[i][-1] for i in running],
                                        [len(prompts[i]) + fed[i] for i in running],
                                        pool, running)
            for row, i in enumerate(running):
                tokens[i].append(int(np.argmax(logits[row])))
                fed[i] += 1
            for i in [i for i in running if fed[i] == steps]:
                running.remove(i)
                pool.remove(i)
        step += 1
    assert len(pool) == 0
    return [tokens[i] for i in range(len(prompts))], sizes


def test_batched_tokens_equal_single_runs(model, prompts):
    singles = [model.generate(p[None], STEPS)["tokens"] for p in prompts]
    batched, sizes = run_batched(model, prompts, starts=(0, 2, 2, 5), steps=STEPS)
    assert batched == singles
    assert 1 in sizes and max(sizes) == 4  # a batch of one, and all four together


def test_each_step_takes_the_smallest_batch_that_fits(model, prompts, monkeypatch):
    assert model.batch_sizes == (1, 2, 4, 8) and model.batch_size == 8
    assert [model.batch_calls(k) for k in (1, 2, 3, 5, 8, 11, 17)] == \
        [[1], [2], [4], [8], [8], [8, 4], [8, 8, 1]]
    called = []  # (sequences in the step, the size of each call)
    steps = dict(model._batch_steps)
    for n, run in steps.items():
        monkeypatch.setitem(model._batch_steps, n,
                            lambda *args, n=n, run=run: called.append(n) or run(*args))
    singles = [model.generate(p[None], 4)["tokens"] for p in prompts]
    batched, sizes = run_batched(model, prompts, starts=(0, 1, 1, 2), steps=4)
    assert batched == singles
    # Sizes 1, 3, 4, 3, 1: one call each, of 1, 4, 4, 4, 1 rows (no step padded to 8).
    assert sizes == [1, 3, 4, 4, 3, 1] and called == [1, 4, 4, 4, 4, 1]


def test_export_refuses_bad_batch_sizes():
    from snapkv.frontend import hf_export

    for bad in ((), (0, 2), (2, 2000), (True,), -1):
        with pytest.raises(ValueError, match="batch must be an integer"):
            hf_export.ExportOptions(batch=bad).check()
    assert hf_export.ExportOptions(batch=(4, 1, 2)).batch_sizes == (1, 2, 4)


def test_pool_reuses_freed_rows(model, prompts):
    """A sequence that ends frees its rows: a later one of the same size fits the same pool
    without growing it."""
    pool = model.pool(rows=16)
    _, caches = model.prefill(prompts[1][None])
    model.add_to_pool(pool, "a", caches, spare=4)
    size = pool.pool_bytes
    pool.remove("a")
    model.add_to_pool(pool, "b", caches, spare=4)
    assert pool.pool_bytes == size and len(pool) == 1
    assert pool.allocated("b") >= pool.nbytes("b") > 0


def test_bad_batches_are_errors(model, prompts):
    pool = model.pool()
    _, caches = model.prefill(prompts[0][None])
    model.add_to_pool(pool, 0, caches)
    with pytest.raises(ValueError, match="already in the pool"):
        model.add_to_pool(pool, 0, caches)
    with pytest.raises(ValueError, match="one token and one position per sequence"):
        model.decode_batch([1, 2], [40], pool, [0])
    with pytest.raises(ValueError, match="twice"):
        model.decode_batch([1, 2], [40, 40], pool, [0, 0])
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 256\)"):
        model.decode_batch([999], [40], pool, [0])
    with pytest.raises(KeyError):
        model.decode_batch([1], [40], pool, ["missing"])


def test_pool_refuses_other_heads():
    pool = KVPool(layers=1, heads=2, dim=4, dtype=np.float32)
    caches = [np.zeros((1, 6, 5, 4), np.float32)] * 2  # gqa=expand: every query head
    with pytest.raises(ValueError, match="takes 2 cache heads of dim 4, the caches hold 6"):
        pool.add("s", caches)
    with pytest.raises(ValueError, match="expected 2 cache arrays, got 4"):
        pool.add("s", caches * 2)
