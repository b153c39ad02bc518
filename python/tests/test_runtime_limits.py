"""snapkv.runtime.limits: the memory estimate read from a module's tensor types. No tools
needed."""

from runtime_inputs import DYNAMIC

from snapkv import runtime


def test_memory_estimate_of_the_fixture():
    """The largest tensor of prefill grows with L^2: 4 heads x L x L f32 scores."""
    terms = runtime.growth(DYNAMIC.read_text(), "prefill")
    assert runtime.largest_tensor(terms, 100_000) == (4 * 4 * 100_000 ** 2, "tensor<4x?x?xf32>")
    assert max(terms) == 2  # nothing grows faster than L^2
