"""The Python side of `snapkv generate`: rewrite a model with snapkv-opt, compile it ahead of
time with snapkv.runtime, and decode with the compacted cache.

    python examples/python_api.py        # from the repository root, after `make build`

The compiled library is cached (~/.cache/snapkv/runner), so only the first run takes ~20 s.
"""

import subprocess

import numpy as np

from snapkv.runtime import CompiledModel
from snapkv.tools import REPO, snapkv_opt

MODEL = REPO / "test" / "Models" / "tiny_llama_dynamic.mlir"

# 1. The model rewrite (docs/model-rewrite.md); strict=true: a refusal is an error.
rewritten = subprocess.run(
    [str(snapkv_opt()), str(MODEL),
     "--snapkv-compress-kv-cache=window=8 capacity=16 gqa=expand strict=true"],
    check=True, capture_output=True, text=True).stdout

# 2. Compile @prefill and @decode to a shared library and load it (ctypes).
model = CompiledModel(rewritten)
print(f"library: {model.library.path} ({'cached' if model.from_cache else 'compiled'})")
print(f"decode's cache arguments: {[str(t) for t in model.cache_types]}")

# 3. Greedy decoding: prefill a 64-token prompt, then 8 decode steps.
ids = np.random.default_rng(0).integers(0, model.vocab_size, (1, 64))
out = model.generate(ids, steps=8)
print(f"tokens:           {out['tokens']}")
print(f"logical lengths:  {out['logical_lengths']}   (what RoPE counts)")
print(f"physical lengths: {out['physical_lengths']}   (cache rows: min(L, C) + g)")
print(f"cache shape after the last step: {out['cache_shapes']}")
