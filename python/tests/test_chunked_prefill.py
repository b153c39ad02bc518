"""Chunked prefill (docs/semantics.md, "Chunked prefill"), end to end on a save_pretrained
Llama (the checkpoint of test_hf_models.py: random weights, seed 0, 2 layers, 4 query / 2 kv
heads, head_dim 128), exported with ``@extend`` and compiled:

* the original model fed in chunks computes what it computes in one go: the same tokens, and
  logits and caches to rounding (bit for bit on this model);
* ``chunk >= L`` with ``snapkv-compress-kv-cache chunk=N`` is one-shot SnapKV bit for bit (the
  same ``@prefill`` runs);
* ``chunk < L``: the compiled model generates the tokens of the PyTorch reference of chunked
  SnapKV (``reference_decode.snapkv_generate(chunk=N)``: HF's forward over the compacted
  caches at logical positions, the numpy selection after every chunk), logits within 1e-4,
  and its caches after prefill are the reference's; it differs from one-shot SnapKV there, so
  the comparison sees the chunking;
* decode-time compression (``decode-interval=K``) generates the tokens of the PyTorch
  reference that compacts the same way (the last W generated tokens through ``extend`` again,
  their queries voting), its caches never above C + K - 1 rows; with a capacity the
  generation never reaches it is the model without it, bit for bit; a decode capacity M
  other than C (``decode-capacity=M``, with chunked prefill: its own copy of the extend chain)
  compacts to M rows, as the reference does;
* two-level chunked prefill (``staging=M``) stages the chunks before the last at M rows by
  their accumulated attention and keeps C by the prompt's last window, as the PyTorch
  reference does, the runner holding at most M + C rows of caches in and out; with
  ``staging-carry`` the staged rows' scores are carried from chunk to chunk, as the reference
  carries them, and with ``staging-scoring=keydiff`` the rows are staged by their keys alone;
* ``snapkv generate --chunk`` and ``--decode-interval`` report the chunks, the K/V the runner
  held and the steps compacted after;
* bad combinations are clear errors.
"""

import dataclasses
import json

import numpy as np
import pytest
from conftest import require_aot_tools

from snapkv import hf, runtime, tools
from snapkv.cli import ledger

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torch_mlir")

from test_hf_models import FAMILIES, checkpoint_dir, hf_model, snapkv_cli  # noqa: E402

from snapkv.frontend import reference_decode  # noqa: E402  (needs torch)

L, WINDOW, CAPACITY, CHUNK, STEPS = 100, 8, 40, 32, 8
INTERVAL, LONG = 8, 24  # decode-time compression: every 8 tokens, over a 24-token generation
DECODE_CAPACITY = 24  # M < C: decoding compacts below the prefill capacity
STAGING = 48  # two-level: the chunks before the last are staged at 48 rows, then C = 40 kept
KERNEL, GQA = 5, "mean"
# Chunks (0, 32), (32, 64), (64, 100): the last 4 tokens are fewer than the window and join.
BOUNDS = [(0, 32), (32, 64), (64, 100)]
CFLAGS = ("-O0",)
LOGIT_ATOL = CACHE_ATOL = 1e-4  # compiled f32 vs PyTorch f32, as in test_hf_models.py


def compaction(chunk=0, decode_interval=0, capacity=CAPACITY, decode_capacity=0):
    return hf.Compaction(window=WINDOW, capacity=capacity, kernel=KERNEL, gqa=GQA, chunk=chunk,
                         decode_interval=decode_interval, decode_capacity=decode_capacity)


