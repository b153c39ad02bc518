"""Fixture paths and small MLIR modules that several test_runtime_*.py files use (imported
like conftest: pytest puts this directory on sys.path)."""

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "test" / "Models"
DYNAMIC = MODELS / "tiny_llama_dynamic.mlir"
EXAMPLE = json.loads((MODELS / "tiny_llama.json").read_text())["examples"][DYNAMIC.name]
LAYERS = REPO / "test" / "Transforms" / "Inputs" / "models" / "llama_layers.mlir"


def layers_text() -> str:
    """LAYERS: @prefill/@decode that only call layer functions (as `snapkv export --hf` writes
    them). The fixture leaves out the importer's resource blob (RoPE's inverse frequencies)."""
    return LAYERS.read_text().replace("dense_resource<torch_tensor_64_torch.float32>",
                                      "dense<0.125>")


def random_weights(text: str, seed: int = 0) -> dict:
    """{checkpoint name: array} for every weight argument of @prefill in `text`, random with a
    fixed seed; transposed weights ([in, out] arguments) in checkpoint shape, [out, in]."""
    import numpy as np

    from snapkv import runtime

    rng = np.random.default_rng(seed)
    sig = runtime.signature(text, "prefill")
    return {ref.name: rng.standard_normal(t.shape[::-1] if ref.transposed else t.shape)
            .astype(np.float32) * 0.3 for ref, t in sig.weight_args}


# Returns an argument, a constant and one value twice (result ownership, freeing).
OWNERSHIP = """
func.func @f(%a: tensor<?xf32>) -> (tensor<?xf32>, tensor<4xf32>, tensor<?xf32>, tensor<?xf32>) {
  %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xf32>
  %e = tensor.empty(%n) : tensor<?xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%a : tensor<?xf32>)
                       outs(%e : tensor<?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<?xf32>
  return %a, %c, %s, %s : tensor<?xf32>, tensor<4xf32>, tensor<?xf32>, tensor<?xf32>
}
"""

# Allocates as many f32 as its argument says (a failed allocation is a failed check).
ALLOC = """
func.func @f(%n: tensor<1xi64>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %v = tensor.extract %n[%c0] : tensor<1xi64>
  %size = arith.index_cast %v : i64 to index
  %e = tensor.empty(%size) : tensor<?xf32>
  %one = arith.constant 1.0 : f32
  %f = linalg.fill ins(%one : f32) outs(%e : tensor<?xf32>) -> tensor<?xf32>
  return %f : tensor<?xf32>
}
"""
