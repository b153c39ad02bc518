"""PyTorch-eager reference of SnapKV decoding for the tiny Llama (the oracle for the model rewrite).

``snapkv_generate`` does what a model compiled with ``snapkv-compress-kv-cache`` does
(docs/semantics.md, docs/model-rewrite.md):

1. prefill the prompt ``ids [1, L]`` with the unmodified HuggingFace ``LlamaForCausalLM``
   (full attention, ``DynamicCache``), capturing every layer's post-RoPE queries;
2. compact each layer's K/V with :func:`snapkv.reference.select` (the project's numpy
   reference) on the last ``window`` query rows: ``S = min(L, C)`` rows, ``Hc = Hq`` heads for
   ``gqa="expand"``, ``Hkv`` heads for ``mean``/``max``;
3. decode greedily ``steps`` tokens in plain torch built from HF's own modules. Decode step
   ``g`` feeds token ``tokens[g]`` at LOGICAL position ``L + g`` (that is what RoPE sees) over a
   physical cache of ``S + g`` rows; with ``expand`` the new token's K/V are repeated to ``Hq``
   heads before they are appended and attention reads the cache without ``repeat_kv``; with
   ``mean``/``max`` the cache keeps ``Hkv`` heads and attention repeats it as HF does.

``hf_generate`` is HF's own greedy decode with its full ``DynamicCache``; with ``capacity >= L``
the two agree (``python/tests/test_reference_decode.py``).

``python -m snapkv.frontend.reference_decode --write test/Models/snapkv_reference.json``
stores the reference cases (see :func:`reference_cases`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch

from .. import reference
from .model import TinyLlamaSpec, build_model

# The stored cases (test/Models/snapkv_reference.json).
PROMPT_LEN = 48
WINDOW = 8
CAPACITY = 24
KERNEL = 5
POOLING = "avg"
ORDER = "position"
STEPS = 16
FIRST_SEED = 7
# A case is stored only if every selection and every greedy choice is far from a tie: the
# compiled model computes in f32 from Q/K that differ from PyTorch's by ~1e-6.
MIN_SELECTION_MARGIN = 1e-4  # relative gap, pooled score of last kept vs best rejected
MIN_TOKEN_MARGIN = 1e-3      # absolute gap between the two largest logits of every row


def _llama():
    from transformers.models.llama import modeling_llama

    return modeling_llama


# ---------------------------------------------------------------------------------------------
# Prefill


def _forward_capturing(model, cache, **kwargs):
    """HF's forward with `cache`, capturing every layer's post-RoPE queries ``[1, Hq, n, D]``,
    recomputed from the attention module's own inputs (a forward pre-hook) with the same ops
    HF's ``LlamaAttention.forward`` uses, so they are bit-identical to the tensor HF hands to
    its attention function. Returns ``(logits, queries)``."""
    apply_rotary_pos_emb = _llama().apply_rotary_pos_emb
    layers = model.model.layers
    queries = [None] * len(layers)

    def hook(index):
        def capture(attn, args, kwargs):
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            cos, sin = kwargs["position_embeddings"]
            shape = (*hidden.shape[:-1], -1, attn.head_dim)
            q = attn.q_proj(hidden).view(shape).transpose(1, 2)
            k = attn.k_proj(hidden).view(shape).transpose(1, 2)
            q, _ = apply_rotary_pos_emb(q, k, cos, sin)
            queries[index] = q.detach().clone()
        return capture

    handles = [layer.self_attn.register_forward_pre_hook(hook(i), with_kwargs=True)
               for i, layer in enumerate(layers)]
    try:
        out = model(cache=cache, use_cache=True, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return out.logits.detach(), queries


@torch.no_grad()
def prefill(model, ids):
    """Full-attention prefill with HF's forward and ``DynamicCache``.

    Returns ``(logits [1, L, V], keys, values, queries)``: per layer the post-RoPE keys and the
    values ``[1, Hkv, L, D]`` that the cache holds, and the post-RoPE queries ``[1, Hq, L, D]``.
    The queries are recomputed from the attention module's own inputs (captured with a forward
    pre-hook) with the same ops HF's ``LlamaAttention.forward`` uses, so they are bit-identical
    to the tensor HF hands to its attention function."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    logits, queries = _forward_capturing(model, cache, input_ids=ids)
    layers = range(len(queries))
    keys = [cache.layers[i].keys.detach().clone() for i in layers]
    values = [cache.layers[i].values.detach().clone() for i in layers]
    return logits, keys, values, queries


