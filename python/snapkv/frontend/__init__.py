"""Frontend: a tiny random-weight HuggingFace Llama (GQA) exported with torch-mlir's FX
importer to `linalg-on-tensors` MLIR, as the `@prefill` and `@decode` functions that the
model rewrite (`snapkv-compress-kv-cache`) works on.

* `snapkv.frontend.model`   -- the config and the Prefill/Decode wrappers (needs torch,
  transformers);
* `snapkv.frontend.export`  -- `python -m snapkv.frontend.export --out test/Models` regenerates
  the fixtures (needs torch, transformers, torch-mlir);
* `snapkv.frontend.harness` -- compiles a fixture with our lowering or upstream's and runs its
  prefill + decode in process (needs numpy and the tools only).

Nothing is imported here, so `import snapkv.frontend.harness` works without torch.
"""

__all__ = ["export", "harness", "model"]
