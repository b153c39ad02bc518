"""``--dtype``: a checkpoint exported in bf16 (and f16) runs in that type end to end.

The tiny random-weight Llama of test_hf_models.py (f32 safetensors, 2 layers, 4 query / 2 kv
heads, head_dim 128) exported with ``ExportOptions(dtype=...)``: the weights are rounded to the
type when they are bound, the K/V caches (full and compacted) are that type, and the compiled
model generates what HF transformers' own model in that dtype generates
(``from_pretrained(..., dtype=torch.bfloat16)``: the same rounding of the same f32 weights).

LOGIT_ATOL: both sides round every activation to the dtype after each matmul and norm, but
sum in different orders (f32 accumulators in both) and HF's CPU SDPA kernel rounds its softmax
probabilities to the dtype before the P @ V product (the compiled attention does too in bf16,
since 2026-12-07, not in f16), so a value next to a rounding boundary rounds one ulp apart
(2^-8 relative in bf16, 2^-11 in f16) and the difference travels through the remaining
layers. On these logits (|logit| up to ~10) the differences seen over ten prompts (measured
before the compiled bf16 attention rounded its probabilities) are 0.12-0.19 in bf16 (HF's
own bf16 model is 0.3-0.7 from its f32 one) and 0.02-0.06 in f16 (HF: 0.05-0.11). The
tolerances leave room for that, and the prompt is chosen so that HF's two best logits are at
least MIN_MARGIN apart at every step, so such a difference cannot swap a greedy token; a
wrong computation (bf16 accumulation, a dropped f32 upcast in RMSNorm, weights rounded
another way) moves logits by whole units.

Slow (exports and compiles): each dtype's export is cached, its libraries too.
"""

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import dtypes, hf, runtime
from snapkv.cli import ledger

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("torch_mlir")

from test_hf_models import CFLAGS, FAMILIES, STEPS, WINDOW, L, checkpoint_dir, snapkv_cli  # noqa: E402

CAPACITY = 16
TORCH = {"bf16": torch.bfloat16, "f16": torch.float16}
LOGIT_ATOL = {"bf16": 0.25, "f16": 0.1}
MIN_MARGIN = {"bf16": 0.3, "f16": 0.1}