@torch.no_grad()
def extend(model, ids, position, keys, values):
    """A prompt chunk ``ids [1, n]`` at logical positions ``position .. position + n - 1``
    through HF's forward over per-layer caches ``keys``/``values`` ``[1, Hkv, T, D]`` (a
    ``DynamicCache`` holding them: HF's mask shows every cached key and the chunk causally).

    Returns ``(logits [1, n, V], keys, values, queries)`` like :func:`prefill`: the caches
    with the chunk's K/V appended (``T + n`` rows) and the chunk's post-RoPE queries."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        cache.update(k.clone(), v.clone(), i)
    n = ids.shape[1]
    position_ids = torch.arange(position, position + n, dtype=torch.long).reshape(1, n)
    logits, queries = _forward_capturing(model, cache, input_ids=ids,
                                         position_ids=position_ids)
    layers = range(len(queries))
    return (logits, [cache.layers[i].keys.detach().clone() for i in layers],
            [cache.layers[i].values.detach().clone() for i in layers], queries)


# ---------------------------------------------------------------------------------------------
# Decode


@torch.no_grad()
def decode_step(model, token, position, keys, values, expanded):
    """One decode step in plain torch, op for op what HF's eager Llama does.

    ``token``: int; ``position``: its logical position (RoPE). ``keys``/``values``: per layer
    caches ``[1, Hc, T, D]``, replaced in place by the ``T + 1``-row caches; or, for a ragged
    cache (``snapkv.select_adaptive``), per layer a list of ``Hc`` tensors ``[1, 1, T_h, D]``,
    one per cache head, each extended by one row in place and attended on its own.
    ``expanded``: the caches hold ``Hq`` heads (``gqa="expand"``): the new token's K/V are
    repeated to ``Hq`` heads before the append and attention does not repeat the cache.
    Returns logits ``[V]``."""
    llama = _llama()
    inner = model.model
    ids = torch.tensor([[token]], dtype=torch.long)
    hidden = inner.embed_tokens(ids)                                   # [1, 1, H]
    position_ids = torch.tensor([[position]], dtype=torch.long)
    cos, sin = inner.rotary_emb(hidden, position_ids=position_ids)
    for i, layer in enumerate(inner.layers):
        attn = layer.self_attn
        residual = hidden
        x = layer.input_layernorm(hidden)
        shape = (1, 1, -1, attn.head_dim)
        q = attn.q_proj(x).view(shape).transpose(1, 2)                 # [1, Hq, 1, D]
        k = attn.k_proj(x).view(shape).transpose(1, 2)                 # [1, Hkv, 1, D]
        v = attn.v_proj(x).view(shape).transpose(1, 2)
        q, k = llama.apply_rotary_pos_emb(q, k, cos, sin)
        groups = attn.num_key_value_groups
        if expanded:
            k, v = llama.repeat_kv(k, groups), llama.repeat_kv(v, groups)
        if isinstance(keys[i], list):
            out = _attend_ragged(attn, q, k, v, keys[i], values[i], groups, expanded)
        else:
            keys[i] = torch.cat([keys[i], k], dim=-2)
            values[i] = torch.cat([values[i], v], dim=-2)
            if expanded:
                k_all, v_all = keys[i], values[i]
            else:
                k_all = llama.repeat_kv(keys[i], groups)
                v_all = llama.repeat_kv(values[i], groups)
            out = _attend(attn, q, k_all, v_all)
        out = attn.o_proj(out.transpose(1, 2).reshape(1, 1, -1).contiguous())
        hidden = residual + out
        residual = hidden
        hidden = residual + layer.mlp(layer.post_attention_layernorm(hidden))
    hidden = inner.norm(hidden)
    return model.lm_head(hidden)[0, -1]


def _attend(attn, q, k_all, v_all):
    """HF eager attention of the new token's queries over every cached key ([1, H, 1, D])."""
    # Every cached key precedes the new token: HF's decode mask is all zeros (adding it is
    # the identity on finite scores), so there is none here.
    weights = torch.matmul(q, k_all.transpose(2, 3)) * attn.scaling
    weights = torch.nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v_all)


