"""SnapKV KV-cache selection: a numpy reference (docs/semantics.md) and helpers that compile
generated modules (``snapkv-opt``, ``snapkv-translate``, clang) and call them in process."""

from .dtypes import bf16_to_f32, f32_to_bf16
from .reference import Selection, select

__all__ = ["Selection", "bf16_to_f32", "f32_to_bf16", "select"]
