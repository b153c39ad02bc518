"""The 8-bit K/V cache (``snapkv-compress-kv-cache kv-dtype=i8``, ``--kv-dtype i8``) on the
bundled tiny model:

* the compiled rewrite quantizes exactly as :func:`snapkv.reference.quantize_rows` (prefill's
  compacted caches and decode's appended row, bit for bit), after a select that voted with
  the unquantized K/V (the same rows are kept);
* decode reads the rows back (q * s): its logits stay near the f32 cache's, and greedy
  tokens on the tiny model are the same;
* the ledger (snapkv-report-cache), the runner's caches and ``generate --json`` count
  D + 4 bytes a row;
* an unknown --kv-dtype is a usage error naming the choices; i8 with --chunk, or on the IREE
  route, is refused.

The two compiled variants are cached by the runner (about 20 s each the first time).
"""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import require_aot_tools
from runtime_inputs import DYNAMIC, EXAMPLE

from snapkv import hf, interface, reference, runtime, tools

WINDOW, CAPACITY, STEPS = 8, 24, 6


def test_quantize_rows_reference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 5, 16)).astype(np.float32)
    x[0, 1, 3] = 0  # a zero row: scale 0, values 0
    packed = reference.quantize_rows(x)
    assert packed.dtype == np.int8 and packed.shape == (1, 2, 5, 20)
    scale = packed[..., 16:].copy().view("<f4")[..., 0]
    np.testing.assert_array_equal(scale, np.abs(x).max(-1) / np.float32(127))
    assert np.abs(packed[..., :16]).max() == 127
    back = reference.dequantize_rows(packed)
    assert np.all(np.abs(back - x) <= scale[..., None] / 2 * (1 + 1e-6))
    np.testing.assert_array_equal(back[0, 1, 3], 0)


@pytest.fixture(scope="module")
def models():
    require_aot_tools()
    text = DYNAMIC.read_text()
    out = {}
    for kv in ("same", "i8"):
        rewritten = hf.rewrite(text, hf.Compaction(window=WINDOW, capacity=CAPACITY,
                                                   kv_dtype=kv))
        out[kv] = (rewritten, runtime.CompiledModel(rewritten))
    return out


@pytest.fixture(scope="module")
def ids():
    return np.array(EXAMPLE["ids"], dtype=np.int64).reshape(1, -1)


def test_module_records_the_packed_caches(models):
    text, _ = models["i8"]
    described = interface.describe(text)
    assert described.attributes["snapkv.kv_cache"] == {"dtype": "i8", "scale": "f32"}
    same = interface.describe(models["same"][0])
    for name in ("prefill", "decode"):
        for ours, theirs in zip(described.function(name).results[1:],
                                same.function(name).results[1:]):
            assert ours.element == "i8" and theirs.element == "f32"
            assert ours.shape == theirs.shape[:3] + (theirs.shape[3] + 4,)


def test_prefill_and_append_quantize_as_the_reference(models, ids):
    length = ids.shape[1]
    assert length > CAPACITY
    _, same = models["same"]
    _, i8 = models["i8"]
    logits_same, caches_same = same.prefill(ids)
    logits_i8, caches_i8 = i8.prefill(ids)
    # Prefill's own attention reads the full-precision K/V.
    np.testing.assert_array_equal(logits_i8, logits_same)
    for ours, theirs in zip(caches_i8, caches_same):
        np.testing.assert_array_equal(ours, reference.quantize_rows(theirs))
    token = int(np.argmax(logits_same[0, -1]))
    step_same, after_same = same.decode(token, length, caches_same)
    step_i8, after_i8 = i8.decode(token, length, caches_i8)
    for i, (ours, theirs) in enumerate(zip(after_i8, after_same)):
        # The old rows untouched; the new row quantized when written: layer 0's K/V (which
        # do not depend on any cache) exactly as the reference, later layers' from hidden
        # states that read quantized caches, so only close.
        np.testing.assert_array_equal(ours[:, :, :CAPACITY], caches_i8[i])
        new = ours[:, :, -1:]
        if i < 2:
            np.testing.assert_array_equal(new, reference.quantize_rows(theirs[:, :, -1:]))
        assert np.all(np.abs(new[..., :-4]).max(-1) == 127)
        np.testing.assert_allclose(reference.dequantize_rows(new), theirs[:, :, -1:],
                                   atol=0.05, rtol=0)
    np.testing.assert_allclose(step_i8, step_same, atol=0.05, rtol=0)
    assert not np.array_equal(step_i8, step_same)  # it did read the quantized cache