def _attend_ragged(attn, q, k, v, keys, values, groups, expanded):
    """Each cache head appends its row (k, v after any expand) and answers its query heads:
    itself with ``expanded``, else the ``groups`` query heads of its kv head."""
    out = torch.empty_like(q)
    for head in range(len(keys)):
        keys[head] = torch.cat([keys[head], k[:, head:head + 1]], dim=-2)
        values[head] = torch.cat([values[head], v[:, head:head + 1]], dim=-2)
        rows = slice(head, head + 1) if expanded else slice(head * groups, (head + 1) * groups)
        out[:, rows] = _attend(attn, q[:, rows], keys[head], values[head])
    return out


def ragged_heads(packed, offsets):
    """Per cache head ``[1, 1, T_h, D]`` torch tensors from a packed ``[1, T, D]`` array and its
    ``offsets [1, Hc + 1]`` (``snapkv.select_adaptive``'s results)."""
    bounds = np.asarray(offsets)[0]
    return [torch.from_numpy(np.ascontiguousarray(packed[0, a:b]))[None, None]
            for a, b in zip(bounds[:-1], bounds[1:])]


# ---------------------------------------------------------------------------------------------
# SnapKV generation


def _as_ids(ids):
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long)
    return ids.reshape(1, -1)


def _argmax(logits):
    return int(torch.argmax(logits).item())


@torch.no_grad()
def greedy_decode(model, first_row, length, keys, values, steps, expanded, compress=None):
    """``steps`` greedy decode steps after a prefill of ``length`` tokens whose last logits
    row is ``first_row``, over the per-layer caches ``keys``/``values`` (extended in place).
    ``compress(tokens)``, called after every step with the tokens so far (the last one not
    yet fed), may compact ``keys``/``values`` in place (decode-time compression).

    Returns ``(tokens, rows, physical_lengths)`` laid out like :func:`snapkv_generate`'s
    ``tokens``, ``logits`` rows and ``physical_lengths``."""
    rows = [first_row.clone()]
    tokens = [_argmax(rows[0])]
    physical = []
    for g in range(steps):
        physical.append([int(h.shape[2]) for h in keys[0]] if isinstance(keys[0], list)
                        else int(keys[0].shape[2]))
        rows.append(decode_step(model, tokens[-1], length + g, keys, values, expanded))
        tokens.append(_argmax(rows[-1]))
        if compress is not None:
            compress(tokens)
    return tokens, rows, physical


