"""Random-weight checkpoints of the benchmarks' model shapes (``bench_compile``,
``bench_model``): written once by ``save_pretrained`` (``torch.manual_seed(0)``) under
``~/.cache/snapkv/bench-checkpoints``."""

import json
import shutil

from snapkv import runtime


def configs(vocab):
    """name -> (transformers config class name, keyword arguments)."""
    return {
        "tiny": ("LlamaConfig", dict(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=8192, initializer_range=0.1, tie_word_embeddings=False)),
        "smollm2": ("LlamaConfig", dict(
            vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
            num_attention_heads=9, num_key_value_heads=3, head_dim=64,
            max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
            initializer_range=0.02, tie_word_embeddings=True)),
        "llama8b-2l": ("LlamaConfig", dict(
            vocab_size=vocab, hidden_size=4096, intermediate_size=14336, num_hidden_layers=2,
            num_attention_heads=32, num_key_value_heads=8, head_dim=128,
            max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
            initializer_range=0.02, tie_word_embeddings=False)),
    }


def checkpoint(name, cls, kwargs, log):
    """A save_pretrained checkpoint of `name` (seed 0), written once per configuration."""
    import torch
    import transformers

    config = getattr(transformers, cls)(**kwargs)
    folder = runtime.default_cache_dir().parent / "bench-checkpoints" / name
    # save_pretrained adds these.
    added = ("transformers_version", "dtype", "torch_dtype", "architectures")
    wanted = {k: v for k, v in json.loads(config.to_json_string()).items() if k not in added}
    try:
        have = {k: v for k, v in json.loads((folder / "config.json").read_text()).items()
                if k not in added}
    except (OSError, ValueError):
        have = None
    if have != wanted or not any(folder.glob("*.safetensors")):
        log(f"{name}: writing a random-weight checkpoint to {folder} ...")
        shutil.rmtree(folder, ignore_errors=True)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config)
        staged = folder.with_name(f".{name}.tmp")
        shutil.rmtree(staged, ignore_errors=True)
        model.save_pretrained(staged)
        del model
        staged.replace(folder)
    return folder
