"""Your own model, end to end: a checkpoint written by `save_pretrained` (random weights, fixed
seed, head_dim 128, 4 query / 2 kv heads, 2 layers), exported by `snapkv.hf` with the weights as
function arguments and one function per layer, compiled by the CPU pipeline and run with the
weights mapped from the safetensors file.

For Llama, Qwen2 (q/k/v bias) and Mistral (a sliding window of 48 positions, wider than every
sequence here, so the export limits the positions to 48 instead of masking):

* the compiled original module generates HF's own greedy tokens (`generate`-style decoding with
  its full DynamicCache, on the checkpoint loaded by `from_pretrained`), logits within
  LOGIT_ATOL;
* capacity < L: the compiled rewritten module generates the tokens of the SnapKV reference
  (snapkv.frontend.reference_decode: HF prefill, the numpy selection on HF's post-RoPE queries,
  plain-torch decode at logical positions), logits within LOGIT_ATOL, its compacted caches are
  the reference's gathered K/V;
* capacity >= L: every output of the rewritten module is bit for bit the original's.

Qwen3 (q/k norms), Phi-3 (fused qkv and gate/up projections) and Gemma (scaled embedding,
(1 + w) norms, GELU) are checked with a full cache against HF.

LOGIT_ATOL = CACHE_ATOL = 1e-4: the compiled code and PyTorch compute in f32 with different
summation orders (register tiles, fused reductions); on these models (logits and K/V of
magnitude ~1-10) the differences are ~1e-6 to 2e-5 after two layers (printed on failure). 1e-4
leaves room for that, is far below the token margins the prompts are chosen for (>= 1e-3
between the two best logits), and far below what one wrongly kept position would change in a
cache row (O(1): another key).

Slow (marked `slow`): checkpoints are written once under the runner's cache directory
(`test-checkpoints/`), exports are cached (`exports/`), libraries too; each module compiles at
-O0 (every module of a comparison with the same flags). Cold, a family takes well under a
minute on a quiet machine (the export is most of it); warm, seconds.
"""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import hf, runtime, tools

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("torch_mlir")

from snapkv.frontend import reference_decode  # noqa: E402  (needs torch)

L, WINDOW, CAPACITY, FULL, STEPS = 32, 8, 16, 64, 8
CFLAGS = ("-O0",)
LOGIT_ATOL = 1e-4
CACHE_ATOL = 1e-4
GROUPS = 2
COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=128,
              max_position_embeddings=4096, initializer_range=0.3, tie_word_embeddings=False)
FAMILIES = {
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON),
    "mistral": lambda: transformers.MistralConfig(**COMMON, sliding_window=48),
}
FULL_CACHE_ONLY = {
    "qwen3": lambda: transformers.Qwen3Config(**COMMON),
    "phi3": lambda: transformers.Phi3Config(**{**COMMON, "pad_token_id": 0}),
    "gemma": lambda: transformers.GemmaConfig(**{**COMMON, "tie_word_embeddings": True}),
}


def checkpoint_dir(name, make_config):
    """A save_pretrained checkpoint of `name` (seed 0), written once and reused while its
    config is the same."""
    folder = runtime.default_cache_dir().parent / "test-checkpoints" / name
    config = make_config()
    wanted = json.loads(config.to_json_string())
    try:
        have = json.loads((folder / "config.json").read_text())
        same = {k: v for k, v in have.items() if k != "transformers_version"} == \
            {k: v for k, v in wanted.items() if k != "transformers_version"}
    except (OSError, ValueError):
        same = False
    if not same or not (folder / "model.safetensors").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config)
        staged = folder.with_name(f".{name}.tmp")
        shutil.rmtree(staged, ignore_errors=True)
        model.save_pretrained(staged)
        staged.replace(folder)
    return folder


def hf_model(folder):
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval()


def clear_prompt(model, vocab, with_oracle=True):
    """The first prompt (seeds 7, 8, ...) whose oracle selections and greedy choices (and HF's
    own) are all clear of ties."""
    for seed in range(7, 57):
        ids = reference_decode.prompt(seed, L, vocab)
        tokens, logits = reference_decode.hf_generate(model, ids, STEPS)
        margins = list(reference_decode.token_margins(logits))
        oracle = None
        if with_oracle:
            oracle = reference_decode.snapkv_generate(model, ids, STEPS, WINDOW, CAPACITY)
            margins += list(reference_decode.token_margins(oracle["logits"]))
            selections = [m["relative"] for sel in oracle["selections"]
                          for m in reference_decode.selection_margins(sel, WINDOW, CAPACITY)
                          if m]
            if min(selections) < reference_decode.MIN_SELECTION_MARGIN:
                continue
        if min(margins) >= reference_decode.MIN_TOKEN_MARGIN:
            return ids.reshape(1, L), (tokens, logits), oracle
    raise AssertionError("no prompt with clear selection and token margins")


