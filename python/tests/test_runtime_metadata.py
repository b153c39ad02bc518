"""snapkv.runtime.metadata: what the JSON next to an exported module says. No tools needed."""

from runtime_inputs import DYNAMIC, MODELS, REPO

from snapkv import runtime


def test_max_positions_come_from_the_json_next_to_the_model():
    assert runtime.max_positions_of(DYNAMIC) == (4096, MODELS / "tiny_llama.json")
    assert runtime.max_positions_of(REPO / "examples" / "select.mlir") is None
