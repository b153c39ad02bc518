"""End to end on head_dim-128 models of other families than the bundled fixture: a Llama with
HuggingFace's default SDPA attention and a Qwen2 (q/k/v bias, SDPA), two layers, 4 query / 2 kv
heads, random weights (snapkv.frontend.families), exported with a dynamic prompt and cache
length, rewritten by `snapkv-compress-kv-cache` (strict) and compiled with the CPU pipeline
(snapkv.runtime).

* capacity >= L: the rewritten model's prefill logits, caches and every greedy decode step are
  bit for bit the original compiled model's;
* capacity < L: the same greedy tokens as the independent oracle (HF forward for prefill, the
  numpy SnapKV reference on HF's post-RoPE queries, plain-torch decode at logical positions:
  snapkv.frontend.reference_decode), logits within 1e-4, the same kept K/V;
* the export keeps SDPA as one op, and the select carries the model's scale (the `scaling` HF
  passes to SDPA, rounded to f32).

Slow (marked `slow`; deselect with `-m "not slow"`): each model is exported once per session
(about 25 s, cached under the runner's cache directory as `exports/`) and each module compiles
in about 17 s at -O0 (all modules of a comparison are built with the same flags, so "bit for
bit" compares like with like). Cold, each test takes under a minute; warm, seconds.
"""

import dataclasses
import hashlib
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import reference, runtime
from snapkv.tools import snapkv_opt

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torch_mlir")

from snapkv.frontend import families, reference_decode  # noqa: E402  (needs torch)

CASES = {
    "llama-sdpa": families.FamilySpec("llama", "sdpa", num_hidden_layers=2,
                                      initializer_range=0.3),
    "qwen2-sdpa": families.FamilySpec("qwen2", "sdpa", num_hidden_layers=2,
                                      initializer_range=0.3),
}
L, WINDOW, CAPACITY, FULL, STEPS = 32, 8, 16, 64, 8
CFLAGS = ("-O0",)
LOGIT_ATOL = 1e-4   # compiled f32 vs PyTorch f32
CACHE_ATOL = 1e-5
GROUPS = 2          # 4 query heads / 2 kv heads


def _export(spec, model):
    """The dynamic export of `spec`, cached by spec, package versions and exporter sources."""
    from snapkv.frontend import export
    from snapkv.frontend import model as wrappers

    digest = hashlib.sha256(repr((dataclasses.asdict(spec), export.versions())).encode())
    for module in (families, export, wrappers):
        digest.update(Path(module.__file__).read_bytes())
    path = runtime.default_cache_dir() / "exports" / f"{spec.name}-{digest.hexdigest()[:16]}.mlir"
    if path.is_file():
        return path.read_text()
    text = families.export_text(spec, dynamic=True, model=model)
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_suffix(f".{id(text)}.tmp")
    staged.write_text(text)
    staged.replace(path)
    return text


def _prompt(model, vocab):
    """The first prompt (seeds 7, 8, ...) whose oracle selections and greedy choices are all
    clear of ties (the compiled model computes from Q/K that differ from PyTorch's by ~1e-6)."""
    for seed in range(7, 57):
        ids = reference_decode.prompt(seed, L, vocab)
        ref = reference_decode.snapkv_generate(model, ids, STEPS, WINDOW, CAPACITY)
        margins = [m["relative"] for sel in ref["selections"]
                   for m in reference_decode.selection_margins(sel, WINDOW, CAPACITY) if m]
        if min(margins) >= reference_decode.MIN_SELECTION_MARGIN and \
                min(reference_decode.token_margins(ref["logits"])) >= \
                reference_decode.MIN_TOKEN_MARGIN:
            return ids.reshape(1, L), ref
    raise AssertionError("no prompt with clear selection and token margins")


