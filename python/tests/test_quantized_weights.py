"""Q8_0 projection weights kept quantized (`weights="as-stored"`, snapkv-quantize-weights).

* our Q8_0 quantizer is gguf-py's (the reference llama.cpp's `quantize` follows), byte for
  byte, and `from_gguf` reads a GGUF's Q8_0 tensors back in the checkpoint's row order (the
  q/k rows llama.cpp permutes for its rotary layout un-permuted);
* a tiny Llama checkpoint (test_hf_models' "llama", 2 layers) with every projection quantized
  by our quantizer, compiled with the weights as int8 + scales, generates the tokens of the
  same model compiled in f32 with the dequantized weights, logits within QUANT_ATOL. The
  dequantized weight is exact in f32 (an f16 scale times an int8); only the rounding of the
  sums differs (the int8 contraction sums each 32-row block before its scale, in parts of
  whole blocks, against the f32 matmul's parts); on SmolLM2's Q8_0 file the logits were
  within 1.2e-4 of f32's (docs/benchmarks.md), and these two layers' logits are far smaller;
* the same with dtype bf16 (bf16 activations and caches), against the bf16 model bound to
  the dequantized weights;
* bad input: an unknown `weights`, dtype f16 with as-stored, a quantized module bound
  to plain weights, a GGUF whose projections are not Q8_0 (falls back to f32, says so);
* int8 activations (`activations="i8"`): the compiled one-row and several-row kernels, with
  vpdpbusd and with the fallback, on the values packed by 4 rows, are the integer arithmetic
  of a numpy reference; the tiny model's greedy steps against f32's; an unknown choice, or
  i8 without as-stored, is refused.
"""

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import dtypes, hf, interface, runtime
from snapkv.frontend import quantized
from snapkv.frontend.checkpoint import WeightRef

QUANT_ATOL = 1e-4
BF16_ATOL = 0.0625
STEPS = 6
I8_ATOL = 0.75


def test_quantizer_is_gguf_py_q8_0():
    gguf = pytest.importorskip("gguf")
    weight = np.random.default_rng(0).normal(0, 0.5, (8, 96)).astype(np.float32)
    weight[1, :32] = 0  # an all-zero block: scale 0, values 0
    mine = quantized.quantize_q8_0(weight)
    theirs = gguf.quants.quantize(weight, gguf.GGMLQuantizationType.Q8_0)
    blocks = theirs.reshape(8, 3, 34)
    assert np.array_equal(blocks[:, :, 2:].copy().view(np.int8).reshape(8, 96), mine.values)
    assert np.array_equal(blocks[:, :, :2].copy().view(np.float16)[:, :, 0].astype(np.float32),
                          mine.scales)
    assert np.abs(mine.dequantize() - weight).max() <= mine.scales.max() / 2 * 1.001
    with pytest.raises(quantized.QuantizedError, match="multiple of 32"):
        quantized.quantize_q8_0(weight[:, :40])


def llama_permute(rows, heads):
    """llama.cpp's convert_hf_to_gguf permutation of a q or k projection's rows."""
    return rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:]) \
        .swapaxes(1, 2).reshape(rows.shape)


