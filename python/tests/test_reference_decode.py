"""The PyTorch-eager SnapKV decode reference (python/snapkv/frontend/reference_decode.py).

* Its plain-torch decode is HF's decode: with capacity >= L (nothing compacted) it reproduces
  `LlamaForCausalLM`'s own greedy decode with a full `DynamicCache`, for every GQA policy.
* Its prefill queries are the tensors HF hands to its attention function.
* With capacity < L: physical lengths min(L, C) + g, logical positions L + g, cache heads
  Hq for expand and Hkv for mean/max; the compacted mean/max decode equals HF's own decode
  (model.Decode) fed the compacted cache and the logical position.
* test/Models/snapkv_reference.json is what the generator writes.
"""

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from snapkv.frontend import reference_decode as rd  # noqa: E402
from snapkv.frontend.model import Decode, TinyLlamaSpec, build_model  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
STORED = REPO / "test" / "Models" / "snapkv_reference.json"
SPEC = TinyLlamaSpec()
L, W, C, STEPS = 48, 8, 24, 16
# The stored logits come from PyTorch on whichever CPU ran the generator. Its kernels (MKL's
# GEMMs, ATen's vectorised reductions) choose code paths by CPU and instruction set, and each
# sums in its own order, so the same float32 model rounds differently per machine. On this
# model (|logit| <= 3.2) the file written on an Intel machine and seven code paths on an AMD
# EPYC (native AVX2, ATEN_CPU_CAPABILITY=default, MKL_CBWR=COMPATIBLE,
# MKL_ENABLE_INSTRUCTIONS=SSE4_2, ONEDNN_MAX_CPU_ISA=SSE41, one thread, all of these together)
# differ by at most 4.1e-6 (1.6e-6 of the row's largest logit); tokens and kept indices were
# identical everywhere. So tokens and indices are compared exactly and the logits within 2e-5:
# 5x that spread, and 50x below the smallest stored token margin (1e-3), so no token can hide
# behind it.
STORED_LOGIT_ATOL = 2e-5


@pytest.fixture(scope="module")
def model():
    return build_model(SPEC)


@pytest.fixture(scope="module")
def ids():
    return rd.prompt(7, L, SPEC.vocab_size)


@pytest.fixture(scope="module")
def hf(model, ids):
    return rd.hf_generate(model, ids, 20)


def test_hf_generate_is_generate(model, ids, hf):
    """Our HF baseline loop is what `generate` does (greedy, DynamicCache)."""
    tokens, logits = hf
    ids_t = torch.as_tensor(ids).reshape(1, -1)
    with torch.no_grad():
        out = model.generate(ids_t, attention_mask=torch.ones_like(ids_t), max_new_tokens=20,
                             do_sample=False, output_logits=True, return_dict_in_generate=True,
                             pad_token_id=0, eos_token_id=None)
    assert out.sequences[0, L:].tolist() == tokens[:20]
    generated = torch.cat(out.logits).numpy()
    np.testing.assert_allclose(generated, logits[:20], rtol=0, atol=1e-5)


def test_prefill_queries_are_hf_attention_inputs(model, ids, monkeypatch):
    from transformers.models.llama import modeling_llama

    seen = []
    original = modeling_llama.eager_attention_forward

    def spy(module, query, key, value, *args, **kwargs):
        seen.append((query.detach().clone(), key.detach().clone(), value.detach().clone()))
        return original(module, query, key, value, *args, **kwargs)

    monkeypatch.setattr(modeling_llama, "eager_attention_forward", spy)
    logits, keys, values, queries = rd.prefill(model, torch.as_tensor(ids).reshape(1, -1))
    assert len(seen) == len(queries) == SPEC.num_hidden_layers
    for (q, k, v), mine_q, mine_k, mine_v in zip(seen, queries, keys, values):
        assert mine_q.shape == (1, SPEC.num_attention_heads, L, SPEC.head_dim)
        assert torch.equal(q, mine_q)
        assert torch.equal(k, mine_k) and torch.equal(v, mine_v)


@pytest.mark.parametrize("gqa", ["mean", "expand", "max"])
@pytest.mark.parametrize("capacity", [64, L])  # L < C bypasses selection; L == C keeps all
def test_no_compaction_matches_hf(model, ids, hf, gqa, capacity):
    tokens, logits = hf
    out = rd.snapkv_generate(model, ids, 20, W, capacity, gqa=gqa)
    assert out["tokens"] == tokens
    assert out["logits"].shape == (21, SPEC.vocab_size)
    np.testing.assert_allclose(out["logits"], logits, rtol=0, atol=1e-5)
    assert out["physical_lengths"] == out["logical_lengths"] == list(range(L, L + 20))
    for index in out["indices"]:
        assert (index == np.arange(L)).all()