@pytest.fixture(scope="module", params=list(FAMILIES))
def case(request):
    require_aot_tools()
    torch.set_num_threads(1)
    folder = checkpoint_dir(request.param, FAMILIES[request.param])
    model = hf_model(folder)
    checkpoint = hf.Checkpoint(folder)
    exported = hf.export(checkpoint)
    ids, reference, oracle = clear_prompt(model, model.config.vocab_size)
    built = {}

    def compiled(capacity=None):
        if capacity not in built:
            text = exported.text if capacity is None else \
                hf.rewrite(exported.text, hf.Compaction(window=WINDOW, capacity=capacity,
                                                        kernel=5, gqa="expand"))
            built[capacity] = runtime.CompiledModel(
                text, weights=checkpoint, cflags=CFLAGS,
                max_positions=exported.meta["max_position_embeddings"])
        return built[capacity]

    return dict(name=request.param, model=model, exported=exported, ids=ids,
                reference=reference, oracle=oracle, compiled=compiled)


def test_export_has_weights_as_arguments(case):
    """Nothing of the checkpoint is in the module: every tensor is an argument named by its
    checkpoint key, one function per layer kind serves both layers, and the module is small."""
    exported = case["exported"]
    sig = runtime.signature(exported.text, "prefill")
    names = [ref.name for ref, _ in sig.weight_args]
    assert names == exported.meta["weights"]
    assert set(names) == set(hf.Checkpoint(exported.checkpoint).tensors)
    # The projections and the LM head are taken transposed ([in, out]), so that once the
    # traced x @ W^T meets the argument's transpose, the matmuls read the arguments in place.
    transposed = {ref.name for ref, _ in sig.weight_args if ref.transposed}
    assert transposed == set(exported.meta["transposed"])
    assert {n for n in names if n.endswith("proj.weight")} <= transposed
    assert transposed - {n for n in names if n.endswith("proj.weight")} <= {
        "lm_head.weight", "model.embed_tokens.weight"}
    canonical = subprocess.run([str(tools.snapkv_opt()), "--canonicalize"], input=exported.text,
                               capture_output=True, text=True, check=True, timeout=300).stdout
    assert not re.search(r"linalg\.transpose ins\(%arg\d+ : tensor<\d+x\d+xf32>", canonical)
    assert exported.text.count("func.func private @prefill_layer(") == 1
    assert exported.text.count("call @prefill_layer(") == 2
    assert exported.text.count("call @decode_layer(") == 2
    assert len(exported.text) < 200_000
    if case["name"] == "mistral":
        assert exported.meta["max_position_embeddings"] == 48  # the sliding window
        assert any("sliding_window 48" in note for note in exported.meta["notes"])


def test_full_cache_is_hf_generation(case):
    """The compiled original module generates HF's own greedy tokens with its full cache."""
    model = case["compiled"]()
    out = model.generate(case["ids"], STEPS)
    tokens, logits = case["reference"]
    diff = np.abs(out["logits"] - logits).max(axis=1)
    assert out["tokens"] == tokens, f"max |diff| per row {diff.tolist()}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"
    assert out["physical_lengths"] == [L + g for g in range(STEPS + 1)]


def test_compacted_is_the_snapkv_reference(case):
    """capacity < L: the tokens, logits and compacted caches of the SnapKV reference, over
    min(L, C) + g physical rows at logical positions L + g; the compaction changes the tokens
    (otherwise the comparison would not see the selection)."""
    model = case["compiled"](CAPACITY)
    oracle = case["oracle"]
    _, caches = model.prefill(case["ids"])
    for layer, sel in enumerate(oracle["selections"]):
        for j, expected in enumerate((sel.keys, sel.values)):
            np.testing.assert_allclose(caches[2 * layer + j], expected, rtol=0, atol=CACHE_ATOL,
                                       err_msg=f"layer {layer} {'KV'[j]}")
    out = model.generate(case["ids"], STEPS)
    diff = np.abs(out["logits"] - oracle["logits"]).max(axis=1)
    assert out["tokens"] == oracle["tokens"], f"max |diff| per row {diff.tolist()}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"
    assert out["physical_lengths"] == [CAPACITY + g for g in range(STEPS + 1)]
    assert out["positions"] == oracle["logical_lengths"]
    assert oracle["tokens"] != case["reference"][0], "compaction does not change the tokens"


def test_capacity_at_least_prompt_is_bit_for_bit_the_original(case):
    """capacity >= L keeps every position in order: prefill's logits and caches (repeated to
    Hq heads) and every generated logits row are exactly the original compiled model's."""
    original, rewritten = case["compiled"](), case["compiled"](FULL)
    logits, caches = original.prefill(case["ids"])
    mine, my_caches = rewritten.prefill(case["ids"])
    assert np.array_equal(mine, logits)
    for got, full in zip(my_caches, caches):
        assert got.shape == (1, 4, L, 128)
        assert np.array_equal(got, np.repeat(full, GROUPS, axis=1))
    base, out = original.generate(case["ids"], STEPS), rewritten.generate(case["ids"], STEPS)
    assert out["tokens"] == base["tokens"]
    assert np.array_equal(out["logits"], base["logits"])