def write_gguf(path, tensors):
    """A llama GGUF file at `path` of `tensors`: (name, array, GGML type name or None for
    the array as it is)."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, array, kind in tensors:
        if kind is None:
            writer.add_tensor(name, array)
        else:
            kind = getattr(gguf.GGMLQuantizationType, kind)
            writer.add_tensor(name, gguf.quants.quantize(array, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_from_gguf_unpermutes_q_and_k(tmp_path):
    pytest.importorskip("gguf")
    rng = np.random.default_rng(1)
    config = dict(num_attention_heads=2, num_key_value_heads=1)
    q = rng.normal(0, 1, (8, 64)).astype(np.float32)   # 2 heads of 4 rows
    k = rng.normal(0, 1, (4, 64)).astype(np.float32)   # 1 kv head
    up = rng.normal(0, 1, (16, 64)).astype(np.float32)

    path = tmp_path / "t.gguf"
    write_gguf(path, [("blk.0.attn_q.weight", llama_permute(q, 2), "Q8_0"),
                      ("blk.0.attn_k.weight", llama_permute(k, 1), "Q8_0"),
                      ("blk.0.ffn_up.weight", up, "Q8_0"),
                      ("blk.0.attn_norm.weight", np.ones(64, np.float32), None)])
    read = quantized.from_gguf(path, config, "llama")
    assert sorted(read) == ["model.layers.0.mlp.up_proj.weight",
                            "model.layers.0.self_attn.k_proj.weight",
                            "model.layers.0.self_attn.q_proj.weight"]
    for name, want in (("self_attn.q_proj", q), ("self_attn.k_proj", k), ("mlp.up_proj", up)):
        got = read[f"model.layers.0.{name}.weight"]
        assert np.array_equal(got.values, quantized.quantize_q8_0(want).values), name


@pytest.fixture(scope="module")
def tiny():
    """The tiny Llama checkpoint, its export, and every projection quantized."""
    require_aot_tools()
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch_mlir")
    from test_hf_models import COMMON, checkpoint_dir

    folder = checkpoint_dir("llama", lambda: transformers.LlamaConfig(**COMMON))
    checkpoint = hf.Checkpoint(folder)
    exported = hf.export(checkpoint)
    tensors = {name: quantized.quantize_q8_0(checkpoint.array(name))
               for name in checkpoint.tensors
               if name.endswith(("_proj.weight", "lm_head.weight"))}
    return checkpoint, exported, tensors


def test_quantized_model_generates_the_dequantized_models_tokens(tiny):
    checkpoint, exported, tensors = tiny
    text = hf.quantize_weights(exported.text)
    described = interface.describe(text).function("decode")
    parts = {a.quantized for a in described.arguments if a.weight}
    assert parts == {None, "q8_0", "q8_0_scales"}
    taken = {a.weight for a in described.arguments if a.quantized}
    assert taken == set(tensors), "every projection and lm_head are taken as Q8_0"

    plain = {name: np.asarray(checkpoint.array(name)) for name in checkpoint.tensors}
    plain.update({name: t.dequantize() for name, t in tensors.items()})
    reference = runtime.CompiledModel(exported.text, weights=plain, cflags=("-O0",))
    model = runtime.CompiledModel(text, weights=quantized.QuantizedWeights(checkpoint, tensors),
                                  cflags=("-O0",))
    ids = np.random.default_rng(7).integers(0, 256, (1, 24)).astype(np.int64)
    want, got = reference.generate(ids, STEPS), model.generate(ids, STEPS)
    diff = np.abs(got["logits"] - want["logits"]).max()
    assert got["tokens"] == want["tokens"], f"max |diff| {diff}"
    assert diff <= QUANT_ATOL, f"max |diff| {diff}"
    # The int8 values are bound, not f32: a quarter of the bytes, plus an f32 scale per 32.
    q_bytes = sum(a.nbytes for ref, a in model.weights.items() if ref.quantized)
    f_bytes = sum(a.nbytes for ref, a in reference.weights.items() if ref.name in tensors)
    assert q_bytes == f_bytes // 4 + f_bytes // 32


def test_bad_input(tiny, tmp_path):
    checkpoint, exported, tensors = tiny
    with pytest.raises(ValueError, match="weights must be one of f32, as-stored, got 'q4'"):
        hf.load(checkpoint, weights="q4")
    with pytest.raises(ValueError, match="goes with dtype f32 or bf16, not f16"):
        hf.load(checkpoint, weights="as-stored", options=hf.ExportOptions(dtype="f16"))
    with pytest.raises(ValueError, match="the weights given have none"):
        runtime.CompiledModel(hf.quantize_weights(exported.text), weights=checkpoint)
    # A checkpoint not converted from GGUF: as-stored falls back to its own weights.
    said = []
    assert quantized.as_stored(checkpoint, log=said.append) is None
    assert "was not converted from a GGUF file" in said[0]
    # A GGUF whose projections are Q4_0 (neither Q8_0 nor Q4_1): f32, said.
    fake = tmp_path / "ckpt"
    fake.mkdir()
    gguf = pytest.importorskip("gguf")
    file = tmp_path / "q4.gguf"
    writer = gguf.GGUFWriter(str(file), "llama")
    data = gguf.quants.quantize(np.ones((4, 64), np.float32), gguf.GGMLQuantizationType.Q4_0)
    writer.add_tensor("blk.0.attn_q.weight", data, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    from snapkv import models

    (fake / models.MARKER).write_text(f'{{"source": "{file}", "architecture": "llama"}}')

    class Fake:
        path = fake

    said.clear()
    assert quantized.as_stored(Fake(), log=said.append) is None
    assert "holds Q4_0 projection weights; only Q8_0 and Q4_1 ones are kept quantized" \
        in said[0]
    with pytest.raises(quantized.QuantizedError, match="holds no Q8_0 or Q4_1 tensor"):
        quantized.QuantizedWeights(checkpoint, {}, source="x.gguf").bind(
            WeightRef("model.layers.0.self_attn.q_proj.weight", True, "q8_0"), (64, 512))


def test_cli_weights(tiny, tmp_path):
    """`--weights`: the choices, as-stored with f16 refused, a checkpoint not converted from
    GGUF compiled with its own weights (f32 or bf16) and said so."""
    from test_cli import snapkv

    checkpoint, _, _ = tiny
    done = snapkv("generate", checkpoint.path, "--weights", "q4")
    assert done.returncode == 2 and "invalid choice: 'q4'" in done.stderr, done.stderr
    common = ("compile", checkpoint.path, "--window", 8, "--capacity", 16, "-o",
              tmp_path / "m.mlir", "--weights", "as-stored")
    done = snapkv(*common, "--dtype", "f16")
    assert done.returncode != 0 and "goes with --dtype f32 or bf16, not f16" in done.stderr, \
        done.stderr
    for dtype in ("f32", "bf16"):
        done = snapkv(*common, "--dtype", dtype)
        assert done.returncode == 0, done.stderr
        assert "was not converted from a GGUF file" in done.stderr
        written = (tmp_path / "m.mlir").read_text()
        assert "snapkv.quantized" not in written and (dtype == "f32") != ("xbf16>" in written)


def test_bf16_model_with_quantized_weights(tiny):
    """dtype bf16 with as-stored weights: bf16 activations and caches, int8 + f32-scale
    weights. Against the f32 model with the dequantized weights, over the prompt and one
    decode step (the same token in): its logits are no further from f32's than the plain
    bf16 model's (bound to the dequantized weights, rounded to bf16) plus BF16_ATOL, one
    bf16 spacing at these logits (|logit| < 16). Greedy runs of the two bf16 models part
    after a few tokens on this random model (its top logits are a bf16 spacing or two
    apart), so tokens are compared for the first step only."""
    checkpoint, exported, tensors = tiny
    exported16 = hf.export(checkpoint, hf.ExportOptions(dtype="bf16"))
    text = hf.quantize_weights(exported16.text)
    described = interface.describe(text).function("decode")
    taken = {a.weight for a in described.arguments if a.quantized}
    assert taken == set(tensors), "every bf16 projection and lm_head are taken as Q8_0"
    plain = {name: np.asarray(checkpoint.array(name)) for name in checkpoint.tensors}
    plain.update({name: t.dequantize() for name, t in tensors.items()})
    f32 = runtime.CompiledModel(exported.text, weights=plain, cflags=("-O0",))
    bf16 = runtime.CompiledModel(
        exported16.text, cflags=("-O0",),
        weights={name: dtypes.from_float32(array, "bf16") for name, array in plain.items()})
    model = runtime.CompiledModel(text, weights=quantized.QuantizedWeights(checkpoint, tensors),
                                  cflags=("-O0",))
    ids = np.random.default_rng(7).integers(0, 256, (1, 24)).astype(np.int64)
    want, plain16, got = (m.generate(ids, 1) for m in (f32, bf16, model))
    assert got["tokens"][0] == plain16["tokens"][0] == want["tokens"][0]
    ours = np.abs(got["logits"] - want["logits"]).max()
    theirs = np.abs(plain16["logits"] - want["logits"]).max()
    assert np.abs(want["logits"]).max() < 16
    assert ours <= theirs + BF16_ATOL, f"max |diff| from f32 {ours}, plain bf16's {theirs}"


# int8 activations (`activations="i8"`, llama.cpp's form of a Q8_0 matrix product).
I8_MODULE = """
func.func @mv(%x: tensor<{m}x{k}xf32>, %w: tensor<{k}x{n}xf32> {{snapkv.weight = "w",
                                                           snapkv.transposed}})
    -> tensor<{m}x{n}xf32> {{
  %z = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %rows = tensor.dim %x, %c0 : tensor<{m}x{k}xf32>
  %e = tensor.empty({rows}) : tensor<{m}x{n}xf32>
  %c = linalg.fill ins(%z : f32) outs(%e : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %y = linalg.matmul ins(%x, %w : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>)
                     outs(%c : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %y : tensor<{m}x{n}xf32>
}}
"""


def test_pack_rows_is_linalg_pack_by_4_rows():
    """`[K, N]` -> `[K/4, N, 4]`, out[i, n, r] = values[4 i + r, n]; Q8Tensor binds it."""
    values = np.arange(8 * 3, dtype=np.int64).reshape(8, 3).astype(np.int8)
    packed = quantized.pack_rows(values)
    assert packed.shape == (2, 3, 4) and packed.flags.c_contiguous
    for i, n, r in np.ndindex(2, 3, 4):
        assert packed[i, n, r] == values[4 * i + r, n]
    tensor = quantized.quantize_q8_0(np.random.default_rng(1).normal(size=(3, 64)))
    assert np.array_equal(tensor.bound(quantized.Q8_0_PACKED),
                          quantized.pack_rows(tensor.values.T))


def quantize_activations(x):
    """`x` ([K]) quantized per block of 32 as `activations="i8"` does, in f32 like the
    compiled code: (the scales d = max|x| / 127 [K/32], the values a = round(x * (1 / d)),
    halves away from zero, 0 for a block of zeros, [K/32, 32] int64)."""
    blocks = x.reshape(-1, 32)
    d = (np.abs(blocks).max(axis=1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inverse = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    v = (blocks * inverse[:, None]).astype(np.float32).astype(np.float64)
    a = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int64)
    assert np.abs(a).max() <= 127
    return d, a


def int8_reference(x, values, scales):
    """The integer arithmetic of `activations="i8"` in numpy: per block of 32 of `x` ([K]),
    scale d = max|x| / 127 and a = round(x * (1 / d)) (halves away from zero; 0 for a block
    of zeros), all in f32 like the compiled code; then per block and column the exact sum of
    32 int8 x int8 products, times d * scale. Returns (the result in f64 from those exact
    terms, the sum of the terms' magnitudes)."""
    d, a = quantize_activations(x)
    sums = np.einsum("bk,bkn->bn", a, values.reshape(len(d), 32, -1).astype(np.int64))
    scale = (d[:, None] * scales).astype(np.float32).astype(np.float64)
    terms = sums.astype(np.float64) * scale
    return terms.sum(axis=0), np.abs(terms).sum(axis=0)


@pytest.mark.parametrize("rows", [1, 7])
@pytest.mark.parametrize("features", ["host", "-avx512vnni"])
def test_int8_activation_kernel_is_the_integer_arithmetic(features, rows):
    """The compiled product with int8 activations, one row (a decode step's kernel) and 7
    (a prompt's, a dynamic number: a tile of 4 rows and 3 single ones), with vpdpbusd where
    this CPU has AVX512_VNNI (`host`) and with the fallback (the feature forced off), against
    int8_reference: the block sums are exact integers, so the only difference is the f32
    rounding of the per-block multiply-adds (at most a few ulps of the terms' magnitude);
    one activation rounded the other way would be off by ~1e-2 of it. The rows hold halves
    (2.5 with max 127: 3, not numpy's 2), a block of zeros and a block of one value."""
    import ctypes

    from snapkv import tools

    require_aot_tools()
    k, n = 256, 192
    rng = np.random.default_rng(11)
    text = tools.opt([quantized.pass_arg("i8")],
                     text=I8_MODULE.format(m=1 if rows == 1 else "?", k=k, n=n,
                                           rows="" if rows == 1 else "%rows")).stdout
    pipeline = runtime.PIPELINE.replace("asserts=report",
                                        f"asserts=report cpu-features={features}")
    lib = runtime.compile_library(text, label="int8-activations", pipeline=pipeline)
    fn = runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "mv",
                                  runtime.signature(text, "mv"))
    values = rng.integers(-128, 128, (k, n)).astype(np.int8)
    scales = rng.uniform(1e-3, 2e-2, (k // 32, n)).astype(np.float32)
    for trial in range(3):
        x = rng.normal(0, 1 + 10 * trial, (rows, k)).astype(np.float32)
        x[:, :32] = 0
        x[:, 32:64] = -3.25
        x[0, 64:96] = np.resize(np.float32([127, 2.5, -2.5, 0.5, -0.5, 1.5, 126.5, -127]), 32)
        (got,) = fn(x, quantized.pack_rows(values), scales)
        for row in range(rows):
            want, magnitude = int8_reference(x[row], values, scales)
            err = np.abs(got[row].astype(np.float64) - want)
            assert np.all(err <= 4e-7 * magnitude + 1e-30), \
                f"{features}, row {row}: max relative error {(err / magnitude).max():.3g}"


def test_int8_activations_model(tiny):
    """The tiny model with activations="i8" (every projection and the logits on int8
    activations, the prompt's rows too) against the f32 model bound to the dequantized
    weights, greedy: while both have generated the same tokens, each step's logits are within
    I8_ATOL (the activations' rounding, up to d / 2 each, in the prompt's K/V as well: 0.49 at
    the first step, 0.54 at the third, of logits up to 7.2 here) and its token is the
    same wherever the reference's top two logits are more than 2 x I8_ATOL apart. This random
    model has near-ties (0.004 at its third step), where the two may part."""
    checkpoint, exported, tensors = tiny
    text = hf.quantize_weights(exported.text, "i8")
    # The values packed by 4 rows for vpdpbusd, for decode's and the prompt's products.
    described = interface.describe(text).function("decode")
    assert {a.quantized for a in described.arguments if a.weight} == \
        {None, "q8_0_packed", "q8_0_scales"}
    plain = {name: np.asarray(checkpoint.array(name)) for name in checkpoint.tensors}
    plain.update({name: t.dequantize() for name, t in tensors.items()})
    reference = runtime.CompiledModel(exported.text, weights=plain, cflags=("-O0",))
    model = runtime.CompiledModel(text, weights=quantized.QuantizedWeights(checkpoint, tensors))
    assert_greedy_steps_close(reference, model, I8_ATOL)


def assert_greedy_steps_close(reference, model, atol):
    """Greedy runs of `reference` and `model` on the tiny model's prompt: while both have
    generated the same tokens, each step's logits are within `atol` (and not equal: the
    numerics differ) and its token is the same wherever the reference's top two logits are
    more than 2 x `atol` apart; at least 3 steps compared."""
    ids = np.random.default_rng(7).integers(0, 256, (1, 24)).astype(np.int64)
    want, got = reference.generate(ids, STEPS), model.generate(ids, STEPS)
    compared = 0
    for step, (w, g) in enumerate(zip(np.asarray(want["logits"]), np.asarray(got["logits"]))):
        if got["tokens"][:step] != want["tokens"][:step]:
            break
        diff = np.abs(w - g).max()
        assert 0 < diff <= atol, f"step {step}: max |diff| {diff}"
        top = np.sort(w.ravel())
        if top[-1] - top[-2] > 2 * atol:
            assert got["tokens"][step] == want["tokens"][step], f"step {step}"
        compared += 1
    assert compared >= 3, (want["tokens"], got["tokens"])


def test_int8_activations_bad_input(tiny, tmp_path):
    from test_cli import snapkv

    checkpoint, _, _ = tiny
    with pytest.raises(ValueError, match="activations must be one of float, i8, got 'i4'"):
        hf.load(checkpoint, weights="as-stored", activations="i4")
    with pytest.raises(ValueError, match="goes with weights='as-stored'"):
        hf.load(checkpoint, activations="i8")
    done = snapkv("generate", checkpoint.path, "--weights", "as-stored", "--activations", "i4")
    assert done.returncode == 2 and "invalid choice: 'i4' (choose from 'float', 'i8')" in \
        done.stderr, done.stderr
    done = snapkv("compile", checkpoint.path, "--window", 8, "--capacity", 16, "-o",
                  tmp_path / "m.mlir", "--activations", "i8")
    assert done.returncode != 0 and "goes with --weights as-stored" in done.stderr, done.stderr
