"""The retrieval model that ships in models/retrieval-llama (trained by
scripts/train_retrieval_model.py): what it is, that it solves its task with the full cache, and
the claim `make demo-toy` makes with it, through the compiled pipeline: at C = L/8 SnapKV keeps the
answer and StreamingLLM does not.

The compiled checks are marked `slow`: the first run exports the checkpoint (torch-mlir) and
compiles the pieces; later runs take them from the caches."""

import json

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv.cli import main
from snapkv.tasks import checkpoint, retrieval

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

MODEL = checkpoint.MODEL_DIR


def test_shipped_checkpoint():
    config = json.loads((MODEL / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_key_value_heads"] < config["num_attention_heads"]  # GQA
    assert config["vocab_size"] == retrieval.VOCAB_SIZE
    assert config["max_position_embeddings"] >= 4096
    weights = list(MODEL.glob("*.safetensors"))
    assert weights and sum(w.stat().st_size for w in weights) <= 8 * 2**20
    card = (MODEL / "README.md").read_text()
    assert "## Accuracy with the full cache" in card and "L = 4096" in card
    assert (MODEL / "loss.png").stat().st_size > 5000
    run = json.loads((MODEL / "training.json").read_text())
    assert run["cpu_seconds"] <= 30 * 60 * 2  # 30 minutes on 2 cores at most


@torch.no_grad()
def _greedy(model, sample):
    """Greedy decoding of len(answer) tokens with HF's own full cache."""
    ids = torch.from_numpy(sample.ids)[None]
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=len(sample.answer), pad_token_id=retrieval.PAD)
    return out[0, sample.length:].tolist()


@pytest.mark.parametrize("variant", ["multitoken", "distractor"])
def test_full_cache_solves_the_task(variant):
    """PyTorch, HF generation, full cache: prompts of a seed the training never drew."""
    model = checkpoint.load()
    samples = retrieval.samples(10, 1024, seed=2026, variant=variant)
    correct = sum(_greedy(model, s) == s.answer.tolist() for s in samples)
    assert correct >= 9, f"{correct}/10 {variant} prompts answered"


@pytest.mark.slow
def test_demo_claim(capsys):
    """What `make demo-toy` shows: the needle prompt of L = 1024 answered right with the full cache
    and with SnapKV at C = L/8, wrongly by StreamingLLM at the same budget, all compiled."""
    require_aot_tools()
    code = main(["needle", "--length", "1024", "--budget", "1/8", "--seed", "0", "--index",
                 "0", "--json", "-q"])
    out, err = capsys.readouterr()
    assert code == 0, err
    document = json.loads(out)
    results = {r["method"]: r for r in document["results"]}
    assert results["full"]["correct"] and results["snapkv"]["correct"]
    assert not results["streaming"]["correct"]
    assert results["snapkv"]["capacity"] == results["streaming"]["capacity"] == 128
    assert results["snapkv"]["kept_bytes"] < results["full"]["kept_bytes"]
    assert np.isfinite(results["snapkv"]["decode_ms"])
