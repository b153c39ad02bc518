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
import os
import shutil
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


def test_signatures_with_attributes():
    text = ("func.func @decode(%a: tensor<2xf32> {llvm.noalias}) -> tensor<?xf32> {\n}\n"
            "func.func @prefill(%a: tensor<1x?xi64>) -> (tensor<1xf32>, tensor<1xi1>) "
            "attributes {foo = \"}\"} {\n}\n")
    sig = runner.signature(text, "prefill")
    assert sig.args == (runner.TensorType((1, None), "i64"),)
    assert [str(t) for t in sig.results] == ["tensor<1xf32>", "tensor<1xi1>"]
    assert runner.signature(text, "decode").results == (runner.TensorType((None,), "f32"),)


def test_bracket_matching_skips_strings_and_arrows():
    """Brackets inside string literals (escaped quotes too) and the `->` of a function type
    do not count; an unbalanced bracket is an error, not a wrong offset."""
    text = 'f(a<"x>)\\"(", (i32) -> i32>, {b = "}"}) tail'
    assert runner._close(text, 1) == text.index(") tail")
    assert runner._close(text, 3) == text.index(">, {b")
    with pytest.raises(ValueError, match="unbalanced"):
        runner._close("f(a<b", 1)


def test_memory_estimate_of_the_fixture(text):
    """The largest tensor of prefill grows with L^2: 4 heads x L x L f32 scores."""
    terms = runner.growth(text, "prefill")
    assert runner.largest_tensor(terms, 100_000) == (4 * 4 * 100_000 ** 2, "tensor<4x?x?xf32>")
    assert max(terms) == 2  # nothing grows faster than L^2


def test_max_positions_come_from_the_json_next_to_the_model():
    assert runner.max_positions_of(DYNAMIC) == (4096, MODELS / "tiny_llama.json")
    assert runner.max_positions_of(REPO / "examples" / "select.mlir") is None


def test_lru_eviction(tmp_path):
    """Oldest first until the libraries fit; the one just built stays; index files of deleted
    libraries go too."""
    sizes = {"a": 400, "b": 300, "c": 200, "d": 100}
    for age, (name, size) in enumerate(sizes.items()):
        (tmp_path / f"{name}.so").write_bytes(b"x" * size)
        (tmp_path / f"{name}.json").write_text("{}")
        (tmp_path / f"key-{name}.key").write_text(f"{name}.so")
        os.utime(tmp_path / f"{name}.so", (1000 + age, 1000 + age))  # a is the oldest
    deleted = runner.evict(tmp_path, 500, keep=[tmp_path / "a.so"])
    assert sorted(p.name for p in tmp_path.glob("*.so")) == ["a.so", "d.so"]
    assert {p.name for p in deleted} == {"b.so", "b.json", "c.so", "c.json", "key-b.key",
                                         "key-c.key"}
    assert sorted(p.name for p in tmp_path.glob("*.key")) == ["key-a.key", "key-d.key"]


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
    # The cache touches a hit's mtime (LRU eviction), so "not rewritten" is the
    # same file (inode) with the same bytes.
    path = model.library.path
    before = (path.stat().st_ino, path.read_bytes())
    again = runner.CompiledModel(text)
    assert again.from_cache
    assert again.library.path == model.library.path
    assert (path.stat().st_ino, path.read_bytes()) == before


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

    lib = runner.compile_library(OWNERSHIP, cache_dir=tmp_path)
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