def _rewrite(text, capacity):
    options = f"window={WINDOW} capacity={capacity} kernel=5 gqa=expand strict=true"
    done = subprocess.run([str(snapkv_opt()), f"--snapkv-compress-kv-cache={options}", "-"],
                          input=text, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warning" not in done.stderr, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    require_aot_tools()
    torch.set_num_threads(1)
    spec = CASES[request.param]
    model = families.build_model(spec)
    text = _export(spec, model)
    ids, oracle = _prompt(model, spec.vocab_size)
    built = {}

    def compiled(capacity=None):
        if capacity not in built:
            source = text if capacity is None else _rewrite(text, capacity)
            built[capacity] = (source, runtime.CompiledModel(source, cflags=CFLAGS))
        return built[capacity]

    return dict(spec=spec, model=model, text=text, ids=ids, oracle=oracle, compiled=compiled)


def test_capacity_at_least_prompt_is_exactly_the_original(case):
    """capacity >= L keeps every position in order: prefill's logits, its caches (repeated to
    Hq heads for expand) and every logits row of a greedy generation are bit for bit the
    original compiled model's. Catches: a rewrite that touches prefill's attention (SDPA's scale
    split or guard), a decode that reads the expanded cache in the wrong head order or still
    applies a mask, anything that changes what decode computes when physical == logical."""
    _, original = case["compiled"]()
    _, rewritten = case["compiled"](FULL)
    ids = case["ids"]
    logits, caches = original.prefill(ids)
    mine, my_caches = rewritten.prefill(ids)
    assert np.array_equal(mine, logits)
    for got, full in zip(my_caches, caches):
        assert got.shape == (1, 4, L, 128)
        assert np.array_equal(got, np.repeat(full, GROUPS, axis=1))
    base, out = original.generate(ids, STEPS), rewritten.generate(ids, STEPS)
    assert out["tokens"] == base["tokens"]
    for g in range(STEPS + 1):
        assert np.array_equal(out["logits"][g], base["logits"][g]), f"row {g}"
    assert out["physical_lengths"] == [L + g for g in range(STEPS + 1)]


def test_compacted_matches_the_oracle(case):
    """capacity < L: the compiled rewritten model and the PyTorch oracle generate the same
    greedy tokens with logits within 1e-4 at every step, prefill's compacted caches are the
    oracle's gathered K/V (so the same positions were kept in every layer and head), decode
    runs on min(L, C) + g physical rows at logical positions L + g. The compacted tokens differ
    from the full-cache ones, so the comparison sees the selection."""
    _, model = case["compiled"](CAPACITY)
    ref = case["oracle"]
    _, caches = model.prefill(case["ids"])
    for layer, sel in enumerate(ref["selections"]):
        for j, expected in enumerate((sel.keys, sel.values)):
            np.testing.assert_allclose(caches[2 * layer + j], expected, rtol=0, atol=CACHE_ATOL,
                                       err_msg=f"layer {layer} {'KV'[j]}")
    out = model.generate(case["ids"], STEPS)
    diff = np.abs(out["logits"] - ref["logits"]).max(axis=1)
    assert out["tokens"] == ref["tokens"], f"max |diff| per row {diff.tolist()}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"
    assert out["physical_lengths"] == [CAPACITY + g for g in range(STEPS + 1)]
    assert out["positions"] == ref["logical_lengths"]
    full_tokens, _ = reference_decode.hf_generate(case["model"], case["ids"][0], STEPS)
    assert full_tokens != ref["tokens"], "compaction does not change the tokens: a weak case"


def test_select_scale_is_the_models(case):
    """The export keeps SDPA as one op (snapkv.sdpa: no decomposed softmax left for the matcher),
    and the scale on each select is what the model computes with: the `scaling` HF passes to
    SDPA, which torch's CPU kernels multiply the f32 scores by rounded to f32. With it, the
    numpy reference selects the same positions as with 1/sqrt(D) (the oracle's scale)."""
    from snapkv import interface

    layers = case["spec"].num_hidden_layers
    functions = interface.describe(case["text"]).functions
    assert functions["prefill"].attentions == {"kept": layers, "decomposed": 0}
    assert functions["decode"].attentions == {"kept": layers, "decomposed": 0}
    selects = interface.describe(_rewrite(case["text"], CAPACITY)).functions["prefill"].selects
    attn = case["model"].model.layers[0].self_attn
    expected = np.float32(attn.scaling)
    assert len(selects) == layers
    assert all(np.float32(s["scale"]) == expected for s in selects), (selects, expected)

    ids = torch.as_tensor(case["ids"])
    _, keys, values, queries = reference_decode.prefill(case["model"], ids)
    for layer, (q, k, v) in enumerate(zip(queries, keys, values)):
        q = q[:, :, L - WINDOW:].numpy()
        with_scale = reference.select(q, k.numpy(), v.numpy(), WINDOW, CAPACITY,
                                      scale=float(expected))
        default = reference.select(q, k.numpy(), v.numpy(), WINDOW, CAPACITY)
        assert np.array_equal(with_scale.indices, default.indices), f"layer {layer}"
