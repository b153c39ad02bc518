"""The shipped retrieval Llama (models/retrieval-llama) and the PyTorch cache-policy check
(python/snapkv/tasks/torch_eval.py).

* The checkpoint has the shape the compiled pipeline needs and stays small.
* It answers short prompts of every variant with the full cache.
* On a prompt whose needle is far from the end, SnapKV at C = L/8 keeps the answer and
  StreamingLLM at the same budget loses it.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from snapkv.tasks import checkpoint, retrieval, torch_eval  # noqa: E402


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(2)
    return checkpoint.load()


def test_checkpoint_files():
    files = {p.name: p.stat().st_size for p in checkpoint.MODEL_DIR.iterdir()}
    assert {"config.json", "model.safetensors", "README.md"} <= set(files)
    assert files["model.safetensors"] <= 8 * 1024 * 1024
    config = json.loads((checkpoint.MODEL_DIR / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_attention_heads"] == 4 and config["num_key_value_heads"] == 2
    assert config["head_dim"] in (16, 64, 256)  # 1/sqrt(head_dim) exact in f32
    assert config["hidden_size"] == config["num_attention_heads"] * config["head_dim"]
    assert config["vocab_size"] == retrieval.VOCAB_SIZE
    assert config["max_position_embeddings"] >= 4096 + 64


def test_loads_as_eager_f32(model):
    # The torch-mlir export and the PyTorch reference decode need eager attention in f32.
    assert model.config._attn_implementation == "eager"
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert not model.training


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json missing"):
        checkpoint.load(tmp_path)


@pytest.mark.parametrize("variant", sorted(retrieval.VARIANTS))
def test_answers_short_prompts(model, variant):
    hits = 0
    for sample in retrieval.samples(4, 128, seed=101, variant=variant):
        tokens, kept = torch_eval.answer(model, sample, "full")
        assert kept is None and len(tokens) == len(sample.answer)
        hits += tokens == sample.answer.tolist()
    assert hits == 4


def test_snapkv_keeps_and_streaming_loses_a_far_needle(model):
    length = 512
    capacity = length // 8
    far = [s for s in retrieval.samples(12, length, seed=7)
           if s.needle_positions[-1] < length - capacity][:2]
    assert far
    for sample in far:
        prefilled = torch_eval.prefill(model, sample)
        full, _ = torch_eval.answer(model, sample, "full", prefilled=prefilled)
        snap, kept = torch_eval.answer(model, sample, "snapkv", capacity, prefilled)
        stream, stream_kept = torch_eval.answer(model, sample, "streaming", capacity, prefilled)
        assert full == sample.answer.tolist()
        assert snap == full
        assert stream != full
        # Every cache head of every layer holds C positions, the window among them.
        for layer in kept:
            assert layer.shape == (4, capacity)
            assert np.isin(np.arange(length - torch_eval.WINDOW, length), layer).all()
        assert not np.isin(sample.value_positions, stream_kept[0]).any()


def test_streaming_positions():
    assert torch_eval.streaming_positions(10, 16).tolist() == list(range(10))
    assert torch_eval.streaming_positions(20, 8).tolist() == [0, 1, 2, 3, 16, 17, 18, 19]
    with pytest.raises(ValueError, match="must exceed the 4 attention sinks"):
        torch_eval.streaming_positions(20, 4)


def test_evaluate_small(model):
    results = torch_eval.evaluate(model, [256], 1 / 8, 3, seed=5)
    assert [(r["method"], r["length"], r["n"]) for r in results] == \
        [("full", 256, 3), ("snapkv", 256, 3), ("streaming", 256, 3)]
    full = results[0]
    assert full["capacity"] == 256 and full["needle_kept"] is None
    assert results[1]["capacity"] == 32 and 0 <= results[1]["needle_kept"] <= 1
    assert all(0 <= r["accuracy"] <= 1 for r in results)