def _compacted(window=8, capacity=16):
    done = __import__("subprocess").run(
        [str(tools()[0]), f"--snapkv-compress-kv-cache=window={window} capacity={capacity} "
                          "gqa=expand", str(DYNAMIC)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_failed_check_raises_instead_of_killing_the_process(example_ids):
    """A 4-token prompt is shorter than the SnapKV window: the compiled prefill's run-time
    check reports to the caller (no abort), and the library keeps working afterwards."""
    _tools_or_skip()
    compact = runner.CompiledModel(_compacted())
    with pytest.raises(runner.CompiledCheckError) as caught:
        compact.generate(example_ids[:, :4], 2)
    assert str(caught.value) == ("@prefill stopped on a failed run-time check: snapkv: the "
                                 "prompt is shorter than the observation window")
    assert caught.value.function == "prefill"
    out = compact.generate(example_ids, 2)  # the next call starts with a clear error slot
    assert out["physical_lengths"] == [16, 17, 18]


def test_positions_and_memory_are_checked_before_the_call(text):
    _tools_or_skip()
    model = runner.CompiledModel.from_file(DYNAMIC)
    assert model.max_positions == 4096
    ids = np.zeros((1, 4090), dtype=np.int64)
    with pytest.raises(runner.ResourceLimitError,
                       match=r"a 4,090-token prompt and 16 decode steps reach position 4,105, "
                             r"past the model's max_position_embeddings \(4,096"):
        model.generate(ids, 16)
    unlimited = runner.CompiledModel(text)  # no max_positions: memory still counts
    with pytest.raises(runner.ResourceLimitError,
                       match=r"@prefill on a 1,000,000-token prompt needs at least 16,000.0 GB "
                             r"for one tensor<4x\?x\?xf32> alone"):
        unlimited.check_limits(1_000_000)


ALLOC = """
func.func @f(%n: tensor<1xi64>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %v = tensor.extract %n[%c0] : tensor<1xi64>
  %size = arith.index_cast %v : i64 to index
  %e = tensor.empty(%size) : tensor<?xf32>
  %one = arith.constant 1.0 : f32
  %f = linalg.fill ins(%one : f32) outs(%e : tensor<?xf32>) -> tensor<?xf32>
  return %f : tensor<?xf32>
}
"""


def test_a_failed_allocation_raises(tmp_path):
    """malloc returning NULL is a failed check too (it used to be a write through NULL)."""
    _tools_or_skip()
    import ctypes

    lib = runner.compile_library(ALLOC, cache_dir=tmp_path)
    fn = runner.CompiledFunction(ctypes.CDLL(str(lib.path)), "f", runner.signature(ALLOC, "f"))
    with pytest.raises(runner.CompiledCheckError,
                       match=r"@f stopped on a failed run-time check: out of memory: @f could "
                             r"not allocate a memref<\?xf32>"):
        fn(np.array([2 ** 60], dtype=np.int64))
    (out,) = fn(np.array([3], dtype=np.int64))
    np.testing.assert_array_equal(out, [1, 1, 1])


def test_the_pipeline_is_the_callers_and_part_of_the_cache_key(tmp_path):
    """compile_library(pipeline=...) runs that pipeline (a bad option fails in snapkv-opt)
    and caches its result apart from the default pipeline's."""
    _tools_or_skip()
    recompute = runner.PIPELINE.replace("asserts=report", "asserts=report keep-logits=false")
    assert recompute != runner.PIPELINE
    runner.compile_library(ALLOC, cache_dir=tmp_path)
    runner.compile_library(ALLOC, cache_dir=tmp_path, pipeline=recompute)
    assert len(list(tmp_path.rglob("*.key"))) == 2
    bad = runner.PIPELINE.replace("asserts=report", "asserts=report no-such-option=1")
    with pytest.raises(runner.ToolError, match="no-such-option"):
        runner.compile_library(ALLOC, cache_dir=tmp_path, pipeline=bad)


def test_a_module_split_for_parallel_clang_behaves_the_same(tmp_path, monkeypatch):
    """A large module is split (snapkv-translate --parts) and compiled on several cores: the
    parts link into one library whose functions and run-time checks (the error slot) work
    as before."""
    _tools_or_skip()
    import ctypes

    monkeypatch.setattr(runner, "SPLIT_BYTECODE_BYTES", 0)
    monkeypatch.setattr(runner, "_cores", lambda: 2)
    lib = runner.compile_library(ALLOC, cache_dir=tmp_path)
    assert lib.stats["clang"]["parts"] == 2
    fn = runner.CompiledFunction(ctypes.CDLL(str(lib.path)), "f", runner.signature(ALLOC, "f"))
    with pytest.raises(runner.CompiledCheckError, match="out of memory: @f could not allocate"):
        fn(np.array([2 ** 60], dtype=np.int64))
    (out,) = fn(np.array([3], dtype=np.int64))
    np.testing.assert_array_equal(out, [1, 1, 1])


def test_cache_key_is_what_is_compiled_not_when_snapkv_opt_was_built(tmp_path, monkeypatch):
    """A copy of snapkv-opt (new path and mtime, same bytes) finds the library through the
    index; a different snapkv-opt binary that lowers to the same LLVM IR reuses the library
    without running clang."""
    _tools_or_skip()
    cache = tmp_path / "cache"
    first = runner.compile_library(OWNERSHIP, cache_dir=cache)
    assert not first.from_cache
    copy = tmp_path / "snapkv-opt"
    shutil.copy2(tools()[0], copy)
    os.utime(copy, (1, 1))
    monkeypatch.setenv("SNAPKV_OPT", str(copy))
    again = runner.compile_library(OWNERSHIP, cache_dir=cache)
    assert again.from_cache and again.path == first.path
    with open(copy, "ab") as handle:
        handle.write(b"\0")  # other bytes, same behaviour
    os.utime(copy, (2, 2))
    rebuilt = runner.compile_library(OWNERSHIP, cache_dir=cache, verbose=True)
    assert rebuilt.from_cache and rebuilt.path == first.path
    assert len(list(cache.glob("*.key"))) == 2 and len(list(cache.glob("*.so"))) == 1


LAYERS = REPO / "test" / "Transforms" / "Inputs" / "models" / "llama_layers.mlir"


def test_entry_points_that_only_call_run_from_python(tmp_path):
    """A module whose @prefill/@decode only call layer functions (as `snapkv export --hf`
    writes it): the runner compiles the callees alone (one copy of the layer code, no
    @prefill/@decode in the library) and makes the calls itself, with the same results, bit
    for bit, as the module compiled whole; entry points that do anything else compile whole."""
    _tools_or_skip()
    # The fixture leaves out the importer's resource blob (RoPE's inverse frequencies).
    text = LAYERS.read_text().replace("dense_resource<torch_tensor_64_torch.float32>",
                                      "dense<0.125>")
    glue = runner.glue_function(text, "prefill")
    assert glue.callees == ["embed", "prefill_layer", "head"]
    assert [op[0] for op in glue.ops] == ["call", "call", "call", "call", "return"]
    assert runner.glue_function(text, "decode").callees == ["embed", "decode_layer", "head"]
    # Anything but call / tensor.cast / return keeps the entry point compiled.
    other = text.replace("%logits = call @head(", "%unused = arith.constant 0 : i64\n"
                         "    %logits = call @head(", 1)
    assert runner.glue_function(other, "prefill") is None
    assert runner.glue_function(text, "no_such_function") is None

    rng = np.random.default_rng(0)
    sig = runner.signature(text, "prefill")
    weights = {ref.name: rng.standard_normal(t.shape).astype(np.float32) * 0.3
               for ref, t in sig.weight_args}
    split = runner.CompiledModel(text, weights=weights, cflags=("-O0",), cache_dir=tmp_path)
    whole = runner.CompiledModel(text, weights=weights, cflags=("-O0",), cache_dir=tmp_path,
                                 split_entry_points=False)
    assert split.split and not whole.split
    symbols = runner.ctypes.CDLL(str(split.library.path))
    assert hasattr(symbols, "_mlir_ciface_prefill_layer")
    assert not hasattr(symbols, "_mlir_ciface_prefill")
    assert hasattr(runner.ctypes.CDLL(str(whole.library.path)), "_mlir_ciface_prefill")
    assert split.library.stats["clang"]["bytes"] > 0  # compiled here: per-step statistics

    ids = rng.integers(0, 64, (1, 12))
    mine, theirs = split.generate(ids, 3), whole.generate(ids, 3)
    assert mine["tokens"] == theirs["tokens"]
    assert np.array_equal(mine["logits"], theirs["logits"])
    for a, b in zip(mine["caches"], theirs["caches"]):
        assert np.array_equal(a, b)
    with pytest.raises(ValueError, match=r"@prefill takes 1 arguments \(and 21 bound"):
        split._prefill(ids, ids)


LIBC_NAMED = """
func.func @select(%a: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%a : tensor<4xf32>)
                       outs(%e : tensor<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<4xf32>
  return %s : tensor<4xf32>
}
"""


def test_a_function_named_like_libc_is_the_one_called(tmp_path):
    """`_mlir_ciface_select` calls the module's @select, not libc's select(): the library
    binds its own symbols first (-Bsymbolic), whatever else the process has loaded."""
    _tools_or_skip()
    import ctypes

    # -O0: the wrapper really calls @select (inlined, the question would not arise).
    lib = runner.compile_library(LIBC_NAMED, cache_dir=tmp_path, cflags=("-O0",))
    fn = runner.CompiledFunction(ctypes.CDLL(str(lib.path)), "select",
                                 runner.signature(LIBC_NAMED, "select"))
    a = np.arange(4, dtype=np.float32)
    (doubled,) = fn(a)
    np.testing.assert_array_equal(doubled, 2 * a)
