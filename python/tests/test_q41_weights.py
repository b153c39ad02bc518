"""Q4_1 projection weights kept quantized (`weights="as-stored"` on the shipped SmolLM2 file,
snapkv-quantize-weights `format=q4_1`).

* `Q41Tensor` reads gguf-py's Q4_1 bytes and dequantizes them exactly as gguf-py does (the
  values our f32 checkpoint holds), and `from_gguf` reads Q4_1 tensors in the checkpoint's row
  order (q/k un-permuted);
* the compiled one-row product (nibbles unpacked and multiply-added in vectors) is, bit for
  bit, `q41_reference`: the same f32 arithmetic in numpy, in the same order;
* the tiny Llama checkpoint with every projection in Q4_1 and the tied-style lm_head in Q8_0
  (the shipped file's mix) generates the tokens of the f32 model bound to the dequantized
  weights, logits within QUANT_ATOL (only the summation order differs);
* int8 activations (`activations="i8"`, llama.cpp's Q4_1 x Q8_1): the compiled kernel, with
  vpdpbusd and with the fallback, is the integer arithmetic of `q41_int8_reference`; the tiny
  model's greedy steps against f32's;
* bad input: a format the pass does not take, a module taking a weight as Q4_1 bound to a
  Q8_0 tensor.
"""

import ctypes

import numpy as np
import pytest
from conftest import require_aot_tools
from test_quantized_weights import (
    I8_MODULE,
    QUANT_ATOL,
    STEPS,
    assert_greedy_steps_close,
    llama_permute,
    quantize_activations,
    write_gguf,
)

from snapkv import hf, interface, runtime, tools
from snapkv.frontend import quantized
from snapkv.frontend.checkpoint import WeightRef

# The int8-activation model's logits against f32's: the activations' rounding (up to s / 2
# each, as for Q8_0's I8_ATOL of 0.3), here through Q4_1's weights (measured: at most 0.43 over
# the 7 steps; Q8_0 weights on the same model, 0.21 before their tokens part at step 2).
Q41_I8_ATOL = 0.5
# snapkv-parallelize's default reduction-parts: a one-row product's blocks in that many parts.
PARTS = 8


def test_q41_tensor_is_gguf_py_q4_1():
    gguf = pytest.importorskip("gguf")
    weight = np.random.default_rng(0).normal(0, 0.5, (8, 96)).astype(np.float32)
    weight[1, :32] = 0.25  # a constant block: scale 0
    raw = gguf.quants.quantize(weight, gguf.GGMLQuantizationType.Q4_1)
    tensor = quantized.Q41Tensor.from_blocks(raw, 8)
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_1).reshape(8, 96)
    assert np.array_equal(tensor.dequantize(), want)
    assert np.array_equal(quantized.quantize_q4_1(weight).packed, tensor.packed)
    # Value j of a block is the low nibble of its byte j, value 16 + j the high nibble.
    q = tensor.nibbles()
    assert q.max() <= 15 and np.array_equal(q[:, 16:32], tensor.packed[:, :16] >> 4)
    # The bound bytes: [K/2, N], each block's 16 bytes down the rows.
    assert np.array_equal(tensor.bound("q4_1").view(np.uint8)[:16, 3], tensor.packed[3, :16])
    assert tensor.bound("q4_1_mins").shape == (3, 8)
    with pytest.raises(quantized.QuantizedError, match="multiple of 32"):
        quantized.quantize_q4_1(weight[:, :40])


def test_from_gguf_reads_q4_1(tmp_path):
    pytest.importorskip("gguf")
    rng = np.random.default_rng(1)
    config = dict(num_attention_heads=2, num_key_value_heads=1)
    q = rng.normal(0, 1, (8, 64)).astype(np.float32)
    up = rng.normal(0, 1, (16, 64)).astype(np.float32)

    path = tmp_path / "t.gguf"
    write_gguf(path, [("blk.0.attn_q.weight", llama_permute(q, 2), "Q4_1"),
                      ("blk.0.ffn_up.weight", up, "Q4_1"),
                      ("token_embd.weight", up, "Q8_0")])
    read = quantized.from_gguf(path, config, "llama")
    assert {name: t.format for name, t in read.items()} == {
        "model.layers.0.self_attn.q_proj.weight": "q4_1",
        "model.layers.0.mlp.up_proj.weight": "q4_1", "model.embed_tokens.weight": "q8_0"}
    for name, want in (("self_attn.q_proj", q), ("mlp.up_proj", up)):
        got = read[f"model.layers.0.{name}.weight"]
        assert np.array_equal(got.dequantize(), quantized.quantize_q4_1(want).dequantize())
    weights = quantized.QuantizedWeights(None, read)
    assert quantized.pass_arg("float", weights.formats) == (
        "--snapkv-quantize-weights=format=q4_1 weight-formats=model.embed_tokens.weight:q8_0")


def _fma(a, b, c):
    """f32 fma(a, b, c), exact products and one rounding (f64 holds these sums exactly)."""
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)


