"""End to end: `snapkv-compress-kv-cache` on the tiny Llama (test/Models/tiny_llama_dynamic.mlir),
compiled with the ahead-of-time runner and decoded greedily (docs/semantics.md,
docs/model-rewrite.md).

* capacity >= L: the rewritten model's logits are bit for bit the original model's (prefill and
  every decode step), the physical cache length equals the logical one, and the cache holds Hq
  heads (expand) or Hkv heads (mean).
* capacity < L, against test/Models/snapkv_reference.json (no torch needed): the same greedy
  tokens, logits within 1e-4, physical lengths min(L, C) + g, logical positions L + g, and the
  compacted caches are exactly the original model's K/V gathered at the stored kept positions.
* The same against the live PyTorch reference (`reference_decode.snapkv_generate`, skipped
  without torch/transformers), including the caches themselves (within 1e-5).
* Negative controls: decoding the compacted model at the PHYSICAL length, or with its cache heads
  swapped, visibly diverges from the reference, so the comparisons above can fail.
* A model whose decode takes its RoPE position from the physical cache length is refused and
  left byte-identical.

Each rewritten module is compiled once per session (module-scoped cache below) and the runner
keeps the libraries under ~/.cache/snapkv/runner (or $SNAPKV_RUNNER_CACHE), so a warm run only
loads them. Cold: about 20 s per module, 7 modules (the original and 6 rewrites).
"""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import interface, runtime, tools
from snapkv.tools import snapkv_opt

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "test" / "Models"
DYNAMIC = MODELS / "tiny_llama_dynamic.mlir"
STORED = json.loads((MODELS / "snapkv_reference.json").read_text())

L = len(STORED["ids"])            # 48
STEPS = STORED["steps"]           # 16
HQ = STORED["spec"]["num_attention_heads"]       # 4
HKV = STORED["spec"]["num_key_value_heads"]      # 2
GROUPS = HQ // HKV
LAYERS = STORED["spec"]["num_hidden_layers"]
WINDOW, KERNEL, POOLING, ORDER = 8, 5, "avg", "position"
LOGIT_ATOL = 1e-4   # compiled f32 vs PyTorch f32 (observed ~3e-6)
CACHE_ATOL = 1e-5   # compiled K/V vs PyTorch K/V (observed ~2e-6)
COMPACT_CASES = ["compact_expand", "compact_mean", "compact_max"]


def _opt(args, text=None, path=DYNAMIC):
    """Run snapkv-opt on `path` (or on `text` via stdin); return the CompletedProcess."""
    command = [str(snapkv_opt()), *args, "-" if text is not None else str(path)]
    return subprocess.run(command, input=text, capture_output=True, text=True, timeout=300)


