"""A model module (``@prefill`` + ``@decode``) compiled and called from Python
(:class:`CompiledModel`): binding its weights, checking its inputs and limits, greedy
generation.

Shapes are never assumed: head counts and lengths come from the function signatures and from
the returned descriptors (after ``snapkv-compress-kv-cache`` the cache may hold ``Hq`` heads
and ``min(L, capacity)`` rows after prefill).
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import weakref
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import interface, tools
from ..frontend.checkpoint import bind_layout
from ..reference import chunk_bounds
from .build import DEFAULT_CFLAGS, compile_library
from .glue import GlueRunner
from .kvcache import KVCache, KVPool, RaggedKVCache
from .limits import ResourceLimitError, check_memory, growth
from .memref import CompiledFunction, HeapCounter
from .metadata import check_checkpoint, checkpoint_of, max_positions_of
from .signatures import TensorType, glue_function, signature, without_glue


def check_token_ids(ids: np.ndarray, vocab: Optional[int]):
    """Raise ValueError unless every id is in [0, vocab) (no check when vocab is None)."""
    if vocab is not None and ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(f"token ids must be in [0, {vocab}), got {ids.min()}..{ids.max()}")


# Fusion first: snapkv-fuse-attention recognises the imported concatenation, not the slices
# that replace it (the CPU pipeline would run the fusion anyway).
APPEND_IN_PLACE = "builtin.module(func.func(snapkv-fuse-attention),snapkv-append-in-place)"
# The batched decode steps of ``snapkv export --hf --batch``: @decode_batch (the largest N)
# and @decode_batch_<N> (each smaller one).
BATCH_ENTRY = re.compile(r"decode_batch(_[0-9]+)?")


def batch_entries(functions) -> List[str]:
    """The names of the batched decode steps among `functions` (names)."""
    return [name for name in functions if BATCH_ENTRY.fullmatch(name)]


@functools.lru_cache(maxsize=8)
def append_in_place(text: str) -> str:
    """`text` with ``@decode`` writing its new cache rows into caller-owned buffers
    (``snapkv-append-in-place``), or unchanged when the pass does not apply (the compiler
    says why on stderr; the result then has no ``snapkv.append_in_place``). Remembered for
    the last modules asked about. Every ``@decode_batch`` (``_<N>``) gets the pool layout
    (:class:`KVPool`), writing into one pool per cache."""
    functions = interface.describe(text).functions
    if "decode" not in functions:
        return text
    pipeline = APPEND_IN_PLACE[:-1] + "".join(
        f",snapkv-append-in-place{{func={name} layout=pool}}"
        for name in batch_entries(functions)) + ")"
    return tools.opt([f"--pass-pipeline={pipeline}"], text=text).stdout


def bind_weights(signatures, source):
    """{weight reference: array} for every weight argument of the entry points' `signatures`
    (@prefill and @decode), from a Checkpoint or a {tensor name: array} mapping, and notes."""
    wanted = {}
    for sig, fn in zip(signatures, ("prefill", "decode")):
        for name, ttype in sig.weight_args:
            if any(d is None for d in ttype.shape):
                raise ValueError(f"@{fn} weight '{name}' has a dynamic shape {ttype}")
            if name in wanted and wanted[name] != ttype:
                raise ValueError(f"weight '{name}' is {wanted[name]} in one function and "
                                 f"{ttype} in the other")
            wanted[name] = ttype
    if not wanted:
        if source is not None:
            raise ValueError("the module takes no weights (no snapkv.weight arguments), "
                             "but weights were given")
        return {}, []
    if source is None:
        raise ValueError(f"the module takes {len(wanted)} weights (arguments with "
                         f"snapkv.weight) but none were given: pass the checkpoint it "
                         f"was exported from")
    from ..frontend.checkpoint import Checkpoint, weight_arrays
    from ..frontend.quantized import QuantizedWeights, as_stored

    quantized = {ref: ttype for ref, ttype in wanted.items() if ref.quantized}
    if quantized and isinstance(source, Checkpoint):
        # A checkpoint converted from a Q8_0 or Q4_1 GGUF file gives them from that file.
        source = as_stored(source) or source
    if quantized and not isinstance(source, QuantizedWeights):
        raise ValueError(f"the module takes {len(quantized)} weight arguments quantized "
                         f"(snapkv-quantize-weights), but the weights given have none: give "
                         f"a checkpoint converted from a GGUF file whose projections are "
                         f"Q8_0 or Q4_1 "
                         f"(snapkv import-gguf)")
    if isinstance(source, QuantizedWeights):
        arrays, notes = weight_arrays(source.checkpoint,
                                      {n: (t.shape, t.elem) for n, t in wanted.items()
                                       if not n.quantized},
                                      elsewhere={ref.name for ref in quantized})
        for ref, ttype in quantized.items():
            arrays[ref] = source.bind(ref, ttype.shape)
        return arrays, notes
    if isinstance(source, Checkpoint):
        return weight_arrays(source, {n: (t.shape, t.elem) for n, t in wanted.items()})
    arrays, problems = {}, []
    for ref, ttype in wanted.items():
        if ref.name not in source:
            problems.append(f"{ref.name}: missing")
            continue
        array = np.asarray(source[ref.name])
        shape = array.shape[::-1] if ref.transposed else array.shape
        if array.dtype != ttype.dtype or tuple(shape) != tuple(ttype.shape):
            problems.append(f"{ref}: {array.dtype} {list(array.shape)} given, the module "
                            f"takes {ttype}")
            continue
        arrays[ref] = np.ascontiguousarray(bind_layout(ref, array))
    if problems:
        raise ValueError("the weights do not fit the module: " + "; ".join(problems[:4])
                         + (f" (and {len(problems) - 4} more)" if len(problems) > 4 else ""))
    return arrays, []


def _nbytes(arrays) -> int:
    return sum(int(np.asarray(a).nbytes) for a in arrays)


class CompiledModel:
    """A model module (``@prefill``, ``@decode``, see docs/model-ir.md) compiled to a ``.so``.

    ``prefill(ids)`` -> ``(logits [1, L, V], caches)``; ``decode(token, position, caches)`` ->
    ``(logits [1, 1, V], caches)``; with ``@extend`` (``snapkv export --hf`` with extend,
    chunked prefill), ``prefill(ids, chunk=N)`` feeds the prompt N tokens at a time.
    ``caches`` is the list of per-layer K/V arrays
    ``[k0, v0, k1, v1, ...]``, each ``[1, H, T, D]`` as the module returns them (H and T are
    whatever the module produces: after ``snapkv-compress-kv-cache`` prefill returns
    ``min(L, capacity)`` rows and, with ``gqa=expand``, Hq heads).

    Errors are exceptions, never a dead process: a failed run-time check of the compiled
    code raises :class:`CompiledCheckError` (for example a prompt shorter than the SnapKV
    window), an input that would need more memory than is available, or positions past
    `max_positions` (the model's ``max_position_embeddings``, when given; see
    :func:`max_positions_of`), raises :class:`ResourceLimitError` before the call.
    """

    def __init__(self, text: str, *, cache_dir: Optional[os.PathLike] = None,
                 verbose: bool = False, cflags: Sequence[str] = DEFAULT_CFLAGS,
                 timeout: int = 1800, max_positions: Optional[int] = None,
                 weights=None, split_entry_points: bool = True,
                 in_place: bool = True):
        """`weights`: for a module whose entry points take weights (arguments with
        ``{snapkv.weight = "<name>"}``, written by ``snapkv export --hf``), where they come
        from: a :class:`~snapkv.frontend.checkpoint.Checkpoint` (tensors mapped from its
        safetensors files, no copy; f16/bf16 converted once to f32 where the module takes
        f32) or a mapping {name: numpy array}. Each is checked against the module's
        argument type before anything is compiled.

        `split_entry_points`: when ``@prefill`` and ``@decode`` only call other functions
        (``func.call``, ``tensor.cast``, ``return``: one function per layer, as ``snapkv
        export --hf`` writes them), compile the callees alone and make the calls of
        ``@prefill`` (and ``@extend`` and the other entry points called once per prompt
        or chunk) from here (:class:`GlueRunner`): the compiled code holds one copy of each
        layer, and fewer functions take every weight (hundreds of memref descriptors,
        which clang compiles slowly). The steps called once per token (``@decode``, each
        ``@decode_batch``) stay compiled: one call per step instead of one per layer
        (their Python calls were about a tenth of a SmolLM2 step; docs/benchmarks.md, "A
        decode step itemised"). False compiles the module as it is.

        `in_place`: compile ``@decode`` so that it writes each new cache row into buffers
        this object passes (:func:`append_in_place`, :class:`KVCache`), not into fresh copies
        of every cache; when the pass does not apply, decode keeps the functional ABI."""
        if in_place:
            text = append_in_place(text)
        # {rows, buffers, dim} when @decode writes its caches in place.
        self.in_place = interface.describe(text).function("decode").attributes.get(
            "snapkv.append_in_place")
        # budget=adaptive: prefill returns (keys, values, offsets) per layer, packed, and
        # decode appends to ragged buffers (RaggedKVCache).
        self.ragged = bool(self.in_place) and self.in_place.get("layout") == "ragged"
        described = interface.describe(text)
        # {chunk, window, function} when snapkv-compress-kv-cache made chunked prefill
        # compact after every chunk: the default chunk of prefill().
        self.chunked = described.attributes.get("snapkv.chunked_prefill")
        # Two-level chunked prefill (`staging=M`): the chunks before the last go through
        # `staging_entry` (@extend_stage), whose selects keep M rows.
        staging_entry = (self.chunked or {}).get("staging_entry")
        # {interval, window, capacity, function, entry}: generate() compacts the caches back
        # to `capacity` every `interval` steps (recompress), through the public function
        # `entry` (@extend, or @extend_decode when decode-capacity differs from the chunks').
        self.decode_compression = described.attributes.get("snapkv.decode_compression")
        compress_entry = (self.decode_compression or {}).get("entry", "extend")
        # A rewritten module whose @extend was not rewritten with it (no chunk or
        # decode-interval) compacts prefill but not the chunks: no chunked prefill then.
        self._extend_appends_only = described.select_count() > 0 and not (
            self.chunked or self.decode_compression)
        # {rows, buffers, layout = "pool"} when @decode_batch (one step of many sequences)
        # writes into a KVPool; the same for each smaller @decode_batch_<N> that does.
        in_place = {name: described.functions[name].attributes.get("snapkv.append_in_place")
                    for name in batch_entries(described.functions)}
        batch_steps = [name for name, attr in in_place.items()
                       if (attr or {}).get("layout") == "pool"] \
            if (in_place.get("decode_batch") or {}).get("layout") == "pool" else []
        self.batch_in_place = in_place["decode_batch"] if batch_steps else None
        entries = ("prefill", "decode") + tuple(
            dict.fromkeys(name for name in ("extend", compress_entry, staging_entry)
                          if name in described.functions)) + tuple(batch_steps)
        self.prefill_signature = signature(text, "prefill")
        self.decode_signature = signature(text, "decode")
        self.extend_signature = signature(text, "extend") if "extend" in entries else None
        signatures = {"prefill": self.prefill_signature, "decode": self.decode_signature,
                      "extend": self.extend_signature}
        for entry in (compress_entry, staging_entry, *batch_steps):
            if entry not in signatures and entry in entries:
                signatures[entry] = signature(text, entry)
        self.stage_signature = signatures.get(staging_entry)
        self._check_signatures()
        self.weights, self.weight_notes = bind_weights(
            tuple(sig for sig in signatures.values() if sig is not None), weights)
        # What the last prefill held (see `prefill`).
        self.last_prefill: Optional[dict] = None
        # Where a text prompt's tokenizer is (generate(text=...)): the checkpoint's directory.
        self.checkpoint_dir = getattr(weights, "path", None)
        self.max_positions = max_positions
        self._growth = {name: growth(text, name) for name in entries}
        glue = [glue_function(text, name) for name in entries] \
            if split_entry_points else [None]
        self.split = all(glue)
        # The entry points called once per token: compiled, not run from here.
        stepping = ("decode", *batch_steps)
        if self.split:
            # The entry points only call the layer functions: compile those alone and run the
            # calls of the others from here (one copy of each layer's code).
            glue = {name: g for name, g in zip(entries, glue) if name not in stepping}
            compiled = without_glue(text, list(glue.values()))
            label = f"the functions {', '.join('@' + c for c in glue['prefill'].callees)} " \
                    f"and {', '.join('@' + n for n in stepping)}"
        else:
            compiled, label = text, "prefill/decode"
        self.library = compile_library(compiled, cache_dir=cache_dir, verbose=verbose,
                                       cflags=cflags, timeout=timeout, label=label)
        self._lib = ctypes.CDLL(str(self.library.path))
        # The compiled code's heap (None for a library built without generic-alloc). The
        # freed blocks it keeps for reuse go back to the system with the model.
        self.heap = HeapCounter.of(self._lib)
        if self.heap is not None:
            weakref.finalize(self, self.heap.trim)
        bound = {name: [self.weights[n] for n, _ in signatures[name].weight_args]
                 for name in entries}
        runners = {name: CompiledFunction(self._lib, name, signatures[name], bound[name])
                   for name in entries if not self.split or name in stepping}
        if self.split:
            functions = {callee: CompiledFunction(self._lib, callee, signature(compiled, callee))
                         for callee in dict.fromkeys(c for g in glue.values() for c in g.callees)}
            runners.update({name: GlueRunner(g, signatures[name], functions, bound[name])
                            for name, g in glue.items()})
        self._prefill, self._decode = runners["prefill"], runners["decode"]
        self._extend = runners.get("extend")
        self._compress = runners.get(compress_entry)
        self._stage = runners.get(staging_entry)
        self._decode_batch = runners.get("decode_batch")
        self.batch_signature = signatures.get("decode_batch")
        # {N: the step taking N sequences}, ascending.
        self._batch_steps = {}
        for name in sorted(batch_steps, key=lambda n: signatures[n].inputs[1].shape[0] or 0):
            self._check_batch_signature(name, signatures[name], in_place[name])
            self._batch_steps[signatures[name].inputs[1].shape[0]] = runners[name]

    @classmethod
    def from_file(cls, path: os.PathLike, **kwargs) -> "CompiledModel":
        """The module at `path`; `max_positions` defaults to what :func:`max_positions_of`
        finds next to it, and `weights` (for a module that takes weights) to the checkpoint
        that the JSON next to it (``<stem>.json``, written by ``snapkv export --hf``) names."""
        if "max_positions" not in kwargs:
            found = max_positions_of(path)
            kwargs["max_positions"] = found[0] if found else None
        text = Path(path).read_text()
        if kwargs.get("weights") is None and signature(text, "prefill").weight_args:
            kwargs["weights"] = checkpoint_of(path)
        else:
            check_checkpoint(path, kwargs.get("weights"))
        return cls(text, **kwargs)

    def check_limits(self, length: int, steps: int = 0, prefill_length: Optional[int] = None):
        """Raise ResourceLimitError if a `length`-token prompt followed by `steps` decode steps
        would run past ``max_positions`` or needs more memory than is available, before
        anything is allocated. `prefill_length`: the tokens ``@prefill`` itself sees (the first
        chunk of a chunked prefill; default `length`)."""
        if length < 1 or steps < 0:
            raise ValueError(f"need a prompt of >= 1 tokens and steps >= 0, got {length} and "
                             f"{steps}")
        last = length + steps - 1  # the logical position of the last token fed
        if self.max_positions is not None and last >= self.max_positions:
            raise ResourceLimitError(
                f"a {length:,}-token prompt" + (f" and {steps:,} decode steps" if steps else "")
                + f" reach position {last:,}, past the model's max_position_embeddings "
                f"({self.max_positions:,}: positions 0..{self.max_positions - 1:,})")
        first = length if prefill_length is None else prefill_length
        check_memory(self._growth["prefill"], "prefill", first, f"a {first:,}-token prompt")
        if steps:
            rows = length + steps  # an upper bound of the cache rows decode sees
            check_memory(self._growth["decode"], "decode", rows,
                         f"a cache of up to {rows:,} rows")

    @property
    def from_cache(self) -> bool:
        return self.library.from_cache

    @property
    def num_caches(self) -> int:
        """Cache buffers decode takes (prefill's results but the logits; ragged: two of
        each layer's three)."""
        results = len(self.prefill_signature.results) - 1
        return results // 3 * 2 if self.ragged else results

    def cache(self, caches: Sequence[np.ndarray], steps: int = 16):
        """`caches` (as prefill returns them) made ready for `steps` decode steps: a
        :class:`KVCache` (ragged: :class:`RaggedKVCache`) with room for them when decode
        writes in place, else the list."""
        if self.in_place is None:
            return list(caches)
        if isinstance(caches, (KVCache, RaggedKVCache)):
            caches.reserve(steps)
            return caches
        if self.ragged:
            caches = list(caches)
            return RaggedKVCache([caches[i:i + 3] for i in range(0, len(caches), 3)],
                                 spare=steps)
        return KVCache(caches, spare=steps)

    @property
    def vocab_size(self) -> Optional[int]:
        return self.prefill_signature.results[0].shape[-1]

    @property
    def cache_types(self) -> Tuple[TensorType, ...]:
        """Types of decode's cache arguments (head count and head dim, length usually ?)."""
        return self.decode_signature.inputs[2:2 + self.num_caches]

    def _check_signatures(self):
        p, d = self.prefill_signature, self.decode_signature
        problems = []
        for sig, fn in ((p, "prefill"), (d, "decode")):
            flags = [w is not None for w in sig.weights]
            if flags != sorted(flags):
                problems.append(f"@{fn} has weight arguments before other arguments")
        pa, da = p.inputs, d.inputs
        if len(pa) != 1 or pa[0].rank != 2 or pa[0].elem != "i64":
            problems.append(f"@prefill takes {list(map(str, pa))}, expected one [B, L] i64")
        if len(p.results) < 1 or p.results[0].rank != 3:
            problems.append("@prefill's first result is not [B, L, V] logits")
        if len(da) < 2 or da[0].rank != 2 or da[1].rank != 1 or \
                da[0].elem != "i64" or da[1].elem != "i64":
            problems.append("@decode does not start with (id [B, 1] i64, position [1] i64)")
        caches = len(p.results) - 1
        e = self.extend_signature
        if e is not None and (len(e.inputs) != 2 + caches or len(e.results) != 1 + caches or
                              e.inputs[0].rank != 2 or e.inputs[1].rank != 1):
            problems.append(f"@extend does not take (ids [B, N], position [1], {caches} caches) "
                            f"and return logits and {caches} caches")
        if self.ragged:
            # (id, position, [k, v] buffers per layer, rows [P, 2, B, Hc]) -> logits.
            pairs = caches // 3
            buffers = list(range(2, 2 + 2 * pairs))
            if caches % 3 or self.in_place.get("buffers") != buffers or \
                    self.in_place.get("rows") != 2 + 2 * pairs or len(d.results) != 1:
                problems.append(f"@decode appends to ragged caches as {self.in_place}, "
                                f"expected buffers {buffers}, rows {2 + 2 * pairs} and one "
                                f"result for {caches} prefill results")
            if any(t.rank != 3 for i, t in enumerate(p.results[1:]) if i % 3 != 2) or \
                    any(t.rank != 2 for t in p.results[3::3]):
                problems.append("ragged prefill results are not (keys [B, T, D], values "
                                "[B, T, D], offsets [B, Hc + 1]) per layer")
            if problems:
                raise ValueError("not a prefill/decode model module: " + "; ".join(problems))
            return
        if self.in_place is not None:
            # (id, position, cache buffers..., rows) -> logits: snapkv-append-in-place.
            buffers = list(range(2, 2 + caches))
            if self.in_place.get("buffers") != buffers or \
                    self.in_place.get("rows") != 2 + caches or \
                    self.in_place.get("dim") != 2 or len(d.results) != 1:
                problems.append(f"@decode writes its caches in place as {self.in_place}, "
                                f"expected buffers {buffers}, rows {2 + caches}, dim 2 and "
                                f"one result")
            decode_caches = da[2:2 + caches]
        else:
            decode_caches = da[2:] + d.results[1:]
            if len(da) - 2 != caches or len(d.results) - 1 != caches:
                problems.append(f"@prefill returns {caches} caches but @decode takes "
                                f"{len(da) - 2} and returns {len(d.results) - 1}")
        if any(t.rank != 4 for t in (*p.results[1:], *decode_caches)):
            problems.append("cache tensors are not all [B, H, T, D]")
        if problems:
            raise ValueError("not a prefill/decode model module: " + "; ".join(problems))

    def _check_ids(self, ids: np.ndarray):
        # The compiled embedding gather checks too, but says less ("index must be smaller
        # than dim size").
        check_token_ids(ids, self.vocab_size)

    @property
    def default_chunk(self) -> Optional[int]:
        """The chunk the rewrite was made for (``snapkv-compress-kv-cache chunk=N``), or
        None (one-shot prefill)."""
        return self.chunked["chunk"] if self.chunked else None

    def _chunks(self, length: int, chunk: Optional[int]) -> List[Tuple[int, int]]:
        chunk = self.default_chunk if chunk is None else chunk
        if chunk is None or length < 1:
            return [(0, length)]
        return chunk_bounds(length, chunk, self.chunked["window"] if self.chunked else 1)

    def prefill(self, ids, chunk: Optional[int] = None) -> Tuple[np.ndarray, List[np.ndarray]]:
        """``(logits, caches)`` of the prompt `ids`. With `chunk` (default:
        :attr:`default_chunk`) and a prompt longer than it, the prompt is fed in chunks
        (:func:`snapkv.reference.chunk_bounds`): the first through ``@prefill``, every
        other one through ``@extend`` over the caches so far at its logical positions;
        ``logits`` are the last chunk's. A rewrite with ``chunk=N`` compacts the caches
        after every chunk (docs/semantics.md, "Chunked prefill"); the original model keeps
        every row. With ``staging=M`` (two-level chunked prefill) every chunk but the last
        goes through ``@extend_stage`` (the first over empty caches), whose selects keep M
        rows, and the last through ``@extend``, whose selects keep C; with ``staging_carry``
        the staged calls also take and return each kept row's score (counted in the peak
        cache bytes), which the last call does not take.

        :attr:`last_prefill` then holds, measured:

        * ``chunks``: the bounds;
        * ``peak_cache_bytes``: the most K/V bytes the runner held at once, a call's caches in
          and out counted together;
        * ``peak_heap_bytes``: the most bytes the compiled code held at once during any one
          call (activations, attention tiles, a chunk's concatenated K/V, the results before
          they are copied out), from the library's heap counter (None without one);
        * ``peak_bytes``: the largest sum of the two over the calls, an upper bound of what
          prefill held at once (a result is counted in the heap and as a copy);
        * ``kept_heap_bytes``: freed blocks the library keeps for its next calls afterwards
          (:class:`~snapkv.runtime.memref.HeapCounter`; not in the peaks; None without a
          counter)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None]
        self._check_ids(ids)
        length = ids.shape[1] if ids.ndim == 2 else 0
        bounds = self._chunks(length, chunk)
        if len(bounds) > 1 and self._extend is None:
            raise ValueError("chunked prefill needs a module with @extend (export it with "
                             "extend: `snapkv export --hf --extend`, hf.ExportOptions("
                             "extend=True))")
        if len(bounds) > 1 and self._extend_appends_only:
            raise ValueError("this module was rewritten for one-shot prefill: its @extend "
                             "does not compact the chunks (rewrite it with chunk=N)")
        if length:
            self.check_limits(length, prefill_length=bounds[0][1])
        held = dict(cache=0, heap=None, both=0)

        def call(function, *arrays, caches=()):
            if self.heap is not None:
                self.heap.reset_peak()
                before = self.heap.live
            out = function(*arrays, *caches)
            kv = _nbytes(caches) + _nbytes(out[1:])
            heap = None if self.heap is None else self.heap.peak - before
            held["cache"] = max(held["cache"], kv)
            if heap is not None:
                held["heap"] = max(held["heap"] or 0, heap)
            held["both"] = max(held["both"], kv + (heap or 0))
            return out[0], out[1:]

        if len(bounds) > 1 and self._stage is not None:
            # Two-level: the chunks before the last are staged (M rows), from empty caches
            # (with staging_carry, and empty scores: [B, Hc, rows] after each layer's values).
            stage = self.stage_signature
            caches = [np.zeros(tuple(0 if d is None else d for d in t.shape), t.dtype)
                      for t in stage.inputs[2:]]
            staged, bounds_rest = bounds[:-1], bounds[-1:]
            for start, stop in staged:
                logits, caches = call(self._stage, ids[:, start:stop],
                                      np.array([start], dtype=np.int64), caches=caches)
            if self.chunked.get("staging_carry"):
                # The last chunk's selection ranks by the window: the scores stay behind.
                caches = [c for c, t in zip(caches, stage.results[1:], strict=True)
                          if t.rank == 4]
        else:
            logits, caches = call(self._prefill, ids[:, :bounds[0][1]])
            bounds_rest = bounds[1:]
        for start, stop in bounds_rest:
            logits, caches = call(self._extend, ids[:, start:stop],
                                  np.array([start], dtype=np.int64), caches=caches)
        self.last_prefill = dict(chunks=bounds, peak_cache_bytes=held["cache"],
                                 peak_heap_bytes=held["heap"], peak_bytes=held["both"],
                                 kept_heap_bytes=None if self.heap is None else self.heap.cached)
        return logits, caches

    def decode(self, token: int, position: int, caches: Sequence[np.ndarray]):
        """One step: ``(logits [1, 1, V], caches)`` with the token's K/V appended.

        When decode writes in place (``in_place``), `caches` may be a :class:`KVCache`
        (from :meth:`cache`): its buffers get the new row, no cache is copied, and the same
        object is returned. Arrays are put into a new :class:`KVCache` first (one copy, room
        for 16 more rows), which is returned. Otherwise the module returns new arrays."""
        ids = np.array([[int(token)]], dtype=np.int64)
        self._check_ids(ids)
        if self.max_positions is not None and position >= self.max_positions:
            raise ResourceLimitError(f"position {position:,} is past the model's "
                                     f"max_position_embeddings ({self.max_positions:,})")
        if isinstance(caches, RaggedKVCache):
            rows = int(caches.lengths.sum(axis=-1).max(initial=0)) + 1
        else:
            rows = max((c.shape[2] for c in caches if np.ndim(c) == 4), default=0) + 1
        check_memory(self._growth["decode"], "decode", rows, f"a cache of {rows:,} rows")
        pos = np.array([int(position)], dtype=np.int64)
        if self.in_place is None:
            out = self._decode(ids, pos, *caches)
            return out[0], out[1:]
        cache = caches if isinstance(caches, (KVCache, RaggedKVCache)) \
            else self.cache(caches, 16)
        cache.reserve(1)
        (logits,) = self._decode(ids, pos, *cache.buffers, cache.rows_argument())
        cache.appended()
        return logits, cache

    @property
    def batched(self) -> bool:
        """Whether :meth:`decode_batch` can advance this model's caches: the module has
        ``@decode_batch`` and its caches have the heads it takes (not ``gqa=expand``), in the
        model's element type (not ``kv-dtype=i8``)."""
        if self._decode_batch is None:
            return False
        pool = self.batch_signature.inputs[2]
        rows = self.batch_signature.inputs[2 + self.num_caches]
        results = self.prefill_signature.results[1:]
        if self.ragged:  # (keys, values, offsets [B, Hc + 1]) per layer
            heads = {t.shape[1] - 1 if t.shape[1] else None for t in results[2::3]}
            caches = [t for i, t in enumerate(results) if i % 3 != 2]
        else:
            heads, caches = {t.shape[1] for t in results}, results
        return heads == {rows.shape[-1]} and {t.elem for t in caches} == {pool.elem}

    @property
    def batch_size(self) -> Optional[int]:
        """The most sequences one ``@decode_batch`` call takes (None without one)."""
        return max(self._batch_steps, default=None)

    @property
    def batch_sizes(self) -> Tuple[int, ...]:
        """The sequences each batched decode step takes (``@decode_batch`` and every
        ``@decode_batch_<N>``), ascending."""
        return tuple(self._batch_steps)

    def batch_calls(self, count: int) -> List[int]:
        """The step sizes one decode step of `count` sequences calls: the largest while
        more remain than it takes, then the smallest that takes the rest (padded)."""
        sizes, calls = self.batch_sizes, []
        while count > sizes[-1]:
            calls.append(sizes[-1])
            count -= sizes[-1]
        if count:
            calls.append(next(n for n in sizes if n >= count))
        return calls

    @staticmethod
    def _check_batch_signature(name, sig, attr):
        """A batched step after ``snapkv-append-in-place layout=pool``: (ids [1, N],
        positions [N], a keys and a values pool [1, ?, D] per layer, rows [1, 3, N, Hc] per
        layer) -> logits [1, N, V]."""
        layers = len(attr.get("buffers", ())) // 2
        inputs = sig.inputs
        buffers = list(range(2, 2 + 2 * layers))
        rows = list(range(2 + 2 * layers, 2 + 3 * layers))
        if not layers or attr.get("buffers") != buffers or attr.get("rows") != rows or \
                len(inputs) != 2 + 3 * layers or len(sig.results) != 1 or \
                inputs[0].rank != 2 or inputs[1].rank != 1 or inputs[1].shape[0] is None or \
                any(t.rank != 3 or not t.buffer for t in inputs[2:2 + 2 * layers]) or \
                any(t.rank != 4 or t.shape[:2] != (1, 3) for t in inputs[2 + 2 * layers:]):
            raise ValueError(f"@{name} is not (ids [1, N], positions [N], a [1, R, D] "
                             f"pool per cache, rows [1, 3, N, Hc] per layer) -> logits, "
                             f"written in place as {attr}")

    def pool(self, rows: int = 256) -> KVPool:
        """An empty :class:`KVPool` for :meth:`decode_batch` (`rows`: each pool's first size;
        it grows as sequences are added)."""
        if not self.batched:
            raise ValueError("this model has no batched decode for its caches (export it with "
                             "batch, hf.ExportOptions(batch=True); gqa=expand and kv-dtype=i8 "
                             "caches are decoded one sequence at a time)")
        sig = self.batch_signature
        layers = len(self.batch_in_place["buffers"]) // 2
        return KVPool(layers, sig.inputs[2 + 2 * layers].shape[-1], sig.inputs[2].shape[-1],
                      sig.inputs[2].dtype, rows)

    def add_to_pool(self, pool: KVPool, key, caches: Sequence[np.ndarray], spare: int = 16):
        """Copy one sequence's caches, as prefill returns them, into `pool` as `key`."""
        pool.add(key, caches, spare, ragged=self.ragged)

    def decode_batch(self, tokens: Sequence[int], positions: Sequence[int], pool: KVPool,
                     keys: Sequence) -> np.ndarray:
        """One decode step of the sequences `keys` of `pool` in one call: sequence ``keys[i]``
        is fed ``tokens[i]`` at its logical position ``positions[i]``; its new K/V rows are
        written into its segments of the pool. Returns the logits ``[N, V]`` (row i is
        sequence i's: what :meth:`decode` would return for it alone). The calls are
        :meth:`batch_calls`: ``@decode_batch`` takes :attr:`batch_size` sequences, more are
        run in several calls, and the rest go to the smallest step that takes them
        (padded)."""
        if self._decode_batch is None:
            raise ValueError("this model has no @decode_batch (export it with batch)")
        ids = np.ascontiguousarray(np.asarray(tokens, dtype=np.int64).reshape(1, -1))
        pos = np.ascontiguousarray(np.asarray(positions, dtype=np.int64).reshape(-1))
        if ids.shape[1] != len(keys) or pos.shape[0] != len(keys) or not len(keys):
            raise ValueError(f"need one token and one position per sequence, got "
                             f"{ids.shape[1]} tokens and {pos.shape[0]} positions for "
                             f"{len(keys)} sequences")
        if len(set(keys)) != len(keys):
            raise ValueError("a sequence appears twice in one batched step")
        self._check_ids(ids)
        if pos.min() < 0 or (self.max_positions is not None and
                             pos.max() >= self.max_positions):
            raise ResourceLimitError(f"positions {pos.min():,}..{pos.max():,} are outside the "
                                     f"model's positions (0..{self.max_positions - 1:,})"
                                     if self.max_positions is not None else
                                     f"position {pos.min()} is negative")
        pool.reserve(keys, 1)
        rows, first = [], 0
        for n in self.batch_calls(len(keys)):
            part = list(keys[first:first + n])
            pad = n - len(part)
            (logits,) = self._batch_steps[n](
                np.pad(ids[:, first:first + n], ((0, 0), (0, pad))),
                np.pad(pos[first:first + n], (0, pad)), *pool.buffers,
                *pool.rows_arguments(part, n))
            rows.append(logits[0, :len(part)])
            first += n
        pool.appended(keys)
        return np.concatenate(rows)

    def compress_if_due(self, caches, tokens: Sequence[int], length: int, steps_left: int):
        """After a decode step: ``(caches, True)`` compacted by :meth:`recompress` when
        decode-time compression is due (every ``interval``-th generated token, once at least
        ``window`` were generated, when the caches hold more than ``capacity`` rows), else
        ``(caches, False)``. `tokens`: the generated tokens, the last one not yet fed (the
        others are the caches' last rows, fed at ``length, length + 1, ...``)."""
        compress, fed = self.decode_compression, len(tokens) - 1
        if not compress or fed % compress["interval"] or fed < compress["window"] or \
                caches[0].shape[2] <= compress["capacity"]:
            return caches, False
        window = compress["window"]
        kept = self.recompress(caches, tokens[fed - window:fed], length + fed - window)
        return self.cache(kept, steps_left), True

    def recompress(self, caches, ids, position: int) -> List[np.ndarray]:
        """Decode-time compression (``snapkv-compress-kv-cache decode-interval=K``): the
        caches compacted back to the decode capacity (M, default C), the last ``len(ids)``
        (= the window) tokens voting. `ids` are those tokens, the last rows of `caches`, fed
        at positions ``position ..``; they go through the attribute's ``entry`` (``@extend``,
        or its copy ``@extend_decode``) again over the caches without their rows
        (the same tokens at the same positions over the same earlier rows: their K/V again,
        and their queries), whose select keeps M rows. Returns the new caches (arrays)."""
        if self._compress is None:
            raise ValueError("decode-time compression needs a module with @extend")
        ids = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(1, -1))
        self._check_ids(ids)
        rows = ids.shape[1]
        arrays = [np.asarray(c) for c in caches]
        if any(a.shape[2] < rows for a in arrays):
            raise ValueError(f"the caches hold fewer rows than the {rows} tokens to re-feed")
        prefix = [np.ascontiguousarray(a[:, :, :a.shape[2] - rows]) for a in arrays]
        out = self._compress(ids, np.array([int(position)], dtype=np.int64), *prefix)
        return list(out[1:])

    def time_decode(self, token: int, position: int, caches: Sequence[np.ndarray],
                    repeat: int = 1) -> List[float]:
        """Seconds of `repeat` bare decode calls on `caches` (no copy of the results; in
        place, every call writes the same row)."""
        ids = np.array([[int(token)]], dtype=np.int64)
        self._check_ids(ids)
        pos = np.array([int(position)], dtype=np.int64)
        if self.in_place is None:
            return self._decode.time_call(ids, pos, *caches, repeat=repeat)
        cache = caches if isinstance(caches, (KVCache, RaggedKVCache)) \
            else self.cache(caches, 1)
        cache.reserve(1)
        return self._decode.time_call(ids, pos, *cache.buffers, cache.rows_argument(),
                                      repeat=repeat)

    @staticmethod
    def _physical(caches):
        """The caches' rows: one number, or each layer's when they differ (budget=pyramid;
        ragged: each layer's rows summed over its heads)."""
        if isinstance(caches, RaggedKVCache):
            return caches.rows
        lengths = tuple(c.shape[2] for c in caches)
        return lengths[0] if len(set(lengths)) == 1 else lengths

    def generate(self, ids=None, steps: int = 16, *, text: Optional[str] = None,
                 chat: bool = False, chunk: Optional[int] = None) -> dict:
        """Greedy decoding: prefill, then `steps` decode steps.

        The prompt is `ids` or `text`, tokenised with the checkpoint's own tokenizer (exactly
        ``AutoTokenizer.from_pretrained(dir)(text).input_ids``; `chat` applies its chat
        template first; :mod:`snapkv.tokenizer`); with `text` the result also holds
        ``text`` (the decoded continuation) and ``ids`` (the prompt's ids).

        `chunk`: chunked prefill (see :meth:`prefill`; default :attr:`default_chunk`).

        Token 0 is the argmax of prefill's last logits row. Decode step ``g`` (1-based) feeds
        token ``g - 1`` at logical position ``L + g - 1`` (L = prompt length; ``g - 1`` tokens
        have been appended to the cache before it) and yields token ``g``.

        Returns a dict:

        * ``tokens``: ``steps + 1`` generated ids (the prompt not included);
        * ``logits``: float32 ``[steps + 1, V]``: row 0 is prefill's last row (``logits[0,
          L-1]``), row ``g`` is decode step ``g``'s ``logits[0, 0]``; ``tokens[i] ==
          argmax(logits[i])`` (first index on ties, like ``np.argmax``);
        * ``positions``: the ``steps`` logical positions fed to decode (``L .. L+steps-1``);
        * ``logical_lengths``: ``steps + 1`` tokens processed, after prefill (``L``) and after
          each decode step (``L + g``): what RoPE and masks must count;
        * ``physical_lengths``: ``steps + 1`` cache rows (dim 2 of the cache tensors) after
          prefill and after each decode step; equal to ``logical_lengths`` for an unmodified
          module, ``min(L, capacity) + g`` after ``snapkv-compress-kv-cache``; a tuple of
          each cache tensor's rows when layers keep different lengths (``budget=pyramid``);
        * ``cache_shapes``: the shape of the first cache tensor at the end;
        * ``caches``: the caches after the last step (a :class:`KVCache` when decode
          writes in place: a sequence of the valid ``[B, H, T, D]`` views);
        * ``recompressed``: the steps after which decode-time compression compacted the
          caches (``snapkv-compress-kv-cache decode-interval=K``: after every K-th step, when
          the caches hold more than C rows and at least W tokens were generated; empty
          otherwise).
        """
        if (ids is None) == (text is None):
            raise ValueError("give the prompt as ids or as text (one of them)")
        if text is not None:
            if self.checkpoint_dir is None:
                raise ValueError("a text prompt needs the checkpoint's tokenizer: this model "
                                 "was not loaded from a checkpoint")
            from .. import tokenizer

            prompt = tokenizer.encode(self.checkpoint_dir, text, chat=chat)
            out = self.generate(prompt, steps, chunk=chunk)
            out["ids"] = prompt
            out["text"] = tokenizer.decode(self.checkpoint_dir, out["tokens"])
            return out
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None]
        if steps < 0:
            raise ValueError("steps must be >= 0")
        length = ids.shape[1]
        self.check_limits(length, steps, prefill_length=self._chunks(length, chunk)[0][1])
        logits, caches = self.prefill(ids, chunk=chunk)
        caches = self.cache(caches, steps)
        rows = [logits[0, -1]]
        tokens = [int(np.argmax(rows[-1]))]
        logical, physical, positions = [length], [self._physical(caches)], []
        recompressed = []
        for g in range(steps):
            position = length + g
            step_logits, caches = self.decode(tokens[-1], position, caches)
            positions.append(position)
            rows.append(step_logits[0, 0])
            tokens.append(int(np.argmax(rows[-1])))
            logical.append(length + g + 1)
            caches, done = self.compress_if_due(caches, tokens, length, steps - g - 1)
            if done:
                recompressed.append(g + 1)
            physical.append(self._physical(caches))
        return dict(tokens=tokens, logits=np.stack(rows), positions=positions,
                    logical_lengths=logical, physical_lengths=physical,
                    cache_shapes=tuple(caches[0].shape) if caches else None, caches=caches,
                    recompressed=recompressed)
