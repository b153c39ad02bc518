"""Tiny random-weight HuggingFace models of several Llama-family architectures, exported like
the bundled tiny Llama (``export.py``), for the model rewrite's tests.

The bundled fixture has head_dim 16 and eager attention; real checkpoints have head_dim 128
(whose scale ``1/sqrt(128)`` is inexact in f32, so the importer writes it as an f64 constant
with ``arith.truncf``) and HuggingFace's default SDPA attention (whose decomposition splits the
scale over Q and K and guards fully masked rows). :class:`FamilySpec` describes one such model:
family (``llama``, ``qwen2`` with q/k/v bias, ``mistral``, ``gemma2`` with logit softcapping),
attention implementation, sliding window, sizes. Weights are drawn after
``torch.manual_seed(seed)``; nothing is downloaded.

    from snapkv.frontend import families
    spec = families.FamilySpec("qwen2", "sdpa", num_hidden_layers=2)
    text = families.export_text(spec, dynamic=True)   # @prefill and @decode

``scripts/gen-model-attention-tests.py`` writes the lit fixtures of
``test/Transforms/Inputs/models/`` with it; ``python/tests/test_model_families.py`` runs the
rewritten models end to end.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from . import model as wrappers
from .export import _dynamic_shapes, import_functions, versions
from .model import Decode, Prefill, persist_buffers

FAMILIES = ("llama", "qwen2", "mistral", "gemma2")


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    """Everything that determines one exported model."""

    family: str = "llama"
    attn_implementation: str = "sdpa"
    num_hidden_layers: int = 1
    vocab_size: int = 64
    hidden_size: int = 32
    intermediate_size: int = 64
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 128
    # Mistral / Gemma-2: the sliding window (None: full attention).
    sliding_window: Optional[int] = None
    seed: int = 0
    # As in TinyLlamaSpec: large enough that attention rows are not uniform.
    initializer_range: float = 0.1
    max_position_embeddings: int = 4096
    # Example shapes of the export: batch, prompt length and decode's cache length.
    batch: int = 1
    prefill_len: int = 16
    decode_cache_len: int = 16

    def config(self):
        import transformers

        if self.family not in FAMILIES:
            raise ValueError(f"unknown family {self.family!r} (one of {', '.join(FAMILIES)})")
        common = dict(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                      intermediate_size=self.intermediate_size,
                      num_hidden_layers=self.num_hidden_layers,
                      num_attention_heads=self.num_attention_heads,
                      num_key_value_heads=self.num_key_value_heads, head_dim=self.head_dim,
                      max_position_embeddings=self.max_position_embeddings,
                      initializer_range=self.initializer_range, tie_word_embeddings=False)
        if self.family == "llama":
            cfg = transformers.LlamaConfig(**common)
        elif self.family == "qwen2":
            # Qwen2's q/k/v projections always have a bias.
            cfg = transformers.Qwen2Config(**common)
        elif self.family == "mistral":
            cfg = transformers.MistralConfig(**common, sliding_window=self.sliding_window)
        else:
            cfg = transformers.Gemma2Config(**common, sliding_window=self.sliding_window or 4096)
        cfg._attn_implementation = self.attn_implementation
        return cfg

    @property
    def name(self) -> str:
        window = f"_window{self.sliding_window}" if self.sliding_window else ""
        return f"{self.family}_{self.attn_implementation}{window}"


def build_model(spec: FamilySpec):
    """The random-weight ``*ForCausalLM`` for ``spec`` (f32, eval mode, CPU)."""
    import transformers

    classes = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
               "mistral": transformers.MistralForCausalLM,
               "gemma2": transformers.Gemma2ForCausalLM}
    torch.manual_seed(spec.seed)
    model = classes[spec.family](spec.config())
    model.eval()
    return model.to(torch.float32)


def example_inputs(spec: FamilySpec, seed: int = 1):
    """``(prefill_args, decode_args)`` of the export shapes (only shapes and dtypes matter)."""
    return wrappers.example_inputs(spec, seed)


def dynamic_shapes(spec: FamilySpec):
    """Dynamic prompt and cache lengths, as for the bundled fixture."""
    if spec.sliding_window:
        # HF's sliding-window cache keeps the last W - 1 rows; torch.export only traces the
        # branch where nothing is dropped yet.
        spec = dataclasses.replace(spec, max_position_embeddings=min(
            spec.max_position_embeddings, spec.sliding_window - 1))
    return _dynamic_shapes(spec)


def export_text(spec: FamilySpec, dynamic: bool = False, model=None,
                with_decode: bool = True) -> str:
    """One module with ``@prefill`` and ``@decode`` (``model.Prefill``/``Decode`` signatures;
    ``with_decode=False``: prefill only), with a header comment that records ``spec`` and
    the package versions."""
    model = persist_buffers(model if model is not None else build_model(spec))
    prefill_args, decode_args = example_inputs(spec)
    prefill_dyn, decode_dyn = dynamic_shapes(spec) if dynamic else (None, None)
    functions = [("prefill", Prefill(model), prefill_args, prefill_dyn)]
    if with_decode:
        functions.append(("decode", Decode(model), decode_args, decode_dyn))
    text = import_functions(functions)
    fields = ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(spec).items())
    pins = ", ".join(f"{k} {v}" for k, v in versions().items())
    return (f"// snapkv.frontend.families.export_text(FamilySpec({fields}), "
            f"dynamic={dynamic}, with_decode={with_decode})\n// {pins}\n" + text)
