"""snapkv.runtime.limits: the memory estimate read from a module's tensor types. No tools
needed."""

import pytest
from runtime_inputs import DYNAMIC

from snapkv import runtime
from snapkv.runtime import limits


def test_memory_estimate_of_the_fixture():
    """The largest tensor of prefill grows with L^2: 4 heads x L x L f32 scores."""
    terms = runtime.growth(DYNAMIC.read_text(), "prefill")
    assert runtime.largest_tensor(terms, 100_000) == (4 * 4 * 100_000 ** 2, "tensor<4x?x?xf32>")
    assert max(terms) == 2  # nothing grows faster than L^2


def test_small_tensors_are_not_checked(monkeypatch):
    """A decode step's largest tensor (a few rows) does not read the system's counters; a
    large one does, and is refused when it does not fit."""
    reads = []
    monkeypatch.setattr(limits, "available_memory", lambda: reads.append(1) or 1 << 20)
    terms = {1: (4 * 9, "tensor<1x9x?xf32>")}
    runtime.check_memory(terms, "decode", 4_000, "a cache of 4,000 rows")
    assert not reads
    with pytest.raises(runtime.ResourceLimitError, match="1x9x.xf32"):
        runtime.check_memory(terms, "decode", 10_000_000, "a cache of 10,000,000 rows")
    assert reads == [1]
