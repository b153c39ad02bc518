"""snapkv.runtime.glue: entry points that only call layer functions run from Python, with
the same results as the module compiled whole."""

import ctypes

import numpy as np
import pytest
from conftest import require_aot_tools
from runtime_inputs import layers_text, random_weights

from snapkv import runtime


def test_entry_points_that_only_call_run_from_python(tmp_path):
    """A module whose @prefill/@decode only call layer functions (as `snapkv export --hf`
    writes it): the runner compiles the callees alone (one copy of the layer code, no
    @prefill in the library) and makes prefill's calls itself; @decode, called once per
    token, stays compiled (one call per step, not one per layer). The same results, bit for
    bit, as the module compiled whole (test_runtime_signatures.py: which entry points are
    glue)."""
    require_aot_tools()
    text = layers_text()
    rng = np.random.default_rng(0)
    weights = random_weights(text)
    split = runtime.CompiledModel(text, weights=weights, cflags=("-O0",), cache_dir=tmp_path)
    whole = runtime.CompiledModel(text, weights=weights, cflags=("-O0",), cache_dir=tmp_path,
                                  split_entry_points=False)
    assert split.split and not whole.split
    symbols = ctypes.CDLL(str(split.library.path))
    assert hasattr(symbols, "_mlir_ciface_prefill_layer")
    assert not hasattr(symbols, "_mlir_ciface_prefill")
    assert hasattr(symbols, "_mlir_ciface_decode")
    assert isinstance(split._prefill, runtime.GlueRunner)
    assert isinstance(split._decode, runtime.CompiledFunction)
    assert hasattr(ctypes.CDLL(str(whole.library.path)), "_mlir_ciface_prefill")
    assert split.library.stats["clang"]["bytes"] > 0  # compiled here: per-step statistics

    ids = rng.integers(0, 64, (1, 12))
    mine, theirs = split.generate(ids, 3), whole.generate(ids, 3)
    assert mine["tokens"] == theirs["tokens"]
    assert np.array_equal(mine["logits"], theirs["logits"])
    for a, b in zip(mine["caches"], theirs["caches"]):
        assert np.array_equal(a, b)
    with pytest.raises(ValueError, match=r"@prefill takes 1 arguments \(and 21 bound"):
        split._prefill(ids, ids)