@torch.no_grad()
def snapkv_generate(model, ids, steps, window, capacity, kernel=5, pooling="avg",
                    gqa="expand", order="position", prefilled=None, floor=None, chunk=None,
                    decode_interval=None, decode_capacity=None, staging=None,
                    staging_scoring="sum", staging_carry=False):
    """Prefill, SnapKV compaction, ``steps`` greedy decode steps. ``capacity``: one for every
    layer, or a list with each layer's (:func:`snapkv.reference.layer_capacities`).
    ``floor`` (an int): Ada-KV's shared budget instead
    (:func:`snapkv.reference.select_adaptive`, ``order`` ignored): the caches are ragged, per
    layer a list of per-head tensors, and ``indices`` per layer the packed ``[1, T]`` positions
    (``offsets`` per layer says where each head's rows start).

    ``prefilled``: the result of :func:`prefill` for ``ids``, to share one prefill between
    several cache policies (it is not modified).

    ``chunk``: chunked prefill (docs/semantics.md, "Chunked prefill"; uniform budgets and
    ``gqa`` mean or max): the chunks of :func:`snapkv.reference.chunk_bounds`, the first
    prefilled and compacted as above, each later one fed by :func:`extend` over the compacted
    caches and the concatenation compacted with the chunk's last ``window`` queries.
    ``selections`` and ``indices`` are then the last chunk's (rows of its concatenation), and
    ``chunk_selections`` holds every chunk's. ``staging`` (M): two-level chunked prefill: every
    chunk but the last compacted to M rows ranked by ``staging_scoring`` (``sum`` /
    ``norm_sum``: all the chunk's queries vote), the last one to ``capacity`` as above;
    ``staging_carry``: each staged row's score carried from chunk to chunk
    (:func:`snapkv.reference.carried_select`; ``carried`` then holds, per staged chunk, the
    per-layer scores the kept rows carry).

    ``decode_interval``: decode-time compression (same restrictions): after every
    ``decode_interval``-th generated token, once ``window`` were generated, caches of more
    than ``capacity`` rows are compacted back: the last ``window`` generated tokens go through
    :func:`extend` again over the caches without their rows, and the concatenation is
    compacted by their queries. ``recompressed`` lists the steps after which it happened,
    ``decode_selections`` each time's per-layer selections. ``decode_capacity`` (M): what
    they are compacted back to instead of ``capacity`` (and what "more than" counts).

    Returns a dict:

    * ``tokens``: ``steps + 1`` ints; ``tokens[0]`` is the argmax of prefill's last row,
      ``tokens[g + 1]`` the argmax of decode step ``g`` (which fed ``tokens[g]``);
    * ``logits``: float32 ``[steps + 1, V]``, row 0 prefill's last row, row ``g + 1`` decode
      step ``g``;
    * ``indices``: per layer int64 ``[1, Hc, S]`` kept prompt positions, ``S = min(L, C)``
      (the layer's ``C``);
    * ``physical_lengths[g]``: cache rows decode step ``g`` found before appending its token
      (``S + g``, measured on the tensors); ``logical_lengths[g]``: logical position of that
      token (``L + g``, tokens processed before it);
    * ``cache_heads``: per layer ``Hc`` of the compacted cache (``Hq`` for expand);
    * ``selections``: per layer the :class:`snapkv.reference.Selection` (votes, pooled scores);
    * ``keys``/``values``: per layer the final caches, ``[1, Hc, S + steps, D]`` torch tensors.
    """
    ids = _as_ids(ids)
    length = ids.shape[1]
    bounds = reference.chunk_bounds(length, chunk, window) if chunk else [(0, length)]
    if len(bounds) > 1:
        if floor is not None or isinstance(capacity, (list, tuple)) or gqa == "expand":
            raise ValueError("chunked prefill takes one capacity, no floor and gqa mean/max")
        logits, keys, values, queries = prefill(model, ids[:, :bounds[0][1]])
        every, carried = [], []
        scores = [np.zeros((1, k.shape[1], 0)) for k in keys]
        for start, stop in bounds[1:]:
            if staging and staging_carry:
                sels = [reference.carried_select(q.numpy(), k.numpy(), v.numpy(), c, window,
                                                 staging, gqa, staging_scoring, order)
                        for q, k, v, c in zip(queries, keys, values, scores, strict=True)]
                scores = [sel.scores for sel in sels]
                carried.append(scores)
            else:
                sels = _compact(queries, keys, values, window, staging or capacity, kernel,
                                pooling, gqa, order, staging_scoring if staging else "votes")
            every.append(sels)
            keys = [torch.from_numpy(s.keys.copy()) for s in sels]
            values = [torch.from_numpy(s.values.copy()) for s in sels]
            logits, keys, values, queries = extend(model, ids[:, start:stop], start, keys,
                                                   values)
        prefilled = logits, keys, values, queries
    else:
        every = None
    logits, keys, values, queries = prefill(model, ids) if prefilled is None else prefilled
    selections, cache_k, cache_v = [], [], []
    capacities = capacity if isinstance(capacity, (list, tuple)) else [capacity] * len(keys)
    for q, k, v, layer_capacity in zip(queries, keys, values, capacities, strict=True):
        # The last `window` query rows: the prompt's, or the last chunk's.
        window_queries = q[:, :, q.shape[2] - window:].numpy()
        if floor is not None:
            sel = reference.select_adaptive(window_queries, k.numpy(), v.numpy(), window,
                                            layer_capacity, floor, kernel, pooling, gqa)
            cache_k.append(ragged_heads(sel.keys, sel.offsets))
            cache_v.append(ragged_heads(sel.values, sel.offsets))
        else:
            sel = reference.select(window_queries, k.numpy(), v.numpy(), window,
                                   layer_capacity, kernel, pooling, gqa, order)
            cache_k.append(torch.from_numpy(sel.keys.copy()))
            cache_v.append(torch.from_numpy(sel.values.copy()))
        selections.append(sel)

    recompressed, decode_selections = [], []
    target = decode_capacity or capacity

    def compress(tokens):
        fed = len(tokens) - 1
        if not decode_interval or fed % decode_interval or fed < window or \
                cache_k[0].shape[2] <= target:
            return
        rows_kept = cache_k[0].shape[2] - window
        _, k, v, q = extend(model, torch.tensor([tokens[fed - window:fed]]),
                            length + fed - window, [c[:, :, :rows_kept] for c in cache_k],
                            [c[:, :, :rows_kept] for c in cache_v])
        sels = _compact(q, k, v, window, target, kernel, pooling, gqa, order)
        decode_selections.append(sels)
        cache_k[:] = [torch.from_numpy(s.keys.copy()) for s in sels]
        cache_v[:] = [torch.from_numpy(s.values.copy()) for s in sels]
        recompressed.append(fed)

    if decode_interval and (floor is not None or isinstance(capacity, (list, tuple))
                            or gqa == "expand"):
        raise ValueError("decode-time compression takes one capacity, no floor and gqa "
                         "mean/max")
    tokens, rows, physical = greedy_decode(model, logits[0, -1], length, cache_k, cache_v,
                                           steps, expanded=(gqa == "expand"),
                                           compress=compress)
    return dict(
        tokens=tokens,
        logits=torch.stack(rows).numpy().astype(np.float32),
        indices=[s.indices for s in selections],
        **({"offsets": [s.offsets for s in selections]} if floor is not None else {}),
        **({"chunk_selections": every + [selections]} if every is not None else {}),
        **({"carried": carried} if every is not None and staging_carry else {}),
        recompressed=recompressed,
        decode_selections=decode_selections,
        physical_lengths=physical,
        logical_lengths=[length + g for g in range(steps)],
        cache_heads=[len(k) if isinstance(k, list) else int(k.shape[1]) for k in cache_k],
        selections=selections,
        keys=cache_k,
        values=cache_v,
    )