def _rewrite(capacity, gqa, order=ORDER, budget="uniform", floor=None):
    options = (f"window={WINDOW} capacity={capacity} kernel={KERNEL} pooling={POOLING} "
               f"gqa={gqa} order={order} budget={budget}")
    if floor is not None:
        options += f" floor={floor}"
    done = _opt([f"--snapkv-compress-kv-cache={options}"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warning" not in done.stderr, done.stderr[-3000:]  # refused = left unchanged
    return done.stdout


def _stored_logits(case):
    """The stored float32 logits (reference_decode.from_f32_hex, which imports torch)."""
    return np.stack([np.frombuffer(bytes.fromhex(row), dtype=">f4").astype(np.float32)
                     for row in case["logits_f32_hex"]])


# --- fixtures -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ids():
    ids = np.array(STORED["ids"], dtype=np.int64)
    # The stored prompt rule (default_rng(7), vocab 256): no torch needed to check it.
    assert ids.tolist() == np.random.default_rng(STORED["prompt_seed"]).integers(
        0, STORED["spec"]["vocab_size"], L).tolist()
    return ids.reshape(1, L)


@pytest.fixture(scope="module")
def original():
    require_aot_tools()
    return runtime.CompiledModel(DYNAMIC.read_text())


@pytest.fixture(scope="module")
def original_run(original, ids):
    """The unmodified model: full prefill (logits, per-layer K/V [1, Hkv, L, D]) and a greedy
    generation of STEPS tokens."""
    logits, caches = original.prefill(ids)
    return dict(prefill_logits=logits, prefill_caches=caches,
                generated=original.generate(ids, STEPS))


@pytest.fixture(scope="module")
def rewritten():
    """`rewritten(capacity, gqa)` -> CompiledModel of the rewritten fixture, built once."""
    require_aot_tools()
    built = {}

    def get(capacity, gqa, order=ORDER, budget="uniform", floor=None):
        key = (capacity, gqa, order, budget, floor)
        if key not in built:
            built[key] = runtime.CompiledModel(_rewrite(capacity, gqa, order, budget, floor))
        return built[key]

    return get


def _heads(gqa):
    return HQ if gqa == "expand" else HKV


def _decode_with_positions(model, ids, position_of):
    """Greedy decode like CompiledModel.generate, but the position fed to decode step g is
    `position_of(g, physical_length)`. Returns (tokens, logits [STEPS + 1, V])."""
    logits, caches = model.prefill(ids)
    rows = [logits[0, -1]]
    tokens = [int(np.argmax(rows[-1]))]
    for g in range(STEPS):
        step, caches = model.decode(tokens[-1], position_of(g, caches[0].shape[2]), caches)
        rows.append(step[0, 0])
        tokens.append(int(np.argmax(rows[-1])))
    return tokens, np.stack(rows)


# --- 1. capacity >= L: exactly the original model -------------------------------------------

@pytest.mark.parametrize("capacity,gqa", [(64, "expand"), (64, "mean"), (L, "expand")],
                         ids=["C64-expand", "C64-mean", "C48-expand"])
def test_capacity_at_least_prompt_is_bit_exact(rewritten, original_run, ids, capacity, gqa):
    """capacity >= L keeps every prompt position in order, so the rewritten model must compute
    exactly what the original computes (docs/semantics.md), bit for bit, for prefill and all
    STEPS decode steps. C = 64 > L bypasses selection; C = 48 == L runs it and keeps everything.

    Catches: any change to prefill's attention (the rewrite must only change what is cached);
    a decode mask or RoPE that no longer matches the original when physical == logical; wrong
    head order in expand (the new token's K/V repeated tiled instead of HF's repeat_kv order,
    or the cache read with the old repeat on top of the expanded heads); a select that permutes
    or drops positions when it should keep all (e.g. C == L treated as L > C with a
    wrong-by-one keep count); and any numerical reordering of the decode attention."""
    model = rewritten(capacity, gqa)
    heads = _heads(gqa)
    assert [t.shape[1] for t in model.cache_types] == [heads] * (2 * LAYERS)

    logits, caches = model.prefill(ids)
    assert np.array_equal(logits, original_run["prefill_logits"])  # every row, bitwise
    for mine, full in zip(caches, original_run["prefill_caches"]):
        expected = np.repeat(full, GROUPS, axis=1) if gqa == "expand" else full
        assert mine.shape == (1, heads, L, full.shape[3])
        assert np.array_equal(mine, expected)

    out = model.generate(ids, STEPS)
    base = original_run["generated"]
    assert out["tokens"] == base["tokens"]
    assert out["logits"].dtype == np.float32 and out["logits"].shape == base["logits"].shape
    for g in range(STEPS + 1):  # row 0 = prefill's last row, row g = decode step g
        assert np.array_equal(out["logits"][g], base["logits"][g]), \
            f"row {g}: max |diff| {np.abs(out['logits'][g] - base['logits'][g]).max()}"
    assert out["physical_lengths"] == out["logical_lengths"] == \
        [L + g for g in range(STEPS + 1)]
    assert out["cache_shapes"] == (1, heads, L + STEPS, base["cache_shapes"][3])
    for mine, full in zip(out["caches"], base["caches"]):
        expected = np.repeat(full, GROUPS, axis=1) if gqa == "expand" else full
        assert np.array_equal(mine, expected)


# --- 2. the stored PyTorch reference (no torch) ---------------------------------------------

@pytest.mark.parametrize("name", COMPACT_CASES + ["full_expand"])
def test_matches_stored_reference(rewritten, original_run, ids, name):
    """Greedy tokens equal the stored reference's exactly and every logits row (prefill's last
    and all STEPS decode steps) is within 1e-4; physical lengths are min(L, C) + g while decode
    is fed logical positions L + g; the compacted cache has Hq (expand) or Hkv (mean/max) heads
    and is EXACTLY the original model's K/V gathered at the stored kept positions (cache head h
    reads KV head h // G for expand, h for mean/max).

    Catches: RoPE at the physical instead of the logical position (step 1 is off by ~1);
    a wrong selection (softmax normalised over the prefix only, scores without the scale,
    the wrong window rows of Q, pre-RoPE Q, wrong pooling or GQA reduction) through the
    gathered-position check or the logits; the wrong head mapping in expand (cache head h
    gathered from KV head h % Hkv, or the new token's K/V repeated in the wrong order);
    a decode that still repeats an expanded cache or forgets to repeat a mean/max one
    (shapes or logits); a decode mask that hides cached keys; prefill attention that reads the
    compacted instead of the full K/V (prefill logits)."""
    case = STORED["cases"][name]
    config = case["config"]
    assert (config["window"], config["kernel"], config["pooling"], config["order"]) == \
        (WINDOW, KERNEL, POOLING, ORDER)
    capacity, gqa = config["capacity"], config["gqa"]
    kept = min(L, capacity)
    heads = _heads(gqa)
    assert case["cache_heads"] == [heads] * LAYERS
    model = rewritten(capacity, gqa)

    logits, caches = model.prefill(ids)
    assert np.array_equal(logits, original_run["prefill_logits"])  # attention untouched
    assert len(caches) == 2 * LAYERS
    for i, (mine, full) in enumerate(zip(caches, original_run["prefill_caches"])):
        positions = np.array(case["indices"][i // 2])          # [Hc, S]
        assert positions.shape == (heads, kept)
        source = [h // GROUPS if gqa == "expand" else h for h in range(heads)]
        expected = np.stack([full[0, source[h], positions[h]] for h in range(heads)])[None]
        assert mine.shape == expected.shape
        assert np.array_equal(mine, expected), \
            f"layer {i // 2} {'KV'[i % 2]}: kept positions differ from the stored ones"

    assert len(case["tokens"]) == STEPS + 1
    out = model.generate(ids, STEPS)
    stored = _stored_logits(case)
    assert out["logits"].shape == stored.shape
    diff = np.abs(out["logits"] - stored).max(axis=1)
    assert out["tokens"] == case["tokens"], f"first divergent row {np.argmax(diff > LOGIT_ATOL)}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"
    assert out["positions"] == case["logical_lengths"] == [L + g for g in range(STEPS)]
    assert out["physical_lengths"][:STEPS] == case["physical_lengths"] == \
        [kept + g for g in range(STEPS)]
    assert out["physical_lengths"][STEPS] == kept + STEPS
    assert out["logical_lengths"] == [L + g for g in range(STEPS + 1)]
    assert out["cache_shapes"][:3] == (1, heads, kept + STEPS)


# --- 3. the live PyTorch reference ----------------------------------------------------------

@pytest.fixture(scope="module")
def torch_model():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from snapkv.frontend.model import TinyLlamaSpec, build_model

    torch.set_num_threads(1)
    return build_model(TinyLlamaSpec())


@pytest.mark.parametrize("gqa", ["expand", "mean", "max"])
def test_matches_live_pytorch_reference(rewritten, torch_model, ids, gqa):
    """`reference_decode.snapkv_generate` (HF prefill, numpy select on the post-RoPE queries,
    plain-torch decode at logical positions) and the compiled rewritten model agree: same
    greedy tokens, logits within 1e-4 at every step, and the compacted caches prefill returns
    are the reference's gathered keys/values within 1e-5 (so the same positions were kept, for
    every layer and head), as are the caches after the last decode step (so each appended
    token's K/V, repeated to Hq heads for expand, went to the right place).

    Catches the same mistakes as the stored-reference test, against a reference rebuilt from
    the current torch/transformers, and additionally checks the decode-appended K/V rows
    (RoPE'd at the logical position) directly rather than only through the logits."""
    from snapkv.frontend import reference_decode as rd

    capacity, kept, heads = 24, 24, _heads(gqa)
    ref = rd.snapkv_generate(torch_model, ids[0], STEPS, WINDOW, capacity, KERNEL, POOLING,
                             gqa, ORDER)
    model = rewritten(capacity, gqa)
    _, caches = model.prefill(ids)
    for layer, sel in enumerate(ref["selections"]):
        for j, expected in enumerate((sel.keys, sel.values)):
            mine = caches[2 * layer + j]
            assert mine.shape == expected.shape == (1, heads, kept, mine.shape[3])
            np.testing.assert_allclose(mine, expected, rtol=0, atol=CACHE_ATOL,
                                       err_msg=f"prefill cache layer {layer} {'KV'[j]}")

    out = model.generate(ids, STEPS)
    diff = np.abs(out["logits"] - ref["logits"]).max(axis=1)
    assert out["tokens"] == ref["tokens"], f"first divergent row {np.argmax(diff > LOGIT_ATOL)}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"
    assert out["physical_lengths"][:STEPS] == ref["physical_lengths"]
    assert out["positions"] == ref["logical_lengths"]
    for layer in range(LAYERS):
        for j, expected in enumerate((ref["keys"][layer], ref["values"][layer])):
            np.testing.assert_allclose(out["caches"][2 * layer + j], expected.numpy(), rtol=0,
                                       atol=CACHE_ATOL,
                                       err_msg=f"final cache layer {layer} {'KV'[j]}")


def test_pyramid_budget_matches_live_pytorch_reference(rewritten, torch_model, ids):
    """budget=pyramid: each layer keeps the capacity `reference.layer_capacities` gives (the
    lower layer more), and the compiled model decodes like the reference with those
    capacities: same kept rows, tokens and logits."""
    from snapkv import reference
    from snapkv.frontend import reference_decode as rd

    capacity, gqa = 24, "mean"
    capacities = reference.layer_capacities("pyramid", WINDOW, capacity, LAYERS)
    assert capacities == [39, 9]  # K = 16: top max(1, 16 // 20) = 1, bottom 2K - 1 = 31
    ref = rd.snapkv_generate(torch_model, ids[0], STEPS, WINDOW, capacities, KERNEL, POOLING,
                             gqa, ORDER)
    model = rewritten(capacity, gqa, budget="pyramid")
    assert model.in_place is not None  # decode writes each layer's own row count in place
    _, caches = model.prefill(ids)
    for layer, sel in enumerate(ref["selections"]):
        assert sel.indices.shape[2] == min(L, capacities[layer])
        for j, expected in enumerate((sel.keys, sel.values)):
            np.testing.assert_allclose(caches[2 * layer + j], expected, rtol=0,
                                       atol=CACHE_ATOL,
                                       err_msg=f"prefill cache layer {layer} {'KV'[j]}")
    out = model.generate(ids, STEPS)
    diff = np.abs(out["logits"] - ref["logits"]).max(axis=1)
    assert out["tokens"] == ref["tokens"], f"first divergent row {np.argmax(diff > LOGIT_ATOL)}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"
    assert out["physical_lengths"][-1] == (39 + STEPS,) * 2 + (9 + STEPS,) * 2
    for layer in range(LAYERS):
        for j, expected in enumerate((ref["keys"][layer], ref["values"][layer])):
            np.testing.assert_allclose(out["caches"][2 * layer + j], expected.numpy(), rtol=0,
                                       atol=CACHE_ATOL,
                                       err_msg=f"final cache layer {layer} {'KV'[j]}")


# mean, C = 12: layer 1's heads keep 8 and 16 rows (one keeps its window only); expand, C =
# 16, floor 3: every head keeps 14-18.
@pytest.mark.parametrize("gqa,capacity,floor", [("mean", 12, 0), ("expand", 16, 3)])
def test_adaptive_budget_decodes_a_ragged_cache_like_the_reference(rewritten, torch_model,
                                                                   ids, gqa, capacity, floor):
    """budget=adaptive: prefill returns each layer's packed keys, values and offsets
    (snapkv.select_adaptive), decode appends each head's row in place to a ragged cache and
    attends per head (snapkv.ragged_attention). Against the PyTorch reference with Ada-KV's
    selection and per-head caches: the same offsets and kept rows, tokens and logits, and
    every head's final rows; the cache holds exactly the rows kept, no padding."""
    from snapkv.frontend import reference_decode as rd

    ref = rd.snapkv_generate(torch_model, ids[0], STEPS, WINDOW, capacity, KERNEL, POOLING,
                             gqa, floor=floor)
    model = rewritten(capacity, gqa, order="position", budget="adaptive", floor=floor)
    assert model.ragged and model.in_place["layout"] == "ragged"
    _, results = model.prefill(ids)
    heads = _heads(gqa)
    assert len(results) == 3 * LAYERS
    uneven = 0
    for layer, sel in enumerate(ref["selections"]):
        keys, values, offsets = results[3 * layer:3 * layer + 3]
        np.testing.assert_array_equal(offsets, sel.offsets)
        counts = np.diff(offsets[0])
        assert counts.sum() == heads * capacity and counts.min() >= WINDOW + floor
        uneven += len(set(counts.tolist())) > 1
        for mine, expected, name in ((keys, sel.keys, "K"), (values, sel.values, "V")):
            np.testing.assert_allclose(mine, expected, rtol=0, atol=CACHE_ATOL,
                                       err_msg=f"prefill cache layer {layer} {name}")
    assert uneven  # the heads' shares differ somewhere, or this tests nothing ragged
    out = model.generate(ids, STEPS)
    diff = np.abs(out["logits"] - ref["logits"]).max(axis=1)
    assert out["tokens"] == ref["tokens"], f"first divergent row {np.argmax(diff > LOGIT_ATOL)}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"
    cache = out["caches"]
    assert isinstance(cache, runtime.RaggedKVCache)
    assert out["physical_lengths"][-1] == heads * (capacity + STEPS)
    row_bytes = cache.buffers[0].shape[2] * cache.buffers[0].itemsize
    assert cache.nbytes == 2 * LAYERS * heads * (capacity + STEPS) * row_bytes
    for layer in range(LAYERS):
        for j, expected in enumerate((ref["keys"][layer], ref["values"][layer])):
            for c, (mine, head) in enumerate(zip(cache.heads(2 * layer + j), expected)):
                np.testing.assert_allclose(mine, head.numpy()[0, 0], rtol=0, atol=CACHE_ATOL,
                                           err_msg=f"final cache layer {layer} "
                                                   f"{'KV'[j]} head {c}")


@pytest.mark.parametrize("capacity", [64, L], ids=["C64", "C48"])
def test_adaptive_budget_keeping_everything_is_the_full_cache(rewritten, original_run, ids,
                                                             capacity):
    """budget=adaptive with nothing evicted (C >= L: every head keeps its whole prompt): the
    ragged cache holds the full cache's rows, head by head, and decoding over it (per-head
    snapkv.ragged_attention, a different kernel from the original's attention) generates the
    full cache's tokens, its logits equal to rounding."""
    model = rewritten(capacity, "mean", order="position", budget="adaptive", floor=0)
    assert model.ragged
    _, results = model.prefill(ids)
    for layer in range(LAYERS):
        keys, values, offsets = results[3 * layer:3 * layer + 3]
        np.testing.assert_array_equal(offsets[0], np.arange(HKV + 1) * L)
        for mine, full in ((keys, original_run["prefill_caches"][2 * layer]),
                           (values, original_run["prefill_caches"][2 * layer + 1])):
            assert np.array_equal(mine.reshape(full.shape), full)
    out = model.generate(ids, STEPS)
    base = original_run["generated"]
    diff = np.abs(out["logits"] - base["logits"]).max(axis=1)
    assert out["tokens"] == base["tokens"], f"first divergent row {np.argmax(diff > LOGIT_ATOL)}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"
    assert np.array_equal(out["logits"][0], base["logits"][0])  # prefill's row: untouched
    for b, full in enumerate(base["caches"]):
        for c, mine in enumerate(out["caches"].heads(b)):
            np.testing.assert_allclose(mine, full[0, c], rtol=0, atol=CACHE_ATOL,
                                       err_msg=f"final cache {b} head {c}")


# --- negative controls: the comparisons above can fail --------------------------------------

@pytest.mark.parametrize("name", COMPACT_CASES)
def test_decoding_at_the_physical_length_diverges(rewritten, ids, name):
    """Negative control for the position bug: the same compiled compacted model, fed position =
    physical cache length (min(L, C) + g) instead of the logical L + g, as a rewrite that took
    RoPE from the cache length would do. It must NOT match the stored reference (observed:
    step-1 logits off by 0.7-1.2, the greedy tokens differ from token 1 or 2 on), while the
    logical-position run of the very same library does (checked here too); so the
    reference comparisons detect that bug."""
    case = STORED["cases"][name]
    model = rewritten(case["config"]["capacity"], case["config"]["gqa"])
    stored = _stored_logits(case)
    right_tokens, right = _decode_with_positions(model, ids, lambda g, physical: L + g)
    assert right_tokens == case["tokens"]
    assert np.abs(right - stored).max() <= LOGIT_ATOL
    wrong_tokens, wrong = _decode_with_positions(model, ids, lambda g, physical: physical)
    assert np.array_equal(wrong[0], right[0])  # prefill is the same
    assert np.abs(wrong[1] - stored[1]).max() > 0.1
    assert wrong_tokens != case["tokens"]


def test_swapped_cache_heads_diverge(rewritten, ids):
    """Negative control for the expand head mapping: swapping the two query heads of each group
    in the compacted cache (each query head's own selection handed to its neighbour) changes
    the first decode step's logits far beyond the tolerance (observed 2.5)."""
    case = STORED["cases"]["compact_expand"]
    model = rewritten(24, "expand")
    _, caches = model.prefill(ids)
    swapped = [c[:, [1, 0, 3, 2]] for c in caches]
    step, _ = model.decode(case["tokens"][0], L, swapped)
    assert np.abs(step[0, 0] - _stored_logits(case)[1]).max() > 0.1


# --- 4. refusal: physical-length RoPE in the real model --------------------------------------

def _rope_from_physical_length(text):
    """The fixture with decode's RoPE position taken from `tensor.dim` of the first cache
    argument (its physical length) instead of the position argument %arg1."""
    old = "%expanded_30 = tensor.expand_shape %arg1 [[0, 1, 2]]"
    assert text.count(old) == 1, "fixture changed: update the RoPE anchor"
    at = text.index(old)
    indent = text[text.rindex("\n", 0, at) + 1:at]
    inject = "".join(f"{line}\n{indent}" for line in (
        "%c2_phys = arith.constant 2 : index",
        "%len_phys = tensor.dim %arg2, %c2_phys : tensor<1x2x?x16xf32>",
        "%len_phys_i = arith.index_cast %len_phys : index to i64",
        "%pos_phys = tensor.from_elements %len_phys_i : tensor<1xi64>"))
    return (text[:at] + inject
            + old.replace("%arg1", "%pos_phys") + text[at + len(old):])


def test_physical_length_rope_is_refused_unchanged():
    """A decode that computes RoPE from the physical cache length cannot be compacted
    correctly: the pass must leave every function byte-identical (same output as snapkv-opt with
    no pass, but for the module's snapkv.refusal record) with a warning naming @decode and the
    reason, and fail with strict=true (exit status 3).

    Catches: silently rewriting such a module (its compacted decode would rotate at min(L, C)
    + g; see test_decoding_at_the_physical_length_diverges for how much that changes), or a
    partial rewrite left behind after the refusal."""
    require_aot_tools()
    bad = _rope_from_physical_length(DYNAMIC.read_text())
    plain = _opt([], text=bad)
    assert plain.returncode == 0, plain.stderr[-2000:]
    options = f"window={WINDOW} capacity=24 kernel={KERNEL} gqa=expand"
    refused = _opt([f"--snapkv-compress-kv-cache={options}"], text=bad)
    assert refused.returncode == 0, refused.stderr[-2000:]
    # Every line but the module's own, which gains the snapkv.refusal record.
    changed = [(a, b) for a, b in zip(plain.stdout.splitlines(), refused.stdout.splitlines())
               if a != b]
    assert len(plain.stdout.splitlines()) == len(refused.stdout.splitlines())
    assert len(changed) == 1 and changed[0][0] == "module {"
    assert changed[0][1].startswith("module attributes {snapkv.refusal = ")
    record = interface.describe(refused.stdout).refusal
    assert (record["reason"], record["function"]) == ("rope-from-cache", "decode")
    assert "left the module unchanged" in refused.stderr
    assert "@decode: the RoPE position is computed from cache argument %arg2" in refused.stderr
    strict = _opt([f"--snapkv-compress-kv-cache={options} strict=true"], text=bad)
    assert strict.returncode == tools.REFUSAL_EXIT
    assert "@decode: the RoPE position" in strict.stderr