def test_positions_past_the_export_are_refused(case):
    """The runner refuses, before compiling anything runs, a prompt plus generation that
    reaches past the positions the export is exact for (Mistral: its sliding window)."""
    model = case["compiled"]()
    limit = case["exported"].meta["max_position_embeddings"]
    with pytest.raises(runtime.ResourceLimitError, match="max_position_embeddings"):
        model.check_limits(limit - 4, 5)  # positions 0 .. limit
    model.check_limits(limit - 4, 4)      # positions 0 .. limit - 1


# Gemma scales its embeddings by sqrt(hidden) (8 here) and runs them through a GELU MLP: its
# values are larger, and the compiled code (one accumulator per output element, summed in
# order) lands about 4e-4 from HF's logits and as far from a float64 run of the same model,
# where PyTorch's f32 (blocked sums) stays within 1e-5 of float64. Same tokens.
OTHER_ATOL = {"qwen3": LOGIT_ATOL, "phi3": LOGIT_ATOL, "gemma": 1e-3}


@pytest.mark.parametrize("name", list(FULL_CACHE_ONLY))
def test_other_families_full_cache(name):
    """Qwen3, Phi-3 and Gemma (tied embeddings): the compiled original module generates HF's
    greedy tokens, logits within OTHER_ATOL."""
    require_aot_tools()
    torch.set_num_threads(1)
    folder = checkpoint_dir(name, FULL_CACHE_ONLY[name])
    model = hf_model(folder)
    ids, (tokens, logits), _ = clear_prompt(model, model.config.vocab_size, with_oracle=False)
    compiled = hf.load(folder, cflags=CFLAGS)
    out = compiled.generate(ids, STEPS)
    diff = np.abs(out["logits"] - logits).max(axis=1)
    assert out["tokens"] == tokens, f"max |diff| per row {diff.tolist()}"
    assert diff.max() <= OTHER_ATOL[name], f"max |diff| per row {diff.tolist()}"


def snapkv_cli(*args, timeout=600):
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tools.REPO / "python"),
                                         env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-m", "snapkv.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_cli_on_a_checkpoint_directory(tmp_path):
    """`snapkv generate|ledger|compile DIR` export the checkpoint (cached) and run it;
    `snapkv export --hf` writes the module and its JSON, which `generate MODULE` then binds."""
    require_aot_tools()
    folder = checkpoint_dir("llama", FAMILIES["llama"])
    done = snapkv_cli("generate", folder, "--prompt-length", L, "--window", WINDOW,
                      "--capacity", FULL, "--steps", 4, "--json", "-q")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["tokens"]["full"] == result["tokens"]["compacted"]  # capacity >= L
    assert [s["physical_rows"]["compacted"] for s in result["steps"]] == \
        [L + g for g in range(5)]
    assert result["ledger"]["total"]["layers"] == 2
    assert result["measured"]["compacted_bytes"] == result["ledger"]["total"]["compacted"]

    done = snapkv_cli("ledger", folder, "--prompt-length", 4096, "--generated", 16,
                      "--window", 32, "--capacity", 512, "--gqa", "mean", "--json", "-q")
    assert done.returncode == 0, done.stderr
    ledger = json.loads(done.stdout)
    # 2 layers x 2 (K, V) x Hkv 2 x D 128 x 4 bytes x rows: prefill holds a layer's whole
    # prompt before its select, decoding 512 + 16 rows.
    assert ledger["total"] == dict(layers=2, full=2 * 2 * 2 * 128 * 4 * 4112,
                                   compacted=2 * 2 * 2 * 128 * 4 * 528, ratio=528 / 4112,
                                   prefill_peak=2 * 2 * 2 * 128 * 4 * 4096,
                                   decode_peak=2 * 2 * 2 * 128 * 4 * 528)

    out = tmp_path / "export"
    done = snapkv_cli("export", "--hf", folder, "--out", out, "-q")
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "model.json").read_text())
    assert meta["checkpoint"] == str(folder.resolve()) and len(meta["weights"]) == 21
    done = snapkv_cli("compile", out / "model.mlir", "-o", tmp_path / "compact.mlir",
                      "--window", WINDOW, "--capacity", CAPACITY, "--strict")
    assert done.returncode == 0, done.stderr
    assert "in the layer function, which runs once per layer" in done.stderr
    assert json.loads((tmp_path / "compact.json").read_text())["checkpoint"] == \
        meta["checkpoint"]
    done = snapkv_cli("generate", out / "model.mlir", "--prompt-length", L, "--window", WINDOW,
                      "--capacity", CAPACITY, "--steps", 2, "-q")
    assert done.returncode == 0, done.stderr
    # Weights of another architecture do not fit: named, before anything runs.
    other = checkpoint_dir("qwen2", FAMILIES["qwen2"])
    done = snapkv_cli("generate", out / "model.mlir", "--checkpoint", other, "--window",
                      WINDOW, "--capacity", CAPACITY, "-q")
    assert done.returncode == 1
    assert "is not the architecture model.mlir was exported from" in done.stderr, done.stderr
