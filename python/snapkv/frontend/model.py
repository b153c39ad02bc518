"""A tiny HuggingFace Llama with GQA and the two functions the model rewrite works on.

Nothing is downloaded: the model is built from a ``LlamaConfig`` with random weights drawn
after ``torch.manual_seed(seed)``.

* :class:`Prefill` -- ``ids [B, L] i64 -> (logits [B, L, V], k0, v0, k1, v1, ...)``, where
  ``k<i>``/``v<i>`` are layer ``i``'s post-RoPE key/value states ``[B, Hkv, L, D]``, exactly
  what HuggingFace's ``DynamicCache`` stores after the forward pass.
* :class:`Decode` -- ``(id [B, 1] i64, position [1] i64, k0, v0, ...) -> (logits [B, 1, V],
  k0', v0', ...)``. ``position`` is the *logical* position of the new token (docs/semantics.md);
  it drives RoPE through ``position_ids``. The cache arguments are loaded into a
  ``DynamicCache`` whose ``update`` concatenates the new token's K/V at the end, so
  ``k<i>'`` is ``[B, Hkv, T + 1, D]`` for a cache of length ``T``.

Both wrappers call the unmodified ``LlamaForCausalLM.forward``; only the cache plumbing is
ours. Attention is HuggingFace's ``eager`` implementation (see ``docs/model-ir.md`` for why).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class TinyLlamaSpec:
    """Everything that determines the exported fixtures."""

    seed: int = 0
    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    # HF's default (0.02) makes every attention row nearly uniform in a model this small;
    # 0.1 gives logits with a spread of order 1, so a selection is not a coin toss.
    initializer_range: float = 0.1
    attn_implementation: str = "eager"
    # Example shapes used for export: prompt length and the cache length decode sees.
    batch: int = 1
    prefill_len: int = 64
    decode_cache_len: int = 64

    def llama_config(self):
        from transformers import LlamaConfig

        cfg = LlamaConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
            rope_theta=self.rope_theta,
            rms_norm_eps=self.rms_norm_eps,
            initializer_range=self.initializer_range,
            tie_word_embeddings=False,
            attention_bias=False,
            mlp_bias=False,
            hidden_act="silu",
        )
        cfg._attn_implementation = self.attn_implementation
        return cfg


def build_model(spec: TinyLlamaSpec = TinyLlamaSpec()):
    """The random-weight ``LlamaForCausalLM`` for ``spec`` (f32, eval mode, CPU)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(spec.llama_config())
    model.eval()
    model.to(torch.float32)
    return model


def persist_buffers(module: nn.Module) -> nn.Module:
    """Mark every buffer persistent (numerics unchanged).

    torch.export puts non-persistent buffers (here the RoPE ``inv_freq``) into
    ``ExportedProgram.constants``, but torch-mlir 20261001's ``import_frozen_program`` looks
    buffers up in ``state_dict`` only and fails with "Could not find state mapping for buffer".
    """
    for sub in module.modules():
        sub._non_persistent_buffers_set.clear()
    return module


def _cache_tensors(cache, num_layers):
    out = []
    for i in range(num_layers):
        layer = cache.layers[i]
        out.extend([layer.keys, layer.values])
    return tuple(out)


class Prefill(nn.Module):
    """``ids [B, L] -> (logits, k0, v0, k1, v1, ...)``."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.num_layers = model.config.num_hidden_layers

    def forward(self, ids):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        out = self.model(input_ids=ids, cache=cache, use_cache=True)
        return (out.logits,) + _cache_tensors(cache, self.num_layers)


class Decode(nn.Module):
    """``(id [B, 1], position [1], k0, v0, ...) -> (logits, k0', v0', ...)``."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.num_layers = model.config.num_hidden_layers

    def forward(self, ids, position, *kv):
        from transformers import DynamicCache

        assert len(kv) == 2 * self.num_layers
        cache = DynamicCache(config=self.model.config)
        for i in range(self.num_layers):
            cache.update(kv[2 * i], kv[2 * i + 1], i)
        position_ids = position.reshape(1, 1).expand(ids.shape[0], 1)
        out = self.model(input_ids=ids, position_ids=position_ids, cache=cache, use_cache=True)
        return (out.logits,) + _cache_tensors(cache, self.num_layers)


def example_inputs(spec: TinyLlamaSpec = TinyLlamaSpec(), seed: int = 1):
    """Deterministic example inputs ``(prefill_args, decode_args)`` of the export shapes.

    Only their shapes and dtypes matter to the export; the decode K/V are random.
    """
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, spec.vocab_size, (spec.batch, spec.prefill_len), generator=g)
    tok = torch.randint(0, spec.vocab_size, (spec.batch, 1), generator=g)
    pos = torch.tensor([spec.decode_cache_len], dtype=torch.int64)
    shape = (spec.batch, spec.num_key_value_heads, spec.decode_cache_len, spec.head_dim)
    kv = tuple(torch.randn(shape, generator=g) for _ in range(2 * spec.num_hidden_layers))
    return (ids,), (tok, pos) + kv