def _compact(queries, keys, values, window, capacity, kernel, pooling, gqa, order,
             scoring="votes"):
    """Each layer's :func:`snapkv.reference.select` of `keys`/`values` by its last `window`
    query rows (all of them for the accumulated scorings)."""
    every = scoring in reference.ACCUMULATED
    return [reference.select(q[:, :, 0 if every else q.shape[2] - window:].numpy(), k.numpy(),
                             v.numpy(), window, capacity, kernel, pooling, gqa, order,
                             scoring=scoring)
            for q, k, v in zip(queries, keys, values, strict=True)]


@torch.no_grad()
def hf_generate(model, ids, steps):
    """HF's own greedy decode with its full ``DynamicCache`` (the no-compaction baseline).

    Returns ``(tokens [steps + 1], logits float32 [steps + 1, V])`` laid out like
    :func:`snapkv_generate`'s."""
    from transformers import DynamicCache

    ids = _as_ids(ids)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, cache=cache, use_cache=True)
    rows = [out.logits[0, -1].clone()]
    tokens = [_argmax(rows[0])]
    for _ in range(steps):
        out = model(input_ids=torch.tensor([[tokens[-1]]]), cache=cache, use_cache=True)
        rows.append(out.logits[0, -1].clone())
        tokens.append(_argmax(rows[-1]))
    return tokens, torch.stack(rows).numpy().astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Margins


