"""Export a local HuggingFace checkpoint to the ``@prefill`` / ``@decode`` module the model
rewrite and the runner work on, with the weights as function arguments (never inlined).

    from snapkv.frontend.checkpoint import Checkpoint
    from snapkv.frontend import hf_export
    text, meta = hf_export.export_text(Checkpoint("my-model/"))

Needs torch, transformers and torch-mlir; nothing is downloaded (the config is read from the
directory, the model is built on the ``meta`` device from it, so no weight is loaded or
allocated: the export depends on the architecture only).

The module holds six functions, all traced from transformers' own modules with torch.export
and imported by torch-mlir's FX importer (``linalg-on-tensors``), except the two entry points,
which are only calls:

* ``@embed(ids [1, L] i64, embedding) -> [1, L, H]`` (private);
* ``@prefill_layer(h [1, L, H], <layer weights>) -> (h', k [1, Hkv, L, D], v)`` (private):
  one decoder layer with the causal mask and RoPE built inside, exactly as the model's
  ``forward`` builds them for a prompt (positions ``0 .. L-1``);
* ``@decode_layer(h [1, 1, H], position [1] i64, k [1, Hkv, T, D], v, <layer weights>) ->
  (h', k' [1, Hkv, T+1, D], v')`` (private): one layer for one token at logical position
  ``position``, the new K/V appended to the cache (HF's ``DynamicCache``);
* ``@extend_layer(h [1, N, H], position [1] i64, k [1, Hkv, T, D], v, <layer weights>) ->
  (h', k' [1, Hkv, T+N, D], v')`` (private; only with ``ExportOptions(extend=True)``): one
  layer for a prompt chunk of N tokens at logical positions ``position .. position+N-1`` over
  a cache of T rows (causal within the chunk, every cached key visible), the chunk's K/V
  appended: what chunked prefill feeds every chunk after the first;
* ``@head(h [1, L, H], norm, lm_head) -> logits`` (private): the final norm and the LM head
  on the last row (``[1, 1, V]``; ``logits="all"``: every row, ``[1, L, V]``);
* ``@prefill(ids [1, L], <every weight>) -> (logits, k0, v0, k1, v1, ...)`` and
  ``@decode(id [1, 1], position [1], k0, v0, ..., <every weight>) -> (logits [1, 1, V], k0',
  v0', ...)``: the entry points, calling ``@embed``, each layer function once per layer
  (with that layer's weights) and ``@head``; with ``extend=True`` also ``@extend(ids [1, N],
  position [1], k0, v0, ..., <every weight>) -> (logits, k0', v0', ...)``.

Every weight argument of the entry points carries ``{snapkv.weight = "<checkpoint tensor
name>", bufferization.writable = false}``: the runner binds it from the checkpoint, and the
compiled code never writes it. The weights of ``nn.Linear`` layers (``y = x W^T``) are taken
transposed, ``[in, out]``, and marked ``snapkv.transposed``: the runner transposes them once
when it binds them, so the traced ``W^T`` cancels against the argument's transpose and the
compiled matmuls read the weights in place, instead of transposing every weight matrix on
every call (which dominated a decode step at real model sizes). One copy of the layer code
serves every layer, so the module's size and its compile time do not grow with the layer count
or the parameter count.

``snapkv-compress-kv-cache="prefill-func=prefill_layer decode-func=decode_layer ..."``
rewrites the layer functions and carries their new signatures to the entry points.

``ExportOptions(dtype="bf16")`` (or ``"f16"``) traces the model with its parameters in that
type, as ``from_pretrained(..., dtype=torch.bfloat16)`` runs it: weights, hidden states and
K/V caches are bf16, while torch-mlir keeps what HF computes in f32 in f32 (matmul
accumulators, RMSNorm, the RoPE frequencies, SDPA's scores, softmax and P.V); the head widens
the logits to f32 (docs/model-ir.md, "Models exported in bf16 or f16").

Models whose configuration the exported code would not follow exactly are refused with
:class:`~snapkv.frontend.checkpoint.CheckpointError`: logit softcapping, RoPE types whose
frequencies depend on the sequence length (``dynamic``, ``longrope``, ``yarn``), layers of
different kinds. A sliding window narrower than ``max_position_embeddings`` is accepted by
limiting the positions: for sequences of at most ``sliding_window`` tokens the window hides
nothing, so the export uses the causal mask and records ``max_positions = sliding_window``
(the runner refuses longer sequences).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import List, Set, Tuple, Union

import torch
from torch import nn

from .checkpoint import Checkpoint, CheckpointError, WeightRef
from .export import import_functions, versions
from .glue import (
    DECODE_LAYER,
    EXTEND_LAYER,
    HEAD_ROWS,
    PREFILL_LAYER,
    Plan,
    batch_functions,
    entry_points,
    insert,
)
from .model import persist_buffers

FORMAT = "snapkv-hf-export 1"
ATTENTION = ("sdpa", "eager")
LOGITS = ("last", "all")
# The element type of the weights, activations and caches (--dtype): the model is traced in
# that torch dtype, so the module computes exactly what HF's own model in it computes.
DTYPES = ("f32", "bf16", "f16")
TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
# RoPE types whose frequencies are fixed by the config (traced once, exact for every length).
STATIC_ROPE = ("default", "linear", "llama3")
# The most sequences one @decode_batch call may take.
MAX_BATCH = 1024


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """``attention``: HF's attention implementation traced (``sdpa``, HF's default, or
    ``eager``); ``logits``: ``last`` (prefill returns ``[1, 1, V]``, what generation needs) or
    ``all`` (``[1, L, V]``, e.g. for perplexity); ``extend``: also export ``@extend`` (a
    prompt chunk over the caches so far: chunked prefill); ``dtype``: the element type of the
    weights, activations and K/V caches (``f32``, ``bf16``, ``f16``; see :func:`export_text`);
    ``batch``: N > 0 also exports ``@decode_batch`` (one new token of each of N sequences;
    N is static: ``snapkv.attention`` takes a static batch); a tuple of sizes exports one
    step per size (the largest ``@decode_batch``, the others ``@decode_batch_<N>``), so a
    step of fewer sequences takes the smallest that fits them."""
    attention: str = "sdpa"
    logits: str = "last"
    extend: bool = False
    dtype: str = "f32"
    batch: Union[int, Tuple[int, ...]] = 0

    @property
    def batch_sizes(self) -> Tuple[int, ...]:
        """The sizes of the batched decode steps exported, ascending (none for 0)."""
        sizes = (self.batch,) if isinstance(self.batch, int) else tuple(self.batch)
        return tuple(sorted({n for n in sizes if n}))

    def check(self):
        if self.attention not in ATTENTION:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION)}, got "
                             f"{self.attention!r}")
        if self.logits not in LOGITS:
            raise ValueError(f"logits must be one of {', '.join(LOGITS)}, got {self.logits!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        sizes = self.batch if isinstance(self.batch, tuple) else (self.batch,)
        if any(isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_BATCH
               for n in sizes) or (isinstance(self.batch, tuple) and
                                   (not sizes or 0 in sizes)):
            raise ValueError(f"batch must be an integer in [0, {MAX_BATCH}] or a non-empty "
                             f"tuple of integers in [1, {MAX_BATCH}], got {self.batch!r}")


# ---------------------------------------------------------------------------------------------
# The configuration


@contextlib.contextmanager
def _offline():
    """No hub access, whatever the environment says."""
    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _rope_type(config) -> str:
    for attr in ("rope_parameters", "rope_scaling"):
        params = getattr(config, attr, None)
        if isinstance(params, dict):
            # Per-layer-type parameters (Gemma-3 style) hold one dict per kind.
            if all(isinstance(v, dict) for v in params.values()) and params:
                kinds = {v.get("rope_type", v.get("type", "default")) for v in params.values()}
                if len(kinds) != 1:
                    raise CheckpointError(f"layers use different RoPE types {sorted(kinds)}")
                return kinds.pop()
            return params.get("rope_type", params.get("type", "default"))
    return "default"


def load_config(checkpoint: Checkpoint, options: ExportOptions = ExportOptions()):
    """(the transformers config to trace, max_positions, notes). Refuses what the export would
    not reproduce exactly."""
    import transformers

    with _offline():
        try:
            config = transformers.AutoConfig.from_pretrained(str(checkpoint.path),
                                                             local_files_only=True)
        except Exception as error:  # transformers raises many kinds for a bad config
            raise CheckpointError(f"transformers cannot read {checkpoint.path / 'config.json'}: "
                                  f"{error}") from None
    notes: List[str] = []
    for attr in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(config, attr, None):
            raise CheckpointError(f"{attr} is set: soft-capped logits change which keys win, "
                                  f"and snapkv.select does not compute them")
    rope = _rope_type(config)
    if rope not in STATIC_ROPE:
        raise CheckpointError(f"RoPE type {rope!r} is not supported (supported: "
                              f"{', '.join(STATIC_ROPE)}: frequencies fixed by the config)")
    layers = config.num_hidden_layers
    types = getattr(config, "layer_types", None)
    if types is not None:
        unknown = sorted(set(types) - {"full_attention", "sliding_attention"})
        if unknown:
            raise CheckpointError(f"layer_types has {unknown}: only full and sliding-window "
                                  f"attention layers are exported")
    window = getattr(config, "sliding_window", None)
    uses_window = window is not None and (types is None or "sliding_attention" in types)
    max_positions = config.max_position_embeddings
    if uses_window:
        if window < max_positions:
            notes.append(f"sliding_window {window} < max_position_embeddings {max_positions}: "
                         f"the window hides nothing from sequences of at most {window} tokens, "
                         f"so the export uses the causal mask and is limited to {window} "
                         f"positions (longer prompts plus generations are refused)")
            max_positions = window
        else:
            notes.append(f"sliding_window {window} >= max_position_embeddings: it never hides "
                         f"a key, so the export uses the causal mask")
        config.sliding_window = None
        if hasattr(config, "use_sliding_window"):
            config.use_sliding_window = False
        if types is not None:
            config.layer_types = ["full_attention"] * layers
    config._attn_implementation = options.attention
    return config, max_positions, notes


def build_model(config, dtype: torch.dtype = torch.float32):
    """The ``*ForCausalLM`` of `config` with its parameters on the ``meta`` device (nothing
    allocated, nothing loaded) and its non-persistent buffers (RoPE frequencies, Gemma's
    embedding scale: derived from the config) computed on the CPU as transformers does.
    The parameters are `dtype`, the buffers stay as transformers makes them (the RoPE
    frequencies f32), as ``from_pretrained(..., dtype=dtype)`` leaves them."""
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    model.eval()
    owners = {}
    for name, buffer in model.named_non_persistent_buffers():
        owner_name, _, leaf = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        owner._buffers[leaf] = torch.empty_like(buffer, device="cpu")
        owners[id(owner)] = owner
    for owner in owners.values():
        model._init_weights(owner)
    if dtype != torch.float32:
        for parameter in model.parameters():
            parameter.data = parameter.data.to(dtype)
    persist_buffers(model)
    return model


# ---------------------------------------------------------------------------------------------
# The traced pieces


def linear_weights(module: nn.Module) -> Set[str]:
    """The names (relative to `module`) of its ``nn.Linear`` weights: the arguments that are
    passed transposed."""
    return {f"{name}.weight" if name else "weight" for name, m in module.named_modules()
            if isinstance(m, nn.Linear)}


class _Functional(nn.Module):
    """Calls `module` with its parameters taken from the arguments, named by `names`
    (relative to `module`); the arguments named in `transposed` hold the parameter transposed
    (see :func:`linear_weights`)."""

    def __init__(self, module: nn.Module, names: List[str], transposed: Set[str] = frozenset()):
        super().__init__()
        self.module, self.names, self.transposed = module, list(names), set(transposed)

    def call(self, weights, *args, **kwargs):
        params = {n: w.t() if n in self.transposed else w for n, w in zip(self.names, weights)}
        return torch.func.functional_call(self.module, params, args, kwargs, strict=False)


class _Embed(_Functional):
    def forward(self, ids, weight):
        return self.call((weight,), ids)


class _Head(_Functional):
    def __init__(self, head: nn.Module, names: List[str], last: bool):
        super().__init__(head, names, {"lm_head.weight"})
        self.last = last

    def forward(self, hidden, *weights):
        if self.last:
            hidden = hidden[:, -1:, :]
        # Logits are f32 whatever the model's dtype: widened after the LM head, exactly, as
        # HF's generate widens them before it picks a token.
        logits = self.call(weights, hidden)
        return logits if logits.dtype == torch.float32 else logits.float()


class _HeadModule(nn.Module):
    def __init__(self, norm, lm_head):
        super().__init__()
        self.norm, self.lm_head = norm, lm_head

    def forward(self, hidden):
        return self.lm_head(self.norm(hidden))


def _layer_stack(inner: nn.Module, layer: nn.Module) -> nn.Module:
    """A shallow copy of the decoder (``model.model``) with `layer` as its only layer and no
    embedding or final norm: its forward on ``inputs_embeds`` builds the mask and RoPE exactly
    as the model does, then runs the one layer."""
    stack = copy.copy(inner)
    stack._modules = dict(inner._modules)
    stack._modules["layers"] = nn.ModuleList([layer])
    stack._modules["norm"] = nn.Identity()
    stack._modules["embed_tokens"] = nn.Identity()
    return stack


class _PrefillLayer(_Functional):
    def __init__(self, stack, names, config, transposed):
        super().__init__(stack, names, transposed)
        self.config = config

    def forward(self, hidden, *weights):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.config)
        out = self.call(weights, inputs_embeds=hidden, cache=cache, use_cache=True)
        return out.last_hidden_state, cache.layers[0].keys, cache.layers[0].values


class _DecodeLayer(_PrefillLayer):
    def forward(self, hidden, position, keys, values, *weights):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.config)
        cache.update(keys, values, 0)
        position_ids = position.reshape(1, 1)
        out = self.call(weights, inputs_embeds=hidden, position_ids=position_ids, cache=cache,
                        use_cache=True)
        return out.last_hidden_state, cache.layers[0].keys, cache.layers[0].values


class _DecodeBatchLayer(_PrefillLayer):
    """One new token of each of N sequences: ``hidden [1, N, H]`` (row i is sequence i's
    token), ``positions [N]`` (each one's logical position), each sequence's cache a batch
    row of ``keys``/``values [N, Hkv, T, D]``. HF's decoder runs it as a batch of N one-token
    steps (per-row RoPE positions), so row i computes what ``_DecodeLayer`` computes for
    sequence i; the model rewrite and ``snapkv-append-in-place layout=pool`` then give each
    sequence its own rows of one pool."""

    def forward(self, hidden, positions, keys, values, *weights):
        from transformers import DynamicCache

        rows = hidden.shape[1]
        cache = DynamicCache(config=self.config)
        cache.update(keys, values, 0)
        out = self.call(weights, inputs_embeds=hidden.reshape(rows, 1, hidden.shape[2]),
                        position_ids=positions.reshape(rows, 1), cache=cache, use_cache=True)
        return (out.last_hidden_state.reshape(1, rows, hidden.shape[2]),
                cache.layers[0].keys, cache.layers[0].values)


class _ExtendLayer(_PrefillLayer):
    def forward(self, hidden, position, keys, values, *weights):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.config)
        cache.update(keys, values, 0)
        # HF derives the mask's query rows from the cache's length (cache_position), RoPE
        # from position_ids: the chunk's logical positions.
        chunk = hidden.shape[1]
        position_ids = (position + torch.arange(chunk)).reshape(1, chunk)
        out = self.call(weights, inputs_embeds=hidden, position_ids=position_ids, cache=cache,
                        use_cache=True)
        return out.last_hidden_state, cache.layers[0].keys, cache.layers[0].values


def _plan(model, checkpoint: Checkpoint) -> Plan:
    inner = model.model
    layer_names = [n for n, _ in inner.layers[0].named_parameters()]
    transposed = linear_weights(inner.layers[0])
    layers = []
    for i, layer in enumerate(inner.layers):
        names = [n for n, _ in layer.named_parameters()]
        if names != layer_names:
            raise CheckpointError(f"layer {i} has other parameters than layer 0 ({names} vs "
                                  f"{layer_names}): layers of different kinds are not exported")
        layers.append([WeightRef(f"model.layers.{i}.{n}", n in transposed) for n in names])
    embed = "model.embed_tokens.weight"
    tied = model.lm_head.weight is inner.embed_tokens.weight
    lm_head = embed if tied else "lm_head.weight"
    if tied and "lm_head.weight" in checkpoint.tensors:
        lm_head = "lm_head.weight"  # saved untied after all: use what is there
    return Plan(WeightRef(embed), layers, WeightRef("model.norm.weight"),
                 WeightRef(lm_head, True), layer_names, transposed)


def _dims(max_positions: int):
    from torch.export import Dim

    return (Dim("L", min=2, max=max(3, max_positions - 1)),
            Dim("T", min=1, max=max(2, max_positions - 2)))


def export_text(checkpoint: Checkpoint, options: ExportOptions = ExportOptions(),
                log=None) -> Tuple[str, dict]:
    """(the module text, its metadata: see :func:`metadata`)."""
    options.check()
    config, max_positions, notes = load_config(checkpoint, options)
    torch.set_num_threads(1)
    dtype = TORCH_DTYPES[options.dtype]
    model = build_model(config, dtype)
    plan = _plan(model, checkpoint)
    inner = model.model
    hidden, heads = config.hidden_size, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    layer = inner.layers[0]
    stack = _layer_stack(inner, layer)
    names = ["layers.0." + n for n in plan.layer_names]
    layer_transposed = {"layers.0." + n for n in plan.layer_transposed}
    empty = {n: p for n, p in layer.named_parameters()}
    layer_weights = tuple(torch.empty(empty[n].shape[::-1] if n in plan.layer_transposed
                                      else empty[n].shape, dtype=dtype)
                          for n in plan.layer_names)
    length, cache = _dims(max_positions)
    example = 16 if max_positions > 17 else max_positions - 1
    vocab = config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, example), generator=g)
    h = torch.randn(1, example, hidden, generator=g).to(dtype)
    kv = torch.randn(1, heads, example, head_dim, generator=g).to(dtype)
    embed_w = torch.empty(inner.embed_tokens.weight.shape, dtype=dtype)
    norm_w = torch.empty(inner.norm.weight.shape, dtype=dtype)
    lm_w = torch.empty(model.lm_head.weight.shape[::-1], dtype=dtype)
    none = tuple(None for _ in layer_weights)
    functions = [
        ("embed", _Embed(inner.embed_tokens, ["weight"]), (ids, embed_w),
         {"ids": {1: length}, "weight": None}),
        (PREFILL_LAYER, _PrefillLayer(stack, names, config, layer_transposed),
         (h,) + layer_weights,
         {"hidden": {1: length}, "weights": none}),
        (DECODE_LAYER, _DecodeLayer(stack, names, config, layer_transposed),
         (h[:, :1], torch.tensor([example]), kv, kv.clone()) + layer_weights,
         {"hidden": None, "position": None, "keys": {2: cache}, "values": {2: cache},
          "weights": none}),
    ]
    if options.extend:
        functions.append(
            (EXTEND_LAYER, _ExtendLayer(stack, names, config, layer_transposed),
             # A cache shorter than the chunk: equal example sizes could be traced as one.
             (h, torch.tensor([example // 2]), kv[:, :, :example // 2].clone(),
              kv[:, :, :example // 2].clone()) + layer_weights,
             {"hidden": {1: length}, "position": None, "keys": {2: cache},
              "values": {2: cache}, "weights": none}))
    head = _HeadModule(inner.norm, model.lm_head)
    functions += [
        ("head", _Head(head, ["norm.weight", "lm_head.weight"], options.logits == "last"),
         (h, norm_w, lm_w), {"hidden": {1: length}, "weights": (None, None)}),
    ]
    for n, _, layer_name in batch_functions(options.batch_sizes):
        rows = torch.randn(1, n, hidden, generator=g).to(dtype)
        functions.append(
            (layer_name, _DecodeBatchLayer(stack, names, config, layer_transposed),
             (rows, example + torch.arange(n), kv.expand(n, -1, -1, -1).clone(),
              kv.expand(n, -1, -1, -1).clone()) + layer_weights,
             {"hidden": None, "positions": None, "keys": {2: cache}, "values": {2: cache},
              "weights": none}))
    if options.batch_sizes:
        functions.append(
            (HEAD_ROWS, _Head(head, ["norm.weight", "lm_head.weight"], last=False),
             (h, norm_w, lm_w), {"hidden": {1: length}, "weights": (None, None)}))
    if log:
        log(f"tracing {checkpoint.describe()} (torch.export + torch-mlir FX importer) ...")
    with _offline():
        text = import_functions(functions)
    entry, order = entry_points(text, plan, options.logits, options.extend,
                                options.batch_sizes)
    text = insert(text, entry, options.batch_sizes)
    meta = metadata(checkpoint, config, options, max_positions, notes, order, head_dim)
    header = (f"// Generated by `snapkv export --hf` from {checkpoint.path.name}/ "
              f"({checkpoint.describe()}); weights are function arguments "
              f"(snapkv.weight), bound from the checkpoint at run time.\n")
    return header + text, meta


def metadata(checkpoint, config, options, max_positions, notes, order, head_dim) -> dict:
    return {
        "format": FORMAT,
        "checkpoint": str(checkpoint.path),
        "fingerprint": checkpoint.fingerprint(),
        "architecture": checkpoint.architecture(),
        "model_type": checkpoint.model_type,
        "family": checkpoint.family,
        "config": {key: getattr(config, key, None) for key in (
            "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "vocab_size", "max_position_embeddings",
            "tie_word_embeddings")} | {"head_dim": head_dim},
        "max_position_embeddings": max_positions,
        "notes": notes,
        "options": dataclasses.asdict(options),
        "functions": {"prefill": "prefill", "decode": "decode", "prefill_layer": PREFILL_LAYER,
                      "decode_layer": DECODE_LAYER}
        | ({"extend": "extend", "extend_layer": EXTEND_LAYER} if options.extend else {})
        | {entry: entry for _, entry, _ in batch_functions(options.batch_sizes)}
        | {layer: layer for _, _, layer in batch_functions(options.batch_sizes)},
        "weights": [ref.name for ref in order],
        "transposed": [ref.name for ref in order if ref.transposed],
        "versions": versions(),
    }


# ---------------------------------------------------------------------------------------------
# Files (snapkv.hf caches exports)


def write(folder: Path, text: str, meta: dict, stem: str = "model") -> Tuple[Path, Path]:
    """Write ``<stem>.mlir`` and ``<stem>.json`` into `folder` (atomically each)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = (folder / f"{stem}.mlir", folder / f"{stem}.json")
    for path, data in zip(paths, (text, json.dumps(meta, indent=1) + "\n")):
        staged = path.with_name(f".{path.name}.{os.getpid()}")
        staged.write_text(data)
        staged.replace(path)
    return paths