def clear_prompt(model):
    """The first prompt (seeds 7, 8, ...) whose chunked selections and greedy choices are clear
    of ties (compiled Q/K differ from PyTorch's by ~1e-6)."""
    for seed in range(7, 57):
        ids = reference_decode.prompt(seed, L, model.config.vocab_size)
        oracle = reference_decode.snapkv_generate(model, ids, STEPS, WINDOW, CAPACITY, KERNEL,
                                                  gqa=GQA, chunk=CHUNK)
        decoded = reference_decode.snapkv_generate(model, ids, LONG, WINDOW, CAPACITY, KERNEL,
                                                   gqa=GQA, decode_interval=INTERVAL)
        both = reference_decode.snapkv_generate(model, ids, LONG, WINDOW, CAPACITY, KERNEL,
                                                gqa=GQA, chunk=CHUNK, decode_interval=INTERVAL,
                                                decode_capacity=DECODE_CAPACITY)
        staged = reference_decode.snapkv_generate(model, ids, STEPS, WINDOW, CAPACITY, KERNEL,
                                                  gqa=GQA, chunk=CHUNK, staging=STAGING)
        carried = reference_decode.snapkv_generate(model, ids, STEPS, WINDOW, CAPACITY, KERNEL,
                                                   gqa=GQA, chunk=CHUNK, staging=STAGING,
                                                   staging_carry=True)
        keydiff = reference_decode.snapkv_generate(model, ids, STEPS, WINDOW, CAPACITY, KERNEL,
                                                   gqa=GQA, chunk=CHUNK, staging=STAGING,
                                                   staging_scoring="keydiff")
        every = [(sels, CAPACITY) for sels in oracle["chunk_selections"]
                 + decoded["decode_selections"] + both["chunk_selections"]] + \
            [(sels, DECODE_CAPACITY) for sels in both["decode_selections"]] + \
            [(sels, STAGING) for run in (staged, carried, keydiff)
             for sels in run["chunk_selections"][:-1]] + \
            [(run["selections"], CAPACITY) for run in (staged, carried, keydiff)]
        selections = [m["relative"] for sels, capacity in every for sel in sels
                      for m in reference_decode.selection_margins(sel, WINDOW, capacity) if m]
        tokens = [*reference_decode.token_margins(oracle["logits"]),
                  *reference_decode.token_margins(decoded["logits"]),
                  *reference_decode.token_margins(both["logits"]),
                  *reference_decode.token_margins(staged["logits"]),
                  *reference_decode.token_margins(carried["logits"]),
                  *reference_decode.token_margins(keydiff["logits"])]
        if min(selections) >= reference_decode.MIN_SELECTION_MARGIN and \
                min(tokens) >= reference_decode.MIN_TOKEN_MARGIN:
            oracle["decoded"], oracle["both"], oracle["staged"] = decoded, both, staged
            oracle["carried"], oracle["keydiff"] = carried, keydiff
            return ids.reshape(1, L), oracle
    raise AssertionError("no prompt with clear selection and token margins")


@pytest.fixture(scope="module")
def case():
    require_aot_tools()
    torch.set_num_threads(1)
    folder = checkpoint_dir("llama", FAMILIES["llama"])
    model = hf_model(folder)
    checkpoint = hf.Checkpoint(folder)
    exported = hf.export(checkpoint, hf.ExportOptions(extend=True))
    ids, oracle = clear_prompt(model)

    def compiled(text):
        return runtime.CompiledModel(text, weights=checkpoint, cflags=CFLAGS,
                                     max_positions=exported.meta["max_position_embeddings"])

    return dict(
        model=model, folder=folder, exported=exported, ids=ids, oracle=oracle,
        full=compiled(exported.text),
        one_shot=compiled(hf.rewrite(exported.text, compaction())),
        chunked=compiled(hf.rewrite(exported.text, compaction(CHUNK))),
        decoding=compiled(hf.rewrite(exported.text, compaction(decode_interval=INTERVAL))))


def test_original_model_in_chunks_is_the_original(case):
    full, ids = case["full"], case["ids"]
    assert full.default_chunk is None
    logits, caches = full.prefill(ids)
    assert full.last_prefill["chunks"] == [(0, L)]
    chunked_logits, chunked_caches = full.prefill(ids, chunk=CHUNK)
    # Without a window every remainder is a chunk of its own.
    assert full.last_prefill["chunks"] == [(0, 32), (32, 64), (64, 96), (96, 100)]
    np.testing.assert_allclose(chunked_logits, logits, rtol=0, atol=1e-5)
    for mine, expected in zip(chunked_caches, caches, strict=True):
        assert mine.shape == expected.shape == (1, 2, L, 128)
        np.testing.assert_allclose(mine, expected, rtol=0, atol=1e-5)
    one, chunked = full.generate(ids, STEPS), full.generate(ids, STEPS, chunk=CHUNK)
    assert chunked["tokens"] == one["tokens"]
    assert chunked["physical_lengths"] == one["physical_lengths"] == \
        [L + g for g in range(STEPS + 1)]