def test_greedy_tokens_close_and_bytes(models, ids):
    _, same = models["same"]
    _, i8 = models["i8"]
    out_same, out_i8 = same.generate(ids, STEPS), i8.generate(ids, STEPS)
    assert out_i8["tokens"] == out_same["tokens"]
    assert np.abs(out_i8["logits"] - out_same["logits"]).max() < 0.05
    rows = CAPACITY + STEPS
    heads, dim = out_same["caches"][0].shape[1], out_same["caches"][0].shape[3]
    layers = len(out_same["caches"]) // 2
    assert out_same["caches"].nbytes == 2 * layers * heads * rows * dim * 4
    assert out_i8["caches"].nbytes == 2 * layers * heads * rows * (dim + 4)
    ledger = json.loads(tools.opt([f"--snapkv-report-cache=prompt-length={ids.shape[1]} "
                                   f"generated={STEPS} format=json", "-o", "/dev/null"],
                                  text=models["i8"][0]).stdout)
    assert [layer["row_bytes"] for layer in ledger["layers"]] == [dim + 4] * layers
    assert ledger["total"]["compacted"] == out_i8["caches"].nbytes
    assert ledger["total"]["full"] == 2 * layers * heads * (ids.shape[1] + STEPS) * dim * 4


def snapkv_cli(*args):
    return subprocess.run([sys.executable, "-m", "snapkv.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def test_cli_kv_dtype():
    done = snapkv_cli("generate", "--kv-dtype", "bf16", "-q")
    assert done.returncode == 2
    assert "--kv-dtype: invalid choice: 'bf16' (choose from 'same', 'i8')" in done.stderr, \
        done.stderr
    done = snapkv_cli("compile", "--kv-dtype", "int8", "-q")  # a near miss: a suggestion
    assert done.returncode == 2
    assert "--kv-dtype: invalid choice: 'int8'; did you mean 'i8'?" in done.stderr, done.stderr
    done = snapkv_cli("generate", "--kv-dtype", "i8", "--chunk", 8, "--window", WINDOW,
                      "--capacity", CAPACITY, "-q")
    assert done.returncode == 1
    assert "--kv-dtype i8 is not available with --chunk" in done.stderr, done.stderr
    done = snapkv_cli("compile", DYNAMIC, "--device", "iree-cpu", "--kv-dtype", "i8", "-o",
                      "/tmp/unused.vmfb", "-q")
    assert done.returncode == 1
    assert "--kv-dtype i8: the IREE route keeps the cache in the model's type" in done.stderr, \
        done.stderr
    done = snapkv_cli("eval", "--kv-dtype", "u8", "-q")
    assert done.returncode == 2 and "choose from 'same', 'i8'" in done.stderr, done.stderr


def test_cli_generate_json_counts_the_bytes():
    require_aot_tools()
    done = snapkv_cli("generate", "--kv-dtype", "i8", "--window", WINDOW, "--capacity",
                      CAPACITY, "-L", 48, "--steps", STEPS, "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["compaction"]["kv_dtype"] == "i8"
    assert out["measured"]["compacted_bytes"] == out["ledger"]["total"]["compacted"] == \
        2 * 2 * 2 * (CAPACITY + STEPS) * (16 + 4)
