"""SnapKV KV-cache selection: a numpy reference (docs/semantics.md) and helpers that compile
generated modules (``snapkv-opt``, ``snapkv-translate``, clang) and call them in process;
:class:`Engine` (:mod:`snapkv.serving`) serves many sequences on one compiled model."""

from .dtypes import bf16_to_f32, f32_to_bf16
from .reference import Selection, select

__all__ = ["Engine", "SamplingParams", "Selection", "bf16_to_f32", "f32_to_bf16", "select"]


def __getattr__(name):
    # The serving engine loads the runtime: imported when asked for, not with the package.
    if name in ("Engine", "SamplingParams"):
        from . import serving

        return getattr(serving, name)
    raise AttributeError(f"module 'snapkv' has no attribute {name!r}")