def hf_greedy(model, ids, steps):
    """HF's greedy decode in the model's dtype: (tokens, logits float32 [steps + 1, V])."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(ids), cache=cache, use_cache=True)
        rows = [out.logits[0, -1].float()]
        for _ in range(steps):
            token = int(rows[-1].argmax())
            out = model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True)
            rows.append(out.logits[0, -1].float())
    logits = torch.stack(rows).numpy()
    return [int(r.argmax()) for r in logits], logits


def clear_prompt(model, vocab, margin):
    """The first prompt (seeds 7, 8, ...) whose HF greedy choices are clear of ties."""
    for seed in range(7, 57):
        ids = np.random.default_rng(seed).integers(0, vocab, L).reshape(1, L)
        tokens, logits = hf_greedy(model, ids, STEPS)
        top = np.sort(logits, axis=1)[:, -2:]
        if (top[:, 1] - top[:, 0]).min() >= margin:
            return ids, tokens, logits
    raise AssertionError("no prompt with clear token margins")


@pytest.fixture(scope="module", params=["bf16", "f16"])
def case(request):
    require_aot_tools()
    torch.set_num_threads(1)
    dtype = request.param
    folder = checkpoint_dir("llama", FAMILIES["llama"])
    checkpoint = hf.Checkpoint(folder)
    exported = hf.export(checkpoint, hf.ExportOptions(dtype=dtype))
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=TORCH[dtype]).eval()
    ids, tokens, logits = clear_prompt(model, model.config.vocab_size, MIN_MARGIN[dtype])
    built = {}

    def compiled(capacity=None):
        if capacity not in built:
            text = exported.text if capacity is None else hf.rewrite(
                exported.text, hf.Compaction(window=WINDOW, capacity=capacity, kernel=5,
                                             gqa="mean"))
            built[capacity] = runtime.CompiledModel(text, weights=checkpoint, cflags=CFLAGS)
        return built[capacity]

    return dict(dtype=dtype, folder=folder, exported=exported, ids=ids, tokens=tokens,
                logits=logits, compiled=compiled)


def test_export_is_in_the_dtype(case):
    """Weights, hidden states and caches are the dtype; logits are f32; the export's metadata
    and cache key say which (an f32 export of the same checkpoint is another file)."""
    dtype, exported = case["dtype"], case["exported"]
    assert exported.meta["options"]["dtype"] == dtype
    prefill = runtime.signature(exported.text, "prefill")
    assert {t.elem for _, t in prefill.weight_args} == {dtype}
    assert prefill.results[0].elem == "f32"
    assert {r.elem for r in prefill.results[1:]} == {dtype}
    decode = runtime.signature(exported.text, "decode")
    assert {a.elem for a in decode.inputs[2:]} == {dtype}  # after the id and position
    f32 = hf.export_key(hf.Checkpoint(case["folder"]), hf.ExportOptions())
    assert hf.export_key(hf.Checkpoint(case["folder"]), hf.ExportOptions(dtype=dtype)) != f32


def test_weights_are_rounded_to_the_dtype(case):
    """The f32 checkpoint's tensors are bound rounded to nearest even (torch's .to(dtype))."""
    model = case["compiled"]()
    checkpoint = hf.Checkpoint(case["folder"])
    name = "model.layers.0.self_attn.q_proj.weight"
    bound = next(a for ref, a in model.weights.items() if ref.name == name)
    want = torch.from_numpy(np.array(checkpoint.array(name))).to(TORCH[case["dtype"]]).T
    if case["dtype"] == "bf16":
        assert bound.dtype == np.uint16
        assert np.array_equal(bound, want.contiguous().view(torch.int16).numpy().view(np.uint16))
    else:
        assert np.array_equal(bound, want.contiguous().numpy())
    assert any(f"converted to {case['dtype']}" in note for note in model.weight_notes)


def test_full_cache_is_hf_generation_in_the_dtype(case):
    """The compiled original module generates HF's greedy tokens in the same dtype, logits
    within LOGIT_ATOL; its caches are the dtype."""
    out = case["compiled"]().generate(case["ids"], STEPS)
    diff = np.abs(out["logits"] - case["logits"]).max(axis=1)
    assert out["tokens"] == case["tokens"], f"max |diff| per row {diff.tolist()}"
    assert diff.max() <= LOGIT_ATOL[case["dtype"]], f"max |diff| per row {diff.tolist()}"
    _, caches = case["compiled"]().prefill(case["ids"])
    assert {c.dtype for c in caches} == {np.dtype(dtypes._NUMPY[case["dtype"]])}


def test_compacted_cache_is_the_dtype_at_half_the_bytes(case):
    """capacity < L: the compacted caches hold rows of the full caches, bit for bit (the
    select gathers exact copies), in the dtype, 2 bytes an element: half what the same
    shapes take in f32; the ledger (snapkv-report-cache) counts the same bytes."""
    full_model, model = case["compiled"](), case["compiled"](CAPACITY)
    _, full = full_model.prefill(case["ids"])
    _, caches = model.prefill(case["ids"])
    bits = dtypes._BITS[case["dtype"]]
    for layer in range(len(caches) // 2):
        for j in (0, 1):
            got, whole = caches[2 * layer + j], full[2 * layer + j]
            assert got.shape == (1, 2, CAPACITY, 128)  # gqa mean: Hkv heads
            for head in range(got.shape[1]):
                rows = {r.tobytes() for r in whole[0, head].view(bits)}
                assert all(r.tobytes() in rows for r in got[0, head].view(bits)), \
                    f"layer {layer} {'KV'[j]} head {head}: a row that is not a full-cache row"
            # The window (the last rows) is always kept, in order.
            assert np.array_equal(got[0, :, -WINDOW:].view(bits),
                                  whole[0, :, -WINDOW:].view(bits))
    elements = 2 * 2 * 2 * CAPACITY * 128  # layers x (K, V) x heads x rows x D
    assert sum(c.nbytes for c in caches) == elements * 2
    out = model.generate(case["ids"], 4)
    assert out["physical_lengths"] == [CAPACITY + g for g in range(5)]
    report = ledger.ledger_data(hf.rewrite(case["exported"].text, hf.Compaction(
        window=WINDOW, capacity=CAPACITY, kernel=5, gqa="mean")), L, 0)
    assert report["total"]["compacted"] == elements * 2
    assert report["total"]["full"] == 2 * 2 * 2 * L * 128 * 2


def test_cli_dtype_is_checked():
    """An unknown --dtype is a usage error naming the choices; a module file keeps the type it
    was exported in, and --dtype says so instead of running it in another."""
    done = snapkv_cli("generate", "--dtype", "int8", "-q")
    assert done.returncode == 2
    assert "--dtype: invalid choice: 'int8' (choose from 'f32', 'bf16', 'f16')" in \
        done.stderr, done.stderr
    for command in ("eval", "compile"):
        done = snapkv_cli(command, "--dtype", "f64", "-q")
        assert done.returncode == 2
        assert "--dtype: invalid choice: 'f64'; did you mean 'f16'?" in done.stderr, done.stderr
    done = snapkv_cli("generate", "--dtype", "bf16", "--window", WINDOW, "--capacity", 24, "-q")
    assert done.returncode == 1
    assert "--dtype bf16: " in done.stderr and "computes in f32" in done.stderr, done.stderr