def selection_margins(selection, window, capacity):
    """Per head, how far the selection is from a tie.

    For each head: ``rel = (kept - rejected) / max(|kept|, |rejected|)`` where ``kept`` is the
    pooled score of the last kept prefix position (rank ``C - W - 1``) and ``rejected`` the best
    rejected one (rank ``C - W``). ``None`` when nothing is selected (``L < C``, or every prefix
    position is kept). Returns a list of dicts (one per cache head)."""
    pooled = selection.pooled[0]
    keep = capacity - window
    out = []
    for h in range(selection.indices.shape[1]):
        if pooled.shape[-1] <= keep:
            out.append(None)
            continue
        ranked = reference.rank(pooled[h])
        kept, rejected = float(pooled[h][ranked[keep - 1]]), float(pooled[h][ranked[keep]])
        scale = max(abs(kept), abs(rejected))
        out.append(dict(kept_position=int(ranked[keep - 1]), kept=kept,
                        rejected_position=int(ranked[keep]), rejected=rejected,
                        relative=(kept - rejected) / scale if scale else 0.0))
    return out


def token_margins(logits):
    """Per logits row, the gap between the largest and the second largest value."""
    top = np.sort(np.asarray(logits, dtype=np.float64), axis=-1)[:, -2:]
    return (top[:, 1] - top[:, 0]).tolist()


# ---------------------------------------------------------------------------------------------
# Stored cases


def prompt(seed, length=PROMPT_LEN, vocab=256):
    return np.random.default_rng(seed).integers(0, vocab, length).astype(np.int64)


def reference_cases():
    """``(name, config)`` of the stored cases."""
    base = dict(window=WINDOW, kernel=KERNEL, pooling=POOLING, order=ORDER)
    cases = [(f"compact_{gqa}", dict(base, capacity=CAPACITY, gqa=gqa))
             for gqa in ("expand", "mean", "max")]
    cases.append(("full_expand", dict(base, capacity=64, gqa="expand")))
    return cases


def _f32_hex(row):
    """Big-endian IEEE-754 bits of each float32, 8 hex digits each, concatenated."""
    return np.asarray(row, dtype=">f4").tobytes().hex()


def from_f32_hex(text):
    """Inverse of the stored ``logits_f32_hex`` rows: a float32 array."""
    return np.frombuffer(bytes.fromhex(text), dtype=">f4").astype(np.float32)


def _sig9(value):
    return float(f"{value:.9g}") if isinstance(value, float) else value


def _case_record(model, ids, config, steps):
    out = snapkv_generate(model, ids, steps, **config)
    margins = [selection_margins(s, config["window"], config["capacity"])
               for s in out["selections"]]
    rel = [m["relative"] for layer in margins for m in layer if m is not None]
    tok = token_margins(out["logits"])
    record = dict(
        config=config,
        tokens=out["tokens"],
        logits_f32_hex=[_f32_hex(r) for r in out["logits"]],
        indices=[i[0].tolist() for i in out["indices"]],
        cache_heads=out["cache_heads"],
        physical_lengths=out["physical_lengths"],
        logical_lengths=out["logical_lengths"],
        selection_margin=dict(
            min_relative=min(rel) if rel else None,
            per_layer=[[None if m is None else {k: _sig9(v) for k, v in m.items()}
                        for m in layer] for layer in margins]),
        token_margin=dict(min=min(tok), per_row=[round(t, 6) for t in tok]),
    )
    return record