@pytest.mark.parametrize("gqa", ["expand", "mean", "max"])
def test_compacted_lengths_and_heads(model, ids, gqa):
    out = rd.snapkv_generate(model, ids, STEPS, W, C, gqa=gqa)
    heads = SPEC.num_attention_heads if gqa == "expand" else SPEC.num_key_value_heads
    assert out["cache_heads"] == [heads] * SPEC.num_hidden_layers
    assert out["physical_lengths"] == [min(L, C) + g for g in range(STEPS)]
    assert out["logical_lengths"] == [L + g for g in range(STEPS)]
    assert len(out["tokens"]) == STEPS + 1
    for index, k, v in zip(out["indices"], out["keys"], out["values"]):
        assert index.shape == (1, heads, C)
        assert k.shape == v.shape == (1, heads, C + STEPS, SPEC.head_dim)
        for row in index[0]:
            assert (np.diff(row) > 0).all()                     # order=position
            assert (row[-W:] == np.arange(L - W, L)).all()      # window always kept
    # Compaction changes the continuation (otherwise the stored cases would test nothing).
    tokens, _ = rd.hf_generate(model, ids, STEPS)
    assert out["tokens"] != tokens


@pytest.mark.parametrize("gqa", ["expand", "mean"])
def test_ragged_decode_with_whole_floor_is_uniform(model, ids, gqa):
    # floor = C - W leaves nothing to share: the ragged caches hold what the uniform ones do,
    # one tensor per head, and decoding them head by head gives the same tokens.
    uniform = rd.snapkv_generate(model, ids, STEPS, W, C, gqa=gqa)
    ragged = rd.snapkv_generate(model, ids, STEPS, W, C, gqa=gqa, floor=C - W)
    assert ragged["tokens"] == uniform["tokens"]
    np.testing.assert_allclose(ragged["logits"], uniform["logits"], rtol=0, atol=1e-5)
    for layer, (heads_k, k) in enumerate(zip(ragged["keys"], uniform["keys"])):
        assert [int(h.shape[2]) for h in heads_k] == [C + STEPS] * k.shape[1]
        assert torch.equal(torch.cat(heads_k, dim=1), k), layer


@pytest.mark.parametrize("gqa", ["expand", "mean"])
def test_ragged_decode_shares_the_budget(model, ids, gqa):
    # Without a floor the heads keep different numbers of rows; every layer still holds
    # Hc x C rows after prefill, each head grows by one row a step, and the continuation is
    # decoded from those rows alone.
    capacity = 16  # C = 24 happens to split this model's budget evenly under gqa mean
    out = rd.snapkv_generate(model, ids, STEPS, W, capacity, gqa=gqa, floor=0)
    heads = SPEC.num_attention_heads if gqa == "expand" else SPEC.num_key_value_heads
    assert out["cache_heads"] == [heads] * SPEC.num_hidden_layers
    uneven = 0
    for offsets, index, heads_k in zip(out["offsets"], out["indices"], out["keys"]):
        rows = np.diff(offsets[0])
        assert rows.sum() == heads * capacity and index.shape == (1, heads * capacity)
        assert [int(h.shape[2]) for h in heads_k] == (rows + STEPS).tolist()
        uneven += len(set(rows.tolist())) > 1
    assert uneven > 0
    assert out["physical_lengths"][0] == np.diff(out["offsets"][0][0]).tolist()
    assert len(out["tokens"]) == STEPS + 1


@pytest.mark.parametrize("gqa", ["mean", "max"])
def test_compacted_decode_is_hf_decode(model, ids, gqa):
    """mean/max keep Hkv heads: HF's own decode (model.Decode, position = logical) fed the
    compacted cache computes the same logits, step after step."""
    out = rd.snapkv_generate(model, ids, STEPS, W, C, gqa=gqa)
    _, keys, values, queries = rd.prefill(model, torch.as_tensor(ids).reshape(1, -1))
    kv = []
    for q, k, v in zip(queries, keys, values):
        sel = rd.reference.select(q[:, :, L - W:].numpy(), k.numpy(), v.numpy(), W, C,
                                  gqa=gqa)
        kv += [torch.from_numpy(sel.keys.copy()), torch.from_numpy(sel.values.copy())]
    decode = Decode(model)
    with torch.no_grad():
        for g in range(STEPS):
            result = decode(torch.tensor([[out["tokens"][g]]]), torch.tensor([L + g]), *kv)
            np.testing.assert_allclose(result[0][0, -1].numpy(), out["logits"][g + 1],
                                       rtol=0, atol=1e-5)
            kv = list(result[1:])
    for mine, theirs in zip([t for pair in zip(out["keys"], out["values"]) for t in pair], kv):
        assert torch.equal(mine, theirs)