def test_chunk_at_least_prompt_is_one_shot_bit_for_bit(case):
    chunked, one_shot, ids = case["chunked"], case["one_shot"], case["ids"]
    assert chunked.chunked == {"chunk": CHUNK, "window": WINDOW, "function": "extend_layer"}
    assert one_shot.chunked is None
    expected_logits, expected = one_shot.prefill(ids)
    for chunk in (L, 10 * L):
        logits, caches = chunked.prefill(ids, chunk=chunk)
        assert chunked.last_prefill["chunks"] == [(0, L)]
        assert np.array_equal(logits, expected_logits)
        assert all(np.array_equal(a, b) for a, b in zip(caches, expected, strict=True))
    out, ref = chunked.generate(ids, STEPS, chunk=L), one_shot.generate(ids, STEPS)
    assert out["tokens"] == ref["tokens"]
    assert np.array_equal(out["logits"], ref["logits"])


def test_chunked_is_the_chunked_reference(case):
    chunked, ids, oracle = case["chunked"], case["ids"], case["oracle"]
    _, caches = chunked.prefill(ids)  # the module's own chunk
    assert chunked.last_prefill["chunks"] == BOUNDS
    for layer, sel in enumerate(oracle["selections"]):
        for j, expected in enumerate((sel.keys, sel.values)):
            assert caches[2 * layer + j].shape == expected.shape == (1, 2, CAPACITY, 128)
            np.testing.assert_allclose(caches[2 * layer + j], expected, rtol=0,
                                       atol=CACHE_ATOL, err_msg=f"layer {layer} {'KV'[j]}")
    out = chunked.generate(ids, STEPS)
    diff = np.abs(out["logits"] - oracle["logits"]).max(axis=1)
    assert out["tokens"] == oracle["tokens"], f"max |diff| per row {diff.tolist()}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"
    assert out["physical_lengths"] == [CAPACITY + g for g in range(STEPS + 1)]
    assert out["positions"] == [L + g for g in range(STEPS)]
    # The chunking changes what is cached: the comparison above sees it.
    one = reference_decode.snapkv_generate(case["model"], ids[0], STEPS, WINDOW, CAPACITY,
                                           KERNEL, gqa=GQA)
    assert any(not np.allclose(a.keys, b.keys, atol=1e-3)
               for a, b in zip(one["selections"], oracle["selections"]))


def test_runner_measures_what_prefill_holds(case):
    """The chunked run holds at most a chunk's caches in and out (C rows each per head);
    the full cache's prefill returns L rows. The compiled code's heap during a call (counted
    by heap.c) is smaller in chunks than in one go: a chunk's activations and attention
    against the whole prompt's."""
    chunked, one_shot, full, ids = case["chunked"], case["one_shot"], case["full"], case["ids"]
    row = 2 * 2 * 128 * 4  # K and V, 2 kv heads, D = 128, f32: bytes of one row per layer
    chunked.prefill(ids)
    held = chunked.last_prefill
    assert held["peak_cache_bytes"] == 2 * 2 * CAPACITY * row
    full.prefill(ids)
    assert full.last_prefill["peak_cache_bytes"] == 2 * L * row
    one_shot.prefill(ids)
    once = one_shot.last_prefill
    assert once["peak_cache_bytes"] == 2 * CAPACITY * row  # what prefill returns
    # Each call returns its caches through the heap: at least those bytes were held.
    assert held["peak_heap_bytes"] >= 2 * CAPACITY * row
    assert once["peak_heap_bytes"] >= 2 * CAPACITY * row
    assert held["peak_heap_bytes"] < once["peak_heap_bytes"]
    for run in (held, once):
        assert max(run["peak_cache_bytes"], run["peak_heap_bytes"]) <= run["peak_bytes"] <= \
            run["peak_cache_bytes"] + run["peak_heap_bytes"]
    for model in (chunked, one_shot, full):
        assert model.heap.live == 0  # every result freed


