"""The ahead-of-time runner (snapkv.frontend.runner): compile a model module to a shared
library once, call @prefill/@decode through their C interfaces with ctypes.

* On the dynamic fixture it gives exactly (bit for bit) what the mlir-runner harness gives for
  prefill and one decode step, and PyTorch's recorded logits within the usual tolerance.
* generate() tracks logical and physical cache lengths separately (equal for an unmodified
  module).
* A second CompiledModel on the same text loads the cached library instead of compiling.
* Returned buffers are freed exactly once, also when one buffer is returned twice.

No torch needed. The fixture compiles in about 20 s the first time; the library is cached
(default ~/.cache/snapkv/runner, or $SNAPKV_RUNNER_CACHE), so later runs are quick.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv.frontend import harness, runner
from snapkv.mlirgen import tools

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "test" / "Models"
DYNAMIC = MODELS / "tiny_llama_dynamic.mlir"
EXAMPLE = json.loads((MODELS / "tiny_llama.json").read_text())["examples"][DYNAMIC.name]


def _tools_or_skip():
    require_aot_tools()


@pytest.fixture(scope="module")
def text():
    return DYNAMIC.read_text()


@pytest.fixture(scope="module")
def model(text):
    _tools_or_skip()
    return runner.CompiledModel(text)


@pytest.fixture(scope="module")
def example_ids():
    return np.array(EXAMPLE["ids"], dtype=np.int64).reshape(1, -1)


# --- no tools needed ------------------------------------------------------------------------

def test_signature_of_the_fixture(text):
    for name in ("prefill", "decode"):
        sig = runner.signature(text, name)
        assert ([str(t) for t in sig.args], [str(t) for t in sig.results]) == \
            harness.signature(text, name)


def test_c_interface_attribute_is_added_once():
    plain = ("func.func @decode(%a: tensor<2xf32> {llvm.noalias}) -> tensor<?xf32> {\n}\n"
             "func.func @prefill(%a: tensor<1x?xi64>) -> (tensor<1xf32>, tensor<1xi1>) "
             "attributes {foo = \"}\"} {\n}\n")
    once = runner.with_c_interface(plain)
    assert "-> tensor<?xf32> attributes {llvm.emit_c_interface} {" in once
    assert 'attributes {llvm.emit_c_interface, foo = "}"} {' in once
    assert runner.with_c_interface(once) == once
    sig = runner.signature(once, "prefill")
    assert sig.args == (runner.TensorType((1, None), "i64"),)
    assert [str(t) for t in sig.results] == ["tensor<1xf32>", "tensor<1xi1>"]
    assert runner.signature(once, "decode").results == (runner.TensorType((None,), "f32"),)


# --- compiled -------------------------------------------------------------------------------

def test_same_as_mlir_runner_harness_and_pytorch(model, text, example_ids):
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


def test_generate_on_a_compacted_module(model, text, example_ids):
    """After snapkv-compress-kv-cache the cache is shorter than the logical length and has
    as many heads as the rewritten signature says."""
    import subprocess

    opt = str(tools()[0])
    capacity, steps, length = 16, 3, example_ids.shape[1]
    done = subprocess.run([opt, f"--snapkv-compress-kv-cache=window=8 capacity={capacity} "
                                "gqa=expand", str(DYNAMIC)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    compact = runner.CompiledModel(done.stdout)
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
    before = model.library.path.stat().st_mtime_ns
    again = runner.CompiledModel(text)
    assert again.from_cache
    assert again.library.path == model.library.path
    assert again.library.path.stat().st_mtime_ns == before


def test_shapes_and_ids_are_checked(model, example_ids):
    _, caches = model.prefill(example_ids[:, :4])
    with pytest.raises(ValueError, match="does not fit"):
        model.decode(1, 4, [c[:, :1] for c in caches])  # 1 head where the module wants 2
    with pytest.raises(ValueError, match="token ids"):
        model.decode(model.vocab_size, 4, caches)  # would abort in the embedding's cf.assert


OWNERSHIP = """
func.func @f(%a: tensor<?xf32>) -> (tensor<?xf32>, tensor<4xf32>, tensor<?xf32>, tensor<?xf32>) {
  %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xf32>
  %e = tensor.empty(%n) : tensor<?xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%a : tensor<?xf32>)
                       outs(%e : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<?xf32>
  return %a, %c, %s, %s : tensor<?xf32>, tensor<4xf32>, tensor<?xf32>, tensor<?xf32>
}
"""


def test_returned_argument_constant_and_duplicate_are_freed_safely(tmp_path, monkeypatch):
    """An argument and a constant come back as clones (caller-owned); a value returned twice
    is one allocation, freed once (a double free would abort the test process)."""
    _tools_or_skip()
    import ctypes

    lib = runner.compile_library(OWNERSHIP, ("f",), cache_dir=tmp_path)
    fn = runner.CompiledFunction(ctypes.CDLL(str(lib.path)), "f", runner.signature(OWNERSHIP, "f"))
    freed = []

    def free(pointer):
        if pointer not in freed:  # a double free fails the asserts below instead of aborting
            real_free(pointer)
        freed.append(pointer)

    real_free = runner._FREE
    monkeypatch.setattr(runner, "_FREE", free)
    a = np.arange(5, dtype=np.float32)
    original = a.copy()
    span = range(a.ctypes.data, a.ctypes.data + a.nbytes)
    for _ in range(3):
        freed.clear()
        same, const, twice, again = fn(a)
        np.testing.assert_array_equal(same, a)
        np.testing.assert_array_equal(const, [1, 2, 3, 4])
        np.testing.assert_array_equal(twice, 2 * a)
        np.testing.assert_array_equal(again, 2 * a)
        assert not any(np.shares_memory(r, a) for r in (same, const, twice, again))
        # Three allocations (the clone of %a, the clone of the constant, %s returned twice),
        # each freed once; never the input's own memory.
        assert len(freed) == len(set(freed)) == 3, freed
        assert not any(pointer in span for pointer in freed)
    np.testing.assert_array_equal(a, original)  # the input was not written
    freed.clear()
    assert len(fn.time_call(a, repeat=2)) == 2
    assert len(freed) == 6 and not any(pointer in span for pointer in freed)
    np.testing.assert_array_equal(a, original)
