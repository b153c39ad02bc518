"""snapkv-pack-weights (in --snapkv-cpu-pipeline) changes where a wide prefill projection's
weights are read from, not what is summed: the packed product must give the unpacked one's
bits. 37 rows (not a multiple of any register tile), K = 300 (two reduction blocks of 256,
the last partial), N = 2048 (the smallest width packed by default, 32 panels)."""

import ctypes

import numpy as np
from conftest import require_aot_tools

from snapkv import runtime, tools

M, K, N = 37, 300, 2048

MODULE = f"""module {{
  func.func @proj(%x: tensor<?x{K}xf32>, %w: tensor<{K}x{N}xf32>) -> tensor<?x{N}xf32> {{
    %zero = arith.constant 0.0 : f32
    %c0 = arith.constant 0 : index
    %m = tensor.dim %x, %c0 : tensor<?x{K}xf32>
    %e = tensor.empty(%m) : tensor<?x{N}xf32>
    %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x{N}xf32>) -> tensor<?x{N}xf32>
    %r = linalg.matmul ins(%x, %w : tensor<?x{K}xf32>, tensor<{K}x{N}xf32>)
        outs(%f : tensor<?x{N}xf32>) -> tensor<?x{N}xf32>
    return %r : tensor<?x{N}xf32>
  }}
}}
"""


def test_packed_and_unpacked_projections_give_the_same_bits():
    require_aot_tools()
    unpacked = runtime.PIPELINE.replace("asserts=report", "asserts=report pack-weights=false")
    assert unpacked != runtime.PIPELINE
    # The default pipeline packs this weight (a transpose into panels), the other does not.
    lowered = {name: tools.opt([f"--pass-pipeline={pipeline}"], text=MODULE).stdout
               for name, pipeline in (("packed", runtime.PIPELINE), ("unpacked", unpacked))}
    assert lowered["packed"] != lowered["unpacked"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((K, N)).astype(np.float32)
    results = []
    for pipeline in (runtime.PIPELINE, unpacked):
        lib = runtime.compile_library(MODULE, label="projection", pipeline=pipeline)
        fn = runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "proj",
                                      runtime.signature(MODULE, "proj"))
        (out,) = fn(x, w)
        results.append(out)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_allclose(results[0], x.astype(np.float64) @ w, rtol=1e-4, atol=1e-3)