def test_bad_chunks_are_clear_errors(case):
    text = case["exported"].text
    with pytest.raises(tools.ToolFailed, match="chunk must be at least the window"):
        hf.rewrite(text, hf.Compaction(window=WINDOW, capacity=CAPACITY, chunk=WINDOW - 1))
    with pytest.raises(tools.ToolFailed, match="chunk needs gqa=mean or gqa=max"):
        hf.rewrite(text, hf.Compaction(window=WINDOW, capacity=CAPACITY, gqa="expand",
                                       chunk=CHUNK))
    with pytest.raises(ValueError, match=r"chunk \(4\) is shorter than the window \(8\)"):
        case["chunked"].prefill(case["ids"], chunk=4)
    with pytest.raises(ValueError, match="rewritten for one-shot prefill: its @extend does not "
                                         "compact the chunks"):
        case["one_shot"].prefill(case["ids"], chunk=CHUNK)
    plain = hf.export(hf.Checkpoint(case["folder"]))  # no @extend
    model = runtime.CompiledModel(plain.text, weights=hf.Checkpoint(case["folder"]),
                                  cflags=CFLAGS)
    with pytest.raises(ValueError, match="chunked prefill needs a module with @extend"):
        model.prefill(case["ids"], chunk=CHUNK)
    assert hf.extend_function(text) == "extend_layer"
    assert hf.extend_function(plain.text) is None


def assert_staged_is(model, ids, oracle):
    """A two-level chunked prefill's caches after prefill and its generation are the
    reference's; the runner held a call's caches in and out: M staged in, C out at the last
    chunk (carried scores, 4 bytes a row, are fewer bytes than that)."""
    _, caches = model.prefill(ids)
    assert model.last_prefill["chunks"] == BOUNDS
    for layer, sel in enumerate(oracle["selections"]):
        for j, expected in enumerate((sel.keys, sel.values)):
            assert caches[2 * layer + j].shape == expected.shape == (1, 2, CAPACITY, 128)
            np.testing.assert_allclose(caches[2 * layer + j], expected, rtol=0,
                                       atol=CACHE_ATOL, err_msg=f"layer {layer} {'KV'[j]}")
    row = 2 * 2 * 128 * 4
    assert model.last_prefill["peak_cache_bytes"] == 2 * (STAGING + CAPACITY) * row
    out = model.generate(ids, STEPS)
    diff = np.abs(out["logits"] - oracle["logits"]).max(axis=1)
    assert out["tokens"] == oracle["tokens"], f"max |diff| per row {diff.tolist()}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"


def test_two_level_chunked_prefill_is_the_reference(case):
    """staging=M: the first two chunks through @extend_stage (the first over empty caches),
    compacted to M by the sum of all their queries' attention; the last through @extend, C
    kept by the prompt's last window. The tokens, logits and caches are the reference's, and
    differ from plain chunked prefill's."""
    text = hf.rewrite(case["exported"].text,
                      dataclasses.replace(compaction(CHUNK), staging=STAGING))
    model = runtime.CompiledModel(text, weights=hf.Checkpoint(case["folder"]), cflags=CFLAGS)
    assert model.chunked == {"chunk": CHUNK, "window": WINDOW, "function": "extend_layer",
                             "staging": STAGING, "staging_function": "extend_layer_stage",
                             "staging_entry": "extend_stage"}
    oracle = case["oracle"]["staged"]
    assert_staged_is(model, case["ids"], oracle)
    assert not all(np.allclose(a.keys, b.keys, atol=1e-3)
                   for a, b in zip(oracle["selections"], case["oracle"]["selections"]))
    # Staging that drops nothing (a 40-token prompt: M and C >= L) is the original model: the
    # staged chunk, then the last one over its caches at their logical positions, give the
    # full cache's caches, logits and tokens (a check of the positions, masks and row order).
    short = case["ids"][:, :CAPACITY]
    logits, caches = model.prefill(short)
    assert model.last_prefill["chunks"] == [(0, CHUNK), (CHUNK, CAPACITY)]
    expected_logits, expected = case["full"].prefill(short)
    np.testing.assert_allclose(logits, expected_logits, rtol=0, atol=LOGIT_ATOL)
    for mine, full in zip(caches, expected, strict=True):
        assert mine.shape == full.shape == (1, 2, CAPACITY, 128)
        np.testing.assert_allclose(mine, full, rtol=0, atol=CACHE_ATOL)
    out, full = model.generate(short, STEPS), case["full"].generate(short, STEPS)
    assert out["tokens"] == full["tokens"]
    np.testing.assert_allclose(out["logits"], full["logits"], rtol=0, atol=LOGIT_ATOL)
    # The ledger: M staged rows plus the last chunk before the final select.
    assert ledger.ledger_data(text, L, 0)["layers"][0]["prefill_peak_rows"] == \
        STAGING + (L - 2 * CHUNK)
    bad = snapkv_cli("generate", str(case["folder"]), "--prompt-length", "40", "--window", "8",
                     "--capacity", "16", "--chunk", "16", "--staging", "12")
    assert bad.returncode == 1
    assert "--staging (12) must be at least --capacity (16)" in bad.stderr


