"""The model fixtures in test/Models (python/snapkv/frontend).

* They parse with the distro's mlir-opt and hold upstream dialects only (no torch remnants).
* Compiled with `snapkv-opt --snapkv-cpu-pipeline` and run, they reproduce the PyTorch outputs
  recorded in tiny_llama.json (no torch needed for these).
* With torch, transformers and torch-mlir installed: re-exporting gives exactly the committed
  files, and the Decode wrapper is a real decode step (logical position drives RoPE).
"""

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest

from snapkv import tools as snapkv_tools
from snapkv.frontend import harness
from snapkv.mlirgen import ToolError, tools

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "test" / "Models"
META = json.loads((MODELS / "tiny_llama.json").read_text())
FIXTURES = sorted(META["files"])
MLIR_OPT = snapkv_tools.mlir_opt()
UPSTREAM_DIALECTS = {"arith", "affine", "cf", "func", "linalg", "math", "tensor"}

_missing = [m for m in ("torch", "transformers", "torch_mlir")
            if importlib.util.find_spec(m) is None]
needs_frontend = pytest.mark.skipif(
    bool(_missing), reason=f"frontend packages not installed: {', '.join(_missing)} "
                           "(pip install torch transformers torch-mlir)")


def _tools_or_skip():
    try:
        tools()
    except ToolError as error:
        pytest.skip(str(error))


def test_fixture_files_are_small():
    for name in FIXTURES:
        size = (MODELS / name).stat().st_size
        assert size == META["files"][name]["bytes"], name
        assert size < 2 * 1024 * 1024, f"{name} is {size} bytes"


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_parses_with_mlir_opt(name):
    if not MLIR_OPT.is_file():
        pytest.skip(f"{MLIR_OPT} not found")
    import subprocess

    done = subprocess.run([str(MLIR_OPT), str(MODELS / name), "-o", "/dev/null"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_has_upstream_dialects_only(name):
    text = (MODELS / name).read_text()
    body = text[:text.find("\n{-#")]  # drop the dense_resource blobs
    ops = set(re.findall(r"(?:= |^\s+)([a-z_]+)\.[a-z_.]+[ (<{]", body, re.M))
    assert ops <= UPSTREAM_DIALECTS, ops - UPSTREAM_DIALECTS
    # No torch dialect ops or types left (the blob names `torch_tensor_..._torch.float32` are
    # only names), and no ml_program globals.
    assert not re.search(r"!torch\.|\btorch\.(aten|prim|vtensor|constant|operator)\b", body)
    assert "ml_program" not in body
    for func in ("prefill", "decode"):
        args, results = harness.signature(text, func)
        assert args == META["files"][name][func]["arguments"]
        assert results == META["files"][name][func]["results"]


def _run_example(name, pipeline):
    _tools_or_skip()
    example = META["examples"][name]
    ids = np.array(example["ids"], dtype=np.int64).reshape(1, -1)
    out = harness.run_prefill_decode((MODELS / name).read_text(), ids, example["token"],
                                     example["position"], pipeline=pipeline)
    spec = META["spec"]
    length, hkv, dim = ids.shape[1], spec["num_key_value_heads"], spec["head_dim"]
    layers = spec["num_hidden_layers"]
    assert out[0].shape == (1, length, spec["vocab_size"])
    for kv in out[1:1 + 2 * layers]:
        assert kv.shape == (1, hkv, length, dim)
    decode = out[1 + 2 * layers:]
    assert decode[0].shape == (1, 1, spec["vocab_size"])
    for before, after in zip(out[1:1 + 2 * layers], decode[1:]):
        assert after.shape == (1, hkv, length + 1, dim)
        # The cache is appended to, never rewritten.
        np.testing.assert_array_equal(after[:, :, :length], before)
    np.testing.assert_allclose(out[0][0, -1], example["prefill_last_logits"], atol=2e-4, rtol=0)
    np.testing.assert_allclose(decode[0][0, 0], example["decode_logits"], atol=2e-4, rtol=0)
    assert int(decode[0][0, 0].argmax()) == example["decode_argmax"]


def test_static_fixture_runs_with_snapkv_cpu_pipeline():
    _run_example("tiny_llama.mlir", "snapkv")


def test_dynamic_fixture_runs_with_upstream_lowering():
    _run_example("tiny_llama_dynamic.mlir", "upstream")


# Regression: the i1 causal-mask broadcast was once vectorised into a bit-packed
# i1 gather that read only column 0 (snapkv-vectorize-linalg now leaves i1 ops scalar).
def test_dynamic_fixture_runs_with_snapkv_cpu_pipeline():
    _run_example("tiny_llama_dynamic.mlir", "snapkv")


@needs_frontend
def test_export_reproduces_committed_fixtures():
    from snapkv.frontend import export

    installed = export.versions()
    if installed != META["versions"]:
        pytest.skip(f"fixtures were made with {META['versions']}, installed {installed}: "
                    "the printed IR may legitimately differ")
    generated = export.generate()
    assert sorted(generated) == sorted(FIXTURES + [export.JSON_FILE])
    for name in FIXTURES:
        assert generated[name] == (MODELS / name).read_text(), (
            f"{name} differs from a fresh export; rerun "
            "`python -m snapkv.frontend.export --out test/Models`")
    fresh = json.loads(generated[export.JSON_FILE])
    recorded = dict(META)
    fresh_examples, recorded_examples = fresh.pop("examples"), recorded.pop("examples")
    assert fresh == recorded
    for name, example in recorded_examples.items():
        for key, value in example.items():
            if isinstance(value, list) and key.endswith("logits"):
                np.testing.assert_allclose(fresh_examples[name][key], value, atol=1e-5)
            else:
                assert fresh_examples[name][key] == value, (name, key)


@needs_frontend
def test_decode_wrapper_is_a_decode_step():
    import torch

    from snapkv.frontend.model import Decode, Prefill, TinyLlamaSpec, build_model

    spec = TinyLlamaSpec()
    model = build_model(spec)
    ids = torch.randint(0, spec.vocab_size, (1, 17), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(input_ids=ids).logits
        prefill = Prefill(model)(ids[:, :16])
        step = Decode(model)(ids[:, 16:], torch.tensor([16]), *prefill[1:])
        later = Decode(model)(ids[:, 16:], torch.tensor([40]), *prefill[1:])
    torch.testing.assert_close(prefill[0], full[:, :16], atol=1e-5, rtol=0)
    torch.testing.assert_close(step[0][0, 0], full[0, 16], atol=1e-5, rtol=0)
    for before, after in zip(prefill[1:], step[1:]):
        assert after.shape[2] == 17
        torch.testing.assert_close(after[:, :, :16], before, atol=0, rtol=0)
    # The position is an input: another logical position rotates the new key differently.
    assert not torch.allclose(later[1][:, :, -1], step[1][:, :, -1])
    assert not torch.allclose(later[0], step[0])
