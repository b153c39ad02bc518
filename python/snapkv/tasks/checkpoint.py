"""The retrieval Llama that ships in ``models/retrieval-llama`` (trained by
``scripts/train_retrieval_model.py`` on :mod:`snapkv.tasks.retrieval`)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MODEL_DIR = REPO / "models" / "retrieval-llama"


def load(path=MODEL_DIR):
    """The checkpoint as an f32 ``LlamaForCausalLM`` in eval mode with eager attention (what
    the torch-mlir export and the PyTorch reference decode expect). Needs torch and
    transformers."""
    import torch
    from transformers import LlamaForCausalLM

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no retrieval model at {path} (config.json missing); "
                                "scripts/train_retrieval_model.py --out DIR writes one")
    model = LlamaForCausalLM.from_pretrained(path, attn_implementation="eager")
    model.to(dtype=torch.float32)
    model.eval()
    return model
