"""benchmarks/eval/chunk_attribution.py's staging (docs/eval.md, "Why the staged runs lost the
key"): without rows it must keep, it stages exactly what the reference select keeps; with them
it keeps them, the window and M rows in all; and bad method names are clear errors."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from snapkv import reference

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "eval" / "chunk_attribution.py"


@pytest.fixture(scope="module")
def attribution():
    spec = importlib.util.spec_from_file_location("chunk_attribution", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["chunk_attribution"] = module
    spec.loader.exec_module(module)
    return module


def test_staged_rows_are_the_reference_select(attribution):
    rng = np.random.default_rng(0)
    window, length, capacity = attribution.WINDOW, 200, 96
    q = rng.standard_normal((1, 4, window, 16)).astype(np.float32)
    k = rng.standard_normal((1, 2, length, 16)).astype(np.float32)
    sel = reference.select(q, k, k, window, capacity, attribution.KERNEL, "avg", "mean")
    for head in range(2):
        none = np.zeros(length, dtype=bool)
        rows = attribution.staged_rows(sel.pooled[0, head], none, length, capacity)
        assert np.array_equal(rows, sel.indices[0, head])
        must = none.copy()
        must[:10] = True  # the first rows, however they rank
        must[150] = True
        rows = attribution.staged_rows(sel.pooled[0, head], must, length, capacity)
        assert rows.size == capacity and np.all(np.diff(rows) > 0)
        assert set(range(10)) | {150} | set(range(length - window, length)) <= set(rows)


def test_bad_methods_are_clear_errors(attribution):
    assert attribution.parse("keydiff+oracle+forced+sinks32+block32") == dict(
        score="keydiff", oracle=True, forced=True, sinks=32, tail=0, layers=None, step=None,
        block=32)
    with pytest.raises(SystemExit, match="forced needs oracle"):
        attribution.parse("sum+forced")
    with pytest.raises(SystemExit, match="unknown staging score 'votes'"):
        attribution.parse("votes")
    with pytest.raises(SystemExit, match="unknown flag 'sink'"):
        attribution.parse("sum+sink")