def build_reference(seed=None, steps=STEPS, spec=TinyLlamaSpec(), log=None):
    """The JSON document of ``test/Models/snapkv_reference.json``.

    With ``seed=None`` the prompt seed is the first from ``FIRST_SEED`` on whose cases all have
    a selection margin >= ``MIN_SELECTION_MARGIN`` and a token margin >= ``MIN_TOKEN_MARGIN``."""
    import transformers

    model = build_model(spec)
    seeds = [seed] if seed is not None else range(FIRST_SEED, FIRST_SEED + 100)
    rejected = []
    for s in seeds:
        ids = prompt(s, PROMPT_LEN, spec.vocab_size)
        cases = {name: _case_record(model, ids, config, steps)
                 for name, config in reference_cases()}
        sel = [c["selection_margin"]["min_relative"] for c in cases.values()
               if c["selection_margin"]["min_relative"] is not None]
        tok = [c["token_margin"]["min"] for c in cases.values()]
        ok = min(sel) >= MIN_SELECTION_MARGIN and min(tok) >= MIN_TOKEN_MARGIN
        if log:
            log(f"seed {s}: min selection margin {min(sel):.3e}, min token margin "
                f"{min(tok):.3e}{'' if ok else ' -> rejected'}")
        if ok or seed is not None:
            break
        rejected.append(dict(seed=s, min_selection_margin=min(sel), min_token_margin=min(tok)))
    else:
        raise RuntimeError("no prompt seed with clear selection and token margins")
    return dict(
        generator="python -m snapkv.frontend.reference_decode --write "
                  "test/Models/snapkv_reference.json",
        description=(
            "SnapKV decoding of the tiny Llama (the weights of test/Models/tiny_llama*.mlir): "
            "HF prefill of `ids` (full attention), per-layer snapkv.reference.select on the "
            "last `window` post-RoPE query rows, then `steps` greedy decode steps in eager "
            "torch. Decode step g feeds tokens[g] at logical position L + g (RoPE) over a "
            "cache of min(L, C) + g rows; gqa=expand caches Hq heads (new K/V repeated before "
            "the append, no repeat in attention), mean/max cache Hkv heads."),
        layout=dict(
            tokens="steps + 1 ints: [0] argmax of prefill's last row, [g + 1] of decode step g",
            logits_f32_hex="steps + 1 rows (row 0 prefill's last row, row g + 1 decode step g);"
                           " each row is V float32 as 8-hex-digit big-endian IEEE bits, "
                           "concatenated: np.frombuffer(bytes.fromhex(row), '>f4')",
            indices="per layer [Hc][S] kept prompt positions (batch 0)",
            physical_lengths="per decode step g, cache rows before its append: min(L, C) + g",
            logical_lengths="per decode step g, logical position of its token: L + g",
            selection_margin="per layer/head (kept - rejected) / max(|kept|, |rejected|) of "
                             "the float64 pooled scores of the last kept and the best rejected "
                             "prefix position; null when nothing is selected",
            token_margin="per logits row, largest minus second largest logit"),
        versions=dict(torch=torch.__version__.split("+")[0],
                      transformers=transformers.__version__, numpy=np.__version__),
        spec=dataclasses.asdict(spec),
        prompt_seed=s,
        prompt_rule=f"numpy.random.default_rng(seed).integers(0, {spec.vocab_size}, "
                    f"{PROMPT_LEN})",
        rejected_seeds=rejected,
        thresholds=dict(selection_margin=MIN_SELECTION_MARGIN, token_margin=MIN_TOKEN_MARGIN),
        ids=ids.tolist(),
        steps=steps,
        cases=cases,
    )


def _dump(doc, indent=0):
    """JSON with nested objects indented and every list of scalars (or of such lists) on one
    line, so the file stays small and diffs stay readable."""
    pad = " " * indent
    if isinstance(doc, dict) and doc and not _flat(doc):
        items = [f'{pad} {json.dumps(k)}: {_dump(v, indent + 1).lstrip()}' for k, v in doc.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(doc, list) and doc and not _flat(doc):
        items = [_dump(v, indent + 1) for v in doc]
        return pad + "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return pad + json.dumps(doc, separators=(",", ":"))


def _flat(doc):
    """A value printed on one line: a scalar, a small dict of scalars, or lists of lists of
    numbers."""
    if isinstance(doc, dict):
        return len(doc) <= 8 and all(not isinstance(v, (dict, list)) for v in doc.values())
    if isinstance(doc, list):
        return all(isinstance(v, (int, float)) or v is None
                   or (isinstance(v, list) and _flat(v) and not any(isinstance(x, str) for x in v))
                   for v in doc)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the reference JSON here")
    parser.add_argument("--seed", type=int, default=None,
                        help="prompt seed (default: the first clear one from 7 on)")
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    doc = build_reference(args.seed, args.steps, log=lambda m: print(m, file=sys.stderr))
    for name, case in doc["cases"].items():
        print(f"{name}: tokens {case['tokens']}, min selection margin "
              f"{case['selection_margin']['min_relative']}, min token margin "
              f"{case['token_margin']['min']:.4g}", file=sys.stderr)
    text = _dump(doc) + "\n"
    if args.write:
        args.write.write_text(text)
        print(f"wrote {args.write} ({len(text)} bytes)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