def test_keydiff_staging_is_the_reference(case):
    """staging-scoring=keydiff: the staged chunks keep the M rows whose keys are least like
    their head's mean key direction (no attention); C kept by the prompt's last window. The
    tokens, logits and caches are the reference's, and the staged selection is not sum's."""
    text = hf.rewrite(case["exported"].text,
                      dataclasses.replace(compaction(CHUNK), staging=STAGING,
                                          staging_scoring="keydiff"))
    model = runtime.CompiledModel(text, weights=hf.Checkpoint(case["folder"]), cflags=CFLAGS)
    oracle = case["oracle"]["keydiff"]
    assert_staged_is(model, case["ids"], oracle)
    staged = case["oracle"]["staged"]["chunk_selections"][1]
    assert any(not np.array_equal(a.indices, b.indices)
               for a, b in zip(oracle["chunk_selections"][1], staged, strict=True))


def test_carried_staging_is_the_reference(case):
    """staging-carry: the staged chunks rank by their rows' scores carried from chunk to chunk
    plus the chunk's accumulated votes. The staged entry point returns those scores after each
    layer's values (the reference's, to f32 rounding); the first chunk (32 rows, fewer than M)
    keeps every row, the second keeps M of 64. The tokens, logits and caches are the
    reference's, and the carry changes the staged selection."""
    text = hf.rewrite(case["exported"].text,
                      dataclasses.replace(compaction(CHUNK), staging=STAGING,
                                          staging_scoring="carried-sum"))
    assert " staging-scoring=sum staging-carry=true" in dataclasses.replace(
        compaction(CHUNK), staging=STAGING, staging_scoring="carried-sum").pass_options()
    model = runtime.CompiledModel(text, weights=hf.Checkpoint(case["folder"]), cflags=CFLAGS)
    assert model.chunked == {"chunk": CHUNK, "window": WINDOW, "function": "extend_layer",
                             "staging": STAGING, "staging_function": "extend_layer_stage",
                             "staging_entry": "extend_stage", "staging_carry": True}
    oracle, ids = case["oracle"]["carried"], case["ids"]
    # The staged calls, by hand: caches and scores in, caches and scores out.
    held = [np.zeros((1, 2, 0, 128), np.float32), np.zeros((1, 2, 0, 128), np.float32),
            np.zeros((1, 2, 0), np.float32)] * 2
    for step, (start, stop) in enumerate(BOUNDS[:-1]):
        out = model._stage(ids[:, start:stop], np.array([start], dtype=np.int64), *held)
        held = out[1:]
        for layer, expected in enumerate(oracle["carried"][step]):
            scores = held[3 * layer + 2]
            assert scores.shape == expected.shape == (1, 2, min(stop, STAGING))
            np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-6)
    assert_staged_is(model, ids, oracle)
    staged = case["oracle"]["staged"]["chunk_selections"][1]
    assert any(not np.array_equal(a.indices, b.indices)
               for a, b in zip(oracle["chunk_selections"][1], staged, strict=True))
    # The ledger counts the staged rows' scores: M f32 per cache head per layer.
    plain = hf.rewrite(case["exported"].text,
                       dataclasses.replace(compaction(CHUNK), staging=STAGING))
    extra = ledger.ledger_data(text, L, 0)["layers"][0]["prefill_peak"] - \
        ledger.ledger_data(plain, L, 0)["layers"][0]["prefill_peak"]
    assert extra == 2 * STAGING * 4