def test_expand_of_shared_selection_is_mean_decode(model, ids):
    """The expand path (Hq-head cache, new K/V repeated, no repeat in attention) on a cache
    whose G heads per group are copies equals the Hkv-head path on the uncopied cache."""
    from transformers.models.llama.modeling_llama import repeat_kv

    out = rd.snapkv_generate(model, ids, 0, W, C, gqa="mean")
    groups = SPEC.num_attention_heads // SPEC.num_key_value_heads
    k_small, v_small = list(out["keys"]), list(out["values"])
    k_big = [repeat_kv(k, groups) for k in k_small]
    v_big = [repeat_kv(v, groups) for v in v_small]
    token = out["tokens"][0]
    for g in range(4):
        small = rd.decode_step(model, token, L + g, k_small, v_small, expanded=False)
        big = rd.decode_step(model, token, L + g, k_big, v_big, expanded=True)
        np.testing.assert_allclose(big.numpy(), small.numpy(), rtol=0, atol=1e-6)
        token = rd._argmax(small)
    for ks, kb in zip(k_small, k_big):
        assert torch.equal(repeat_kv(ks, groups), kb)


def test_logical_position_drives_rope(model, ids):
    """Decoding at the physical length instead of the logical position changes the logits."""
    out = rd.snapkv_generate(model, ids, 0, W, C, gqa="mean")
    token = out["tokens"][0]
    right = rd.decode_step(model, token, L, list(out["keys"]), list(out["values"]), False)
    wrong = rd.decode_step(model, token, C, list(out["keys"]), list(out["values"]), False)
    assert np.abs(right.numpy() - wrong.numpy()).max() > 1e-3


def test_selection_margins(model, ids):
    out = rd.snapkv_generate(model, ids, 0, W, C, gqa="expand")
    for sel in out["selections"]:
        margins = rd.selection_margins(sel, W, C)
        assert len(margins) == SPEC.num_attention_heads
        for h, m in enumerate(margins):
            assert m["kept_position"] in sel.indices[0, h]
            assert m["rejected_position"] not in sel.indices[0, h]
            assert m["kept"] >= m["rejected"] and m["relative"] >= 0
    full = rd.snapkv_generate(model, ids, 0, W, 64, gqa="expand")
    assert rd.selection_margins(full["selections"][0], W, 64) == [None] * 4


def test_stored_reference_file():
    doc = json.loads(STORED.read_text())
    assert STORED.stat().st_size < 300 * 1024
    assert set(doc["cases"]) == {"compact_expand", "compact_mean", "compact_max",
                                 "full_expand"}
    assert doc["ids"] == rd.prompt(doc["prompt_seed"], L, SPEC.vocab_size).tolist()
    for name, case in doc["cases"].items():
        logits = np.stack([rd.from_f32_hex(r) for r in case["logits_f32_hex"]])
        assert logits.shape == (doc["steps"] + 1, SPEC.vocab_size)
        assert case["tokens"] == logits.argmax(axis=1).tolist()
        margin = case["selection_margin"]["min_relative"]
        assert margin is None if name == "full_expand" else margin >= 1e-4
        assert case["token_margin"]["min"] >= 1e-3


def test_stored_reference_is_current():
    import transformers

    doc = json.loads(STORED.read_text())
    if (doc["versions"]["torch"] != torch.__version__.split("+")[0]
            or doc["versions"]["transformers"] != transformers.__version__):
        pytest.skip(f"stored with {doc['versions']}")
    fresh = json.loads(rd._dump(rd.build_reference(seed=doc["prompt_seed"],
                                                   steps=doc["steps"])))
    for name, case in doc["cases"].items():
        for key in ("config", "tokens", "indices", "physical_lengths", "logical_lengths",
                    "cache_heads"):
            assert fresh["cases"][name][key] == case[key], (name, key)
        mine = np.stack([rd.from_f32_hex(r) for r in fresh["cases"][name]["logits_f32_hex"]])
        stored = np.stack([rd.from_f32_hex(r) for r in case["logits_f32_hex"]])
        np.testing.assert_allclose(mine, stored, rtol=0, atol=STORED_LOGIT_ATOL)


@pytest.mark.parametrize("gqa", ["expand", "mean", "max"])
def test_stored_selection_survives_f32_noise(model, gqa):
    """The compiled model sees Q/K that differ from PyTorch's by ~1e-6: perturbing them by a
    relative 1e-5 leaves the stored prompt's selection unchanged."""
    doc = json.loads(STORED.read_text())
    _, keys, values, queries = rd.prefill(model, torch.tensor([doc["ids"]]))
    rng = np.random.default_rng(0)
    for layer, (q, k, v) in enumerate(zip(queries, keys, values)):
        q, k = q[:, :, L - W:].numpy(), k.numpy()
        for _ in range(3):
            qn = (q * (1 + 1e-5 * rng.standard_normal(q.shape))).astype(np.float32)
            kn = (k * (1 + 1e-5 * rng.standard_normal(k.shape))).astype(np.float32)
            sel = rd.reference.select(qn, kn, v.numpy(), W, C, gqa=gqa)
            assert sel.indices[0].tolist() == doc["cases"][f"compact_{gqa}"]["indices"][layer]