def q41_reference(x, tensor, parts):
    """The compiled one-row product in numpy, operation for operation: the blocks in `parts`
    contiguous parts, each from zero; per block, sums = fma(x[j], q[j], sums) then fma(x[16
    + j], q[16 + j], sums) for j < 16, the activations' sum in that order, then out =
    fma(sums, d, fma(m, sum x, out)); the parts added in order."""
    q = tensor.nibbles().T.astype(np.float32)          # [K, N]
    d, m = tensor.scales.T, tensor.mins.T               # [K/32, N]
    blocks = len(d)
    per = blocks // parts
    result = np.zeros(q.shape[1], np.float32)
    for part in range(parts):
        out = np.zeros(q.shape[1], np.float32)
        for block in range(part * per, (part + 1) * per):
            sums = np.zeros(q.shape[1], np.float32)
            total = np.float32(0)
            for j in range(16):
                low, high = x[32 * block + j], x[32 * block + 16 + j]
                sums = _fma(low, q[32 * block + j], sums)
                sums = _fma(high, q[32 * block + 16 + j], sums)
                total = np.float32(np.float32(total + low) + high)
            out = _fma(sums, d[block], _fma(m[block], total, out))
        result = (result + out).astype(np.float32)
    return result


@pytest.mark.parametrize("k,n", [(512, 192), (256, 4096)])
def test_q41_kernel_is_the_numpy_arithmetic(k, n):
    """The compiled one-row Q4_1 product, bit for bit q41_reference (`n` 4,096: two chunks
    of 2,048 columns); a fused multiply-add rounded differently would differ in the last
    bits."""
    require_aot_tools()
    rng = np.random.default_rng(5)
    text = tools.opt([quantized.pass_arg("float", {"w": "q4_1"})],
                     text=I8_MODULE.format(m=1, k=k, n=n, rows="")).stdout
    lib = runtime.compile_library(text, label="q4_1", pipeline=runtime.PIPELINE)
    fn = runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "mv",
                                  runtime.signature(text, "mv"))
    tensor = quantized.quantize_q4_1(rng.normal(0, 1, (n, k)).astype(np.float32))
    x = rng.normal(0, 1, k).astype(np.float32)
    (got,) = fn(x[None], *(tensor.bound(p) for p in ("q4_1", "q4_1_scales", "q4_1_mins")))
    want = q41_reference(x, tensor, min(PARTS, k // 32))
    assert np.array_equal(got[0], want), np.abs(got[0] - want).max()
    exact = tensor.dequantize().astype(np.float64) @ x.astype(np.float64)
    assert np.abs(got[0] - exact).max() <= 1e-5 * np.abs(exact).max()


@pytest.fixture(scope="module")
def tiny():
    """The tiny Llama checkpoint, its export, its projections in Q4_1 and lm_head in Q8_0."""
    require_aot_tools()
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch_mlir")
    pytest.importorskip("gguf")
    from test_hf_models import COMMON, checkpoint_dir

    folder = checkpoint_dir("llama", lambda: transformers.LlamaConfig(**COMMON))
    checkpoint = hf.Checkpoint(folder)
    exported = hf.export(checkpoint)
    tensors = {name: (quantized.quantize_q8_0 if name == "lm_head.weight"
                      else quantized.quantize_q4_1)(checkpoint.array(name))
               for name in checkpoint.tensors
               if name.endswith(("_proj.weight", "lm_head.weight"))}
    return checkpoint, exported, tensors


def _dequantized_model(tiny):
    """The f32 tiny model bound to the dequantized weights."""
    checkpoint, exported, tensors = tiny
    plain = {name: np.asarray(checkpoint.array(name)) for name in checkpoint.tensors}
    plain.update({name: t.dequantize() for name, t in tensors.items()})
    return runtime.CompiledModel(exported.text, weights=plain, cflags=("-O0",))


def test_q41_model_generates_the_dequantized_models_tokens(tiny):
    checkpoint, exported, tensors = tiny
    weights = quantized.QuantizedWeights(checkpoint, tensors)
    text = hf.quantize_weights(exported.text, formats=weights.formats)
    described = interface.describe(text).function("decode")
    parts = {a.quantized for a in described.arguments if a.weight}
    assert parts == {None, "q4_1", "q4_1_scales", "q4_1_mins", "q8_0", "q8_0_scales"}
    taken = {a.weight: a.quantized for a in described.arguments
             if a.quantized in ("q4_1", "q8_0")}
    assert taken == {name: t.format for name, t in tensors.items()}

    reference = _dequantized_model(tiny)
    model = runtime.CompiledModel(text, weights=weights, cflags=("-O0",))
    ids = np.random.default_rng(7).integers(0, 256, (1, 24)).astype(np.int64)
    want, got = reference.generate(ids, STEPS), model.generate(ids, STEPS)
    diff = np.abs(got["logits"] - want["logits"]).max()
    assert got["tokens"] == want["tokens"], f"max |diff| {diff}"
    assert diff <= QUANT_ATOL, f"max |diff| {diff}"
    # The Q4_1 weights bound: half a byte per value, plus an f32 scale and min per 32.
    q_bytes = sum(a.nbytes for ref, a in model.weights.items()
                  if ref.quantized and ref.quantized.startswith("q4_1"))
    f_bytes = sum(a.nbytes for ref, a in reference.weights.items()
                  if ref.name in tensors and tensors[ref.name].format == "q4_1")
    assert q_bytes == f_bytes // 8 + 2 * f_bytes // 32


def test_q41_bad_input(tiny):
    checkpoint, exported, tensors = tiny
    done = tools.opt(["--snapkv-quantize-weights=format=q4_0"], text=exported.text,
                     checked=False)
    assert done.returncode != 0 and "format must be q8_0 or q4_1, got 'q4_0'" in done.stderr
    done = tools.opt(["--snapkv-quantize-weights=weight-formats=lm_head.weight:q5_1"],
                     text=exported.text, checked=False)
    assert done.returncode != 0 and \
        "weight-formats takes NAME:FORMAT entries with FORMAT q8_0 or q4_1, got " \
        "'lm_head.weight:q5_1'" in done.stderr
    name = "model.layers.0.self_attn.q_proj.weight"
    mixed = dict(tensors, **{name: quantized.quantize_q8_0(checkpoint.array(name))})
    with pytest.raises(quantized.QuantizedError, match="takes it as Q4_1, but x.gguf holds "
                                                       "it as Q8_0"):
        quantized.QuantizedWeights(checkpoint, mixed, source="x.gguf").bind(
            WeightRef(name, True, "q4_1_mins"), (2, 64))


def q41_int8_reference(x, tensor):
    """The integer arithmetic of a Q4_1 product with `activations="i8"` in numpy: `x`
    quantized per block (quantize_activations: scale s, values a), then per block and column
    the exact sums `sum q * a` and `sum a`, and the terms `sum_qa * f32(s * d)` and `f32(s *
    sum_a) * m`. Returns (the result in f64 from those terms, the sum of their magnitudes)."""
    s, a = quantize_activations(x)
    q = tensor.nibbles().T.astype(np.int64).reshape(len(s), 32, -1)   # [K/32, 32, N]
    sums = np.einsum("bk,bkn->bn", a, q)
    d, m = tensor.scales.T, tensor.mins.T
    scale = (s[:, None] * d).astype(np.float32).astype(np.float64)
    shift = (a.sum(axis=1).astype(np.float32) * s).astype(np.float32).astype(np.float64)
    terms = np.concatenate([sums * scale, shift[:, None] * m.astype(np.float64)])
    return terms.sum(axis=0), np.abs(terms).sum(axis=0)


@pytest.mark.parametrize("features", ["host", "-avx512vnni"])
def test_q41_int8_kernel_is_the_integer_arithmetic(features):
    """The compiled one-row Q4_1 product with int8 activations, with vpdpbusd where this CPU
    has AVX512_VNNI (`host`) and with the fallback (forced off), against q41_int8_reference:
    the block sums are exact integers, so only the f32 rounding of the per-block
    multiply-adds differs (a few ulps of the terms' magnitude); a nibble or an activation
    taken wrong would be off by far more. Rows with halves, a block of zeros and one of a
    single value."""
    require_aot_tools()
    k, n = 256, 192
    rng = np.random.default_rng(12)
    text = tools.opt([quantized.pass_arg("i8", {"w": "q4_1"})],
                     text=I8_MODULE.format(m=1, k=k, n=n, rows="")).stdout
    pipeline = runtime.PIPELINE.replace("asserts=report",
                                        f"asserts=report cpu-features={features}")
    lib = runtime.compile_library(text, label="q4_1-int8", pipeline=pipeline)
    fn = runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "mv",
                                  runtime.signature(text, "mv"))
    tensor = quantized.quantize_q4_1(rng.normal(0, 1, (n, k)).astype(np.float32))
    for trial in range(3):
        x = rng.normal(0, 1 + 10 * trial, k).astype(np.float32)
        x[:32] = 0
        x[32:64] = -3.25
        x[64:96] = np.resize(np.float32([127, 2.5, -2.5, 0.5, -0.5, 1.5, 126.5, -127]), 32)
        (got,) = fn(x[None], *(tensor.bound(p) for p in ("q4_1", "q4_1_scales",
                                                          "q4_1_mins")))
        want, magnitude = q41_int8_reference(x, tensor)
        err = np.abs(got[0].astype(np.float64) - want)
        assert np.all(err <= 4e-7 * magnitude + 1e-30), \
            f"{features}: max relative error {(err / magnitude).max():.3g}"


def test_q41_int8_activations_model(tiny):
    """The tiny Q4_1 model with activations="i8" against the f32 model bound to the
    dequantized weights, greedy, as test_int8_activations_model does for Q8_0: while both
    have generated the same tokens, each step's logits are within Q41_I8_ATOL and its token
    is the same wherever the reference's top two logits are more than 2 x Q41_I8_ATOL
    apart."""
    checkpoint, exported, tensors = tiny
    weights = quantized.QuantizedWeights(checkpoint, tensors)
    text = hf.quantize_weights(exported.text, "i8", weights.formats)
    model = runtime.CompiledModel(text, weights=weights, cflags=("-O0",))
    assert_greedy_steps_close(_dequantized_model(tiny), model, Q41_I8_ATOL)