def test_cli_generate_chunk(case):
    done = snapkv_cli("generate", str(case["folder"]), "--prompt",
                      " ".join(map(str, case["ids"][0])), "--window", str(WINDOW), "--capacity",
                      str(CAPACITY), "--kernel", str(KERNEL), "--chunk", str(CHUNK), "--steps",
                      str(STEPS), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["compaction"]["chunk"] == CHUNK
    assert result["tokens"]["compacted"] == case["oracle"]["tokens"]
    measured = result["measured"]
    assert measured["prefill_chunks"] == {"full": 1, "compacted": len(BOUNDS)}
    full, compacted = (measured["prefill_peak_bytes"][k] for k in ("full", "compacted"))
    for kind in ("cache", "heap", "total"):
        assert compacted[kind] < full[kind], kind
    bad = snapkv_cli("generate", str(case["folder"]), "--prompt-length", "40", "--window", "8",
                     "--capacity", "16", "--chunk", "4")
    assert bad.returncode == 1
    assert "--chunk (4) must be at least --window (8)" in bad.stderr


def test_decode_time_compression_is_the_reference(case):
    model, ids, oracle = case["decoding"], case["ids"], case["oracle"]["decoded"]
    assert model.decode_compression == {"interval": INTERVAL, "window": WINDOW,
                                        "capacity": CAPACITY, "function": "extend_layer",
                                        "entry": "extend"}
    assert model.default_chunk is None  # prefill stays one-shot
    out = model.generate(ids, LONG)
    diff = np.abs(out["logits"] - oracle["logits"]).max(axis=1)
    assert out["tokens"] == oracle["tokens"], f"max |diff| per row {diff.tolist()}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"
    assert out["recompressed"] == oracle["recompressed"] == [8, 16, 24]
    # Bounded: C rows after each compaction, C + K - 1 at most before it.
    assert out["physical_lengths"] == [CAPACITY + g % INTERVAL for g in range(LONG + 1)]
    for layer in range(2):
        for j, expected in enumerate((oracle["keys"][layer], oracle["values"][layer])):
            np.testing.assert_allclose(out["caches"][2 * layer + j], expected.numpy(), rtol=0,
                                       atol=CACHE_ATOL, err_msg=f"layer {layer} {'KV'[j]}")
    # Compacting changes the generation here: the comparison sees it.
    assert out["tokens"] != case["one_shot"].generate(ids, LONG)["tokens"]
    # The ledger computes what the runner held: the rows at the end, and C + K at most
    # (the row appended just before a compaction).
    text = hf.rewrite(case["exported"].text, compaction(decode_interval=INTERVAL))
    for g in (LONG - 3, LONG):
        layer = ledger.ledger_data(text, L, g)["layers"][0]
        assert layer["compacted"] == 2 * 2 * 128 * 4 * (CAPACITY + g % INTERVAL)
        assert layer["decode_peak_rows"] == CAPACITY + INTERVAL


def test_decode_capacity_with_chunks_is_the_reference(case):
    """decode-capacity=M with chunked prefill: chunks compact to C through @extend, decoding to
    M through its copy @extend_decode; the reference does the same."""
    text = hf.rewrite(case["exported"].text, compaction(CHUNK, INTERVAL,
                                                          decode_capacity=DECODE_CAPACITY))
    model = runtime.CompiledModel(text, weights=hf.Checkpoint(case["folder"]), cflags=CFLAGS)
    assert model.decode_compression == {"interval": INTERVAL, "window": WINDOW,
                                        "capacity": DECODE_CAPACITY,
                                        "function": "extend_layer_decode",
                                        "entry": "extend_decode"}
    assert model.default_chunk == CHUNK
    oracle = case["oracle"]["both"]
    out = model.generate(case["ids"], LONG)
    diff = np.abs(out["logits"] - oracle["logits"]).max(axis=1)
    assert out["tokens"] == oracle["tokens"], f"max |diff| per row {diff.tolist()}"
    assert diff.max() <= LOGIT_ATOL, f"max |diff| per row {diff.tolist()}"
    assert out["recompressed"] == oracle["recompressed"] == [8, 16, 24]
    # C rows after the chunked prefill, M after each compaction.
    assert out["physical_lengths"] == [CAPACITY + g for g in range(INTERVAL)] + \
        [DECODE_CAPACITY + g % INTERVAL for g in range(INTERVAL, LONG + 1)]
    for layer in range(2):
        for j, expected in enumerate((oracle["keys"][layer], oracle["values"][layer])):
            np.testing.assert_allclose(out["caches"][2 * layer + j], expected.numpy(), rtol=0,
                                       atol=CACHE_ATOL, err_msg=f"layer {layer} {'KV'[j]}")
    # The ledger follows M: the rows at the end, and the most held (C + K before the first
    # compaction).
    layer = ledger.ledger_data(text, L, LONG)["layers"][0]
    assert layer["compacted"] == 2 * 2 * 128 * 4 * DECODE_CAPACITY
    assert layer["decode_peak_rows"] == CAPACITY + INTERVAL


def test_bad_decode_capacities_are_clear_errors(case):
    text = case["exported"].text
    with pytest.raises(tools.ToolFailed, match="decode-capacity must be greater than window"):
        hf.rewrite(text, compaction(decode_interval=INTERVAL, decode_capacity=WINDOW))
    with pytest.raises(tools.ToolFailed, match="decode-capacity .* needs decode-interval"):
        hf.rewrite(text, compaction(decode_capacity=DECODE_CAPACITY))
    bad = snapkv_cli("generate", str(case["folder"]), "--prompt-length", "40", "--window", "8",
                     "--decode-interval", "4", "--decode-capacity", "8")
    assert bad.returncode == 1
    assert "--decode-capacity (8) must be greater than --window (8)" in bad.stderr


def test_cli_ledger_decode_capacity(case):
    """snapkv ledger --decode-interval K --decode-capacity M: the rows at the end are M plus
    the steps since the last compaction, the decode peak C + K (before the first one)."""
    done = snapkv_cli("ledger", str(case["folder"]), "--window", str(WINDOW), "--capacity",
                      str(CAPACITY), "--kernel", str(KERNEL), "--chunk", str(CHUNK),
                      "--decode-interval", str(INTERVAL), "--decode-capacity",
                      str(DECODE_CAPACITY), "--prompt-length", str(L), "--generated",
                      str(LONG - 3), "--json")
    assert done.returncode == 0, done.stderr
    layer = json.loads(done.stdout)["layers"][0]
    assert layer["compacted"] == 2 * 2 * 128 * 4 * (DECODE_CAPACITY + (LONG - 3) % INTERVAL)
    assert layer["decode_peak_rows"] == CAPACITY + INTERVAL


def test_decode_time_compression_never_due_is_none(case):
    """A capacity the generation never exceeds: never compacted, bit for bit the model
    without decode-time compression."""
    text, capacity = case["exported"].text, L + LONG
    plain = runtime.CompiledModel(hf.rewrite(text, compaction(capacity=capacity)),
                                  weights=hf.Checkpoint(case["folder"]), cflags=CFLAGS)
    decoding = runtime.CompiledModel(
        hf.rewrite(text, compaction(decode_interval=INTERVAL, capacity=capacity)),
        weights=hf.Checkpoint(case["folder"]), cflags=CFLAGS)
    want, got = plain.generate(case["ids"], LONG), decoding.generate(case["ids"], LONG)
    assert got["recompressed"] == [] and got["tokens"] == want["tokens"]
    assert np.array_equal(got["logits"], want["logits"])
    # The same with a decode capacity M the generation never exceeds (C as usual): bit for
    # bit the one-shot model.
    roomy = runtime.CompiledModel(
        hf.rewrite(text, compaction(decode_interval=INTERVAL, decode_capacity=L + LONG)),
        weights=hf.Checkpoint(case["folder"]), cflags=CFLAGS)
    want, got = case["one_shot"].generate(case["ids"], LONG), roomy.generate(case["ids"], LONG)
    assert got["recompressed"] == [] and got["tokens"] == want["tokens"]
    assert np.array_equal(got["logits"], want["logits"])


def test_cli_generate_decode_interval(case):
    done = snapkv_cli("generate", str(case["folder"]), "--prompt",
                      " ".join(map(str, case["ids"][0])), "--window", str(WINDOW), "--capacity",
                      str(CAPACITY), "--kernel", str(KERNEL), "--decode-interval",
                      str(INTERVAL), "--steps", str(LONG), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["compaction"]["decode_interval"] == INTERVAL
    assert result["tokens"]["compacted"] == case["oracle"]["decoded"]["tokens"]
    assert result["measured"]["recompressed_after_steps"] == [8, 16, 24]
    rows = [step["physical_rows"]["compacted"] for step in result["steps"]]
    assert max(rows) == CAPACITY + INTERVAL - 1
    bad = snapkv_cli("generate", str(case["folder"]), "--prompt-length", "40", "--gqa",
                     "expand", "--decode-interval", "4")
    assert bad.returncode == 1 and "--decode-interval needs --gqa mean or max" in bad.stderr
