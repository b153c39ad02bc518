"""Accuracy of KV-cache policies on the retrieval task (:mod:`snapkv.tasks.retrieval`), run
through the compiled pipeline: ``snapkv-compress-kv-cache``, ``snapkv.select`` and the CPU
pipeline (``snapkv eval`` and ``snapkv needle`` drive it; docs/eval.md).

What is compiled, and why so (prefill is the cost: its attention is quadratic in L):

* **one shared prefill** per window ``W``: the checkpoint's module rewritten with
  ``gqa=mean`` and a capacity no prompt reaches (so its caches are the whole K/V, ``Hkv``
  heads), its layer functions inlined into ``@prefill`` and ``snapkv-expose-scores`` applied,
  so that it also returns each layer's select queries (the last ``W`` post-RoPE query rows,
  which every method's select ranks by). It runs once per prompt, for every method and budget;
* **one select library per (method, capacity)**: the ``snapkv.select`` ops exactly as the
  rewrite writes them for that method (clauses and effective scale copied from the rewritten
  module, one function per distinct select), compiled alone: ``select(q, K, V)`` is what the
  rewritten prefill computes for its cache results, so the compacted caches are the ones that
  method's rewritten model would return. The prompt length is dynamic in every module; the
  capacity is an attribute of the op, hence one library per capacity;
* **one decode per GQA policy**: the rewritten model's ``@decode`` (``expand`` takes ``Hq``
  cache heads; ``mean``/``max`` ``Hkv``), and the original module's for ``full``.

``python/tests/test_eval.py`` checks that this composition gives the same caches and tokens
as each method's rewritten model compiled whole (:class:`snapkv.runtime.CompiledModel`).

A prompt counts as correct when greedy decoding reproduces every answer token. Results are
cached per (model weights, method options, length, capacity, prompt seed and index, task
variant, generator version, snapkv-opt build) under ``$SNAPKV_EVAL_CACHE`` (default
``~/.cache/snapkv/eval``), so a rerun only computes what is new.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import time
from fractions import Fraction
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from . import hf, interface, tools
from .models import file_digest
from .tasks import retrieval
from .tools import REPO, ToolError

# Bumped when what a cached result means changes.
EVAL_VERSION = 1
DEFAULT_MODEL = REPO / "models" / "retrieval-llama"
DEFAULT_WINDOW = 16            # the task keeps the question inside the last 16 positions
UNBOUNDED = 1 << 40            # a capacity no prompt reaches: the select keeps everything
# A bound on the greedy tokens a text task's sample asks for (its answer's tokens and a
# margin), for refusing lengths that would reach past the model's positions.
MAX_TEXT_ANSWER_TOKENS = 16


class EvalError(Exception):
    """A problem to report as one message (bad option, missing model, failed tool)."""


# budget=adaptive: the share of each head's C - W it keeps before the layer's budget is shared
# (kvpress's AdaKVPress alpha_safeguard).
ADAPTIVE_FLOOR_SHARE = 0.2

# What a method's options override: the published SnapKV (kernel 5, gqa expand), not the
# rewrite's defaults (kernel 15, gqa mean), so that a method's name says what it measures.
PUBLISHED = {"kernel": 5, "gqa": "expand"}


@dataclasses.dataclass(frozen=True)
class Method:
    name: str
    options: Optional[dict]    # overrides of the published SnapKV; None: the full cache
    summary: str

    @property
    def full(self) -> bool:
        return self.options is None

    def window(self, default: int) -> int:
        """The method's observation window: its own, else the evaluation's."""
        return (self.options or {}).get("window", default)

    @property
    def chunk(self) -> int:
        """Chunked prefill's chunk (0: one-shot). A chunked method runs its own compiled
        model (``@prefill`` on the first chunk, ``@extend`` on the others), not the shared
        prefill: its chunks after the first attend over the compacted cache."""
        return (self.options or {}).get("chunk", 0)

    @property
    def adaptive(self) -> bool:
        """Ada-KV's shared budget (``snapkv.select_adaptive``): the rewrite's selects with
        their heads sharing the layer's budget, the ragged caches decoded by the model
        compiled with ``budget=adaptive`` (each head its own rows, appended in place)."""
        return (self.options or {}).get("budget") == "adaptive"

    def floor(self, window: int, capacity: int) -> int:
        """Positions each head keeps before the rest is shared (adaptive only): kvpress's
        AdaKVPress default, ``alpha_safeguard = 0.2`` of the head's ``C - W``."""
        return int(ADAPTIVE_FLOOR_SHARE * (capacity - self.window(window)))

    @property
    def block(self) -> int:
        """Block-granular selection's block (1: single positions)."""
        return (self.options or {}).get("block", 1)

    def capacity(self, window: int, capacity: int) -> int:
        """The capacity the method's selects get: `capacity`, except that a block method
        keeps only whole blocks, so it gets the largest ``W + n * block`` not above it
        (never more than the budget; the cache bytes measured are the smaller ones)."""
        w = self.window(window)
        if self.block == 1 or capacity <= w:
            return capacity
        return w + (capacity - w) // self.block * self.block

    def compaction(self, window: int, capacity: int, seed: int) -> hf.Compaction:
        capacity = self.capacity(window, capacity)
        options = {**PUBLISHED, **(self.options or {})}
        options.pop("window", None)
        # Two-level chunked prefill: the staging capacity is a multiple of C.
        if factor := options.pop("staging_factor", 0):
            options["staging"] = factor * capacity
        if self.adaptive:
            options["floor"] = self.floor(window, capacity)
        if options.get("scoring") == "random":
            options["seed"] = seed
        return hf.Compaction(window=self.window(window), capacity=capacity, **options)

    def key(self, window: int, seed: int) -> str:
        """What results depend on, capacity aside (names may change, options do not)."""
        if self.full:
            return "full"
        compaction = self.compaction(window, 0, seed)
        if self.adaptive:  # the floor follows the capacity: its share is the option
            compaction = dataclasses.replace(compaction, budget="uniform", floor=0)
        options = compaction.pass_options()
        if self.adaptive:
            options += f" budget=adaptive floor-share={ADAPTIVE_FLOOR_SHARE}"
        if factor := (self.options or {}).get("staging_factor"):
            # Capacity 0 gives staging 0: name the factor and what ranks the staged rows.
            options += f" staging-factor={factor} staging-scoring={compaction.staging_scoring}"
        return options.replace("capacity=0 ", "", 1)


CHUNKED_PREFIX, BLOCK_PREFIX = "chunked-", "block-"


def chunked(n: int) -> Method:
    """Chunked prefill with N-token chunks and the rewrite's defaults."""
    return Method(f"chunked-{n}", {"gqa": "mean", "kernel": 15, "chunk": n},
                  f"chunked prefill, {n} tokens a chunk, the cache compacted back to C after "
                  f"each (the rewrite's defaults: gqa mean, kernel 15); compare "
                  f"snapkv-gqa-mean-k15")


# Two-level chunked prefill: ``chunked-N-mKc`` stages the chunks at M = K x C rows ranked by
# accumulated attention (``-norm``: normalised, OpenVINO's NORM_SUM), then keeps C by the
# prompt's last window.
STAGED_SCORINGS = {"": "sum", "-norm": "norm_sum", "-votes": "votes"}


def staged(n: int, factor: int, scoring: str = "sum") -> Method:
    """Two-level chunked prefill: N-token chunks staged at ``factor`` x C rows."""
    suffix = {v: k for k, v in STAGED_SCORINGS.items()}[scoring]
    return Method(f"chunked-{n}-m{factor}c{suffix}",
                  {"gqa": "mean", "kernel": 15, "chunk": n, "staging_factor": factor,
                   "staging_scoring": scoring},
                  f"two-level chunked prefill, {n} tokens a chunk: the chunks before the last "
                  f"compacted to {factor} x C rows by {scoring} scores of the chunk's queries, "
                  f"then C kept by the prompt's last window (gqa mean, kernel 15); compare "
                  f"chunked-{n}")


def _staged_name(name: str) -> Optional[Method]:
    """``chunked-N-mKc[-norm|-votes]`` as a method, or None."""
    parts = name[len(CHUNKED_PREFIX):].split("-", 2) if name.startswith(CHUNKED_PREFIX) \
        else []
    if len(parts) < 2 or not parts[1].startswith("m") or not parts[1].endswith("c"):
        return None
    n, factor = parts[0], parts[1][1:-1]
    scoring = STAGED_SCORINGS.get("-" + parts[2] if len(parts) == 3 else "")
    if not (n.isascii() and n.isdigit() and factor.isascii() and factor.isdigit()) \
            or scoring is None or int(n) < 1 or int(factor) < 1:
        return None
    return staged(int(n), int(factor), scoring)


def blocked(n: int) -> Method:
    """Block-granular SnapKV: whole blocks of N positions, with the rewrite's defaults."""
    return Method(f"{BLOCK_PREFIX}{n}", {"gqa": "mean", "kernel": 15, "block": n},
                  f"SnapKV keeping whole blocks of {n} positions ranked by their summed "
                  f"pooled votes (gqa mean, kernel 15; C rounded down to W + a multiple of "
                  f"{n}); compare snapkv-gqa-mean-k15")


_METHODS = [
    Method("full", None, "the original module: every prompt position cached"),
    Method("snapkv", {}, "SnapKV: votes of the window, avg pooling kernel 5, gqa expand"),
    Method("snapkv-gqa-mean", {"gqa": "mean"}, "SnapKV, votes averaged over a kv head's "
           "query heads (Hkv cache heads)"),
    Method("snapkv-gqa-max", {"gqa": "max"}, "SnapKV, votes maximised over a kv head's "
           "query heads (Hkv cache heads)"),
    Method("snapkv-k1", {"kernel": 1}, "SnapKV without pooling (kernel 1)"),
    Method("snapkv-k7", {"kernel": 7}, "SnapKV, pooling kernel 7"),
    Method("snapkv-k15", {"kernel": 15}, "SnapKV, pooling kernel 15"),
    Method("snapkv-k31", {"kernel": 31}, "SnapKV, pooling kernel 31"),
    Method("snapkv-gqa-mean-k7", {"gqa": "mean", "kernel": 7}, "SnapKV, gqa mean, pooling "
           "kernel 7"),
    Method("snapkv-gqa-mean-k15", {"gqa": "mean", "kernel": 15}, "SnapKV, gqa mean, "
           "pooling kernel 15"),
    Method("snapkv-maxpool", {"pooling": "max"}, "SnapKV, max pooling"),
    Method("snapkv-w64", {"window": 64}, "SnapKV with a 64-query observation window "
           "(kvpress's default), whatever --window says"),
    Method("snapkv-order-score", {"order": "score"}, "SnapKV, kept positions ordered by "
           "score"),
    Method("snapkv-prefix-softmax", {"scoring": "prefix_votes"}, "SnapKV with the window "
           "columns left out of the softmax denominator (as TRT-LLM does)"),
    Method("pyramid", {"budget": "pyramid"}, "PyramidKV: SnapKV's selection with per-layer "
           "budgets falling from the lowest layer to the highest (beta 20), the same total"),
    Method("pyramid-gqa-mean-k15", {"gqa": "mean", "kernel": 15, "budget": "pyramid"},
           "PyramidKV's per-layer budgets with the rewrite's defaults (gqa mean, kernel 15)"),
    Method("inverted-pyramid", {"budget": "inverted-pyramid"}, "PyramidKV's per-layer "
           "budgets the other way up: fewer positions in lower layers, more in upper ones"),
    Method("inverted-pyramid-gqa-mean-k15", {"gqa": "mean", "kernel": 15,
                                             "budget": "inverted-pyramid"},
           "the inverted pyramid with the rewrite's defaults (gqa mean, kernel 15)"),
    Method("ada-snapkv", {"budget": "adaptive"}, "Ada-KV: SnapKV's scores, one budget per "
           "layer shared by its heads (each first keeps 20 % of C - W), a ragged cache "
           "decoded by the PyTorch reference"),
    Method("ada-snapkv-gqa-mean", {"gqa": "mean", "budget": "adaptive"}, "Ada-KV's shared "
           "budget over gqa-mean scores (Hkv cache heads): kvpress's AdaKV(SnapKV)"),
    Method("ada-snapkv-gqa-mean-k15", {"gqa": "mean", "kernel": 15, "budget": "adaptive"},
           "Ada-KV's shared budget with the rewrite's defaults (gqa mean, kernel 15)"),
    *(chunked(n) for n in (512, 1024, 2048)),
    blocked(16),
    Method("streaming", {"scoring": "recent"}, "StreamingLLM: 4 attention sinks and the "
           "most recent positions"),
    Method("streaming-gqa-mean", {"scoring": "recent", "gqa": "mean"}, "StreamingLLM with "
           "Hkv cache heads (its positions do not depend on the head): the bytes of the "
           "gqa-mean methods at the same budget"),
    Method("random", {"scoring": "random"}, "uniformly drawn prefix positions plus the "
           "window (seeded with --seed)"),
]
METHODS: Dict[str, Method] = {m.name: m for m in _METHODS}


def method(name: str) -> Optional[Method]:
    """The method called `name`: one of :data:`METHODS`, ``chunked-N`` for any chunk N >= 1,
    ``chunked-N-mKc`` (two-level, staged at K x C rows; ``-norm`` / ``-votes`` for the staging
    scoring) or ``block-N`` for any block N >= 1 (the ones in METHODS are those ``all``
    runs); None for another name."""
    if name in METHODS:
        return METHODS[name]
    for prefix, make in ((CHUNKED_PREFIX, chunked), (BLOCK_PREFIX, blocked)):
        digits = name[len(prefix):] if name.startswith(prefix) else ""
        if digits.isascii() and digits.isdigit() and int(digits) >= 1:
            return make(int(digits))
    return _staged_name(name)


DEFAULT_BUDGETS = (Fraction(1, 2), Fraction(1, 4), Fraction(1, 8), Fraction(1, 16))


def capacity_of(length: int, budget: Fraction) -> int:
    return int(length * budget)


def fraction_text(budget: Fraction) -> str:
    return f"{budget.numerator}/{budget.denominator}" if budget.numerator != 1 or \
        budget.denominator != 1 else "1"


# ---------------------------------------------------------------------------------------------
# snapkv-opt and the compiled pieces

def _opt(arguments: Sequence[str], text: str) -> str:
    try:
        return tools.opt(arguments, text=text).stdout
    except tools.ToolFailed as error:
        raise EvalError(f"snapkv-opt {' '.join(arguments)} failed: "
                        f"{first_error(error.stderr)}") from None
    except tools.ToolError as error:
        raise EvalError(str(error)) from None


def first_error(stderr: str) -> str:
    """The first ``error:`` line of `stderr` (or its end)."""
    return next((line for line in stderr.splitlines() if "error:" in line),
                stderr.strip()[-300:])


def prefill_selects(rewritten: str) -> List[dict]:
    """The selects of @prefill in layer order (layer functions inlined), as
    ``snapkv-describe-module`` reports them (clauses, properties, operand and result
    types)."""
    inlined = _opt(["--symbol-privatize=exclude=prefill", "--inline", "--symbol-dce"], rewritten)
    found = list(interface.describe(inlined).function("prefill").selects)
    if not found:
        raise EvalError("the rewritten module's @prefill holds no snapkv.select or "
                        "snapkv.select_adaptive")
    return found


def select_module(selects: List[dict]) -> tuple:
    """(module text, per layer the function name): one function per distinct select, each
    the select alone (``snapkv.select`` or ``snapkv.select_adaptive``), written in generic
    form from what ``snapkv-describe-module`` said."""
    functions, names = {}, []
    for select in selects:
        key = (select["op"], select["properties"], tuple(t["text"] for t in select["operands"]),
               tuple(t["text"] for t in select["results"]))
        if key not in functions:
            functions[key] = f"select_{len(functions)}"
        names.append(functions[key])
    bodies = []
    for (op, properties, operands, results), name in functions.items():
        q, k, v = operands
        result_list = ", ".join(results)
        values = ", ".join(f"%r#{i}" for i in range(len(results)))
        bodies.append(
            f"  func.func @{name}(%q: {q}, %k: {k}, %v: {v}) -> ({result_list}) {{\n"
            f"    %r:{len(results)} = \"{op}\"(%q, %k, %v) <{properties}> : "
            f"({', '.join(operands)}) -> ({result_list})\n"
            f"    return {values} : {result_list}\n  }}")
    return "module {\n" + "\n".join(bodies) + "\n}\n", names


def _function(library, name: str, text: str, bound=()):
    from . import runtime

    return runtime.CompiledFunction(ctypes.CDLL(str(library.path)), name,
                                    runtime.signature(text, name), bound)


def model_digest(directory: Path) -> str:
    """The checkpoint's config.json and safetensors files (names and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(Path(directory).iterdir()):
        if path.name == "config.json" or path.suffix == ".safetensors":
            digest.update(f"{path.name}\n{file_digest(path)}\n".encode())
    return digest.hexdigest()


class Pipeline:
    """The compiled pieces for one checkpoint and window (see the module docstring); each is
    compiled (or loaded from the runner's cache) on first use."""

    def __init__(self, model_dir: Path, window: int = DEFAULT_WINDOW,
                 log: Optional[Callable[[str], None]] = None, measure_prefill: bool = False,
                 dtype: str = "f32"):
        """`measure_prefill`: also run each one-shot cell's own compiled model once (its
        first prompt) to measure what its prefill holds and takes; chunked methods are
        always measured (they answer with their own model). `dtype`: the element type the
        checkpoint is exported in (:class:`snapkv.hf.ExportOptions`)."""
        from .frontend.checkpoint import Checkpoint, CheckpointError

        self.model_dir, self.window, self.dtype = Path(model_dir), window, dtype
        self.measure_prefill = measure_prefill
        # The query rows the shared prefill exposes: the widest window of the methods run
        # (a narrower window's queries are the last rows of these, the same values).
        self.query_rows = window
        self.log = log or (lambda message: None)
        if not (self.model_dir / "config.json").is_file():
            raise EvalError(f"no model at {self.model_dir} (config.json missing): "
                            f"scripts/train_retrieval_model.py writes one; or pass --model DIR")
        try:
            self.checkpoint = Checkpoint(self.model_dir)
        except CheckpointError as error:
            raise EvalError(str(error)) from None
        self.max_positions = self.checkpoint.config.get("max_position_embeddings")
        self.digest = model_digest(self.model_dir)
        self._exported = None
        self._exported_extend = None
        self._models: Dict[tuple, object] = {}
        self._weights = None
        self._prefill = None
        self._selects: Dict[tuple, tuple] = {}
        self._decoders: Dict[str, object] = {}
        self.compile_seconds = 0.0

    # -- pieces ---------------------------------------------------------------------------

    @property
    def exported(self):
        if self._exported is None:
            self.log(f"exporting {self.model_dir} (torch-mlir; cached after the first time) ...")
            try:
                self._exported = hf.export(self.checkpoint, hf.ExportOptions(dtype=self.dtype))
            except (ToolError, hf.CheckpointError) as error:
                raise EvalError(f"exporting {self.model_dir}: {error}") from None
        return self._exported

    @property
    def exported_extend(self):
        """The export with ``@extend`` (chunked prefill)."""
        if self._exported_extend is None:
            try:
                self._exported_extend = hf.export(
                    self.checkpoint, hf.ExportOptions(extend=True, dtype=self.dtype))
            except (ToolError, hf.CheckpointError) as error:
                raise EvalError(f"exporting {self.model_dir}: {error}") from None
        return self._exported_extend

    def _rewrite(self, compaction: hf.Compaction, text: Optional[str] = None) -> str:
        try:
            return hf.rewrite(self.exported.text if text is None else text, compaction)
        except ToolError as error:
            # The header line names the command; the diagnostic says what was wrong.
            stderr = getattr(error, "stderr", None) or ""
            detail = f" {first_error(stderr)}" if stderr.strip() else ""
            raise EvalError(str(error).splitlines()[0] + detail) from None

    def own_model(self, method: Method, capacity: int, seed: int):
        """The whole model of `method` at `capacity`, compiled (the original for ``full``):
        what a user would run. Chunked methods answer with it; the others use it to measure
        what their prefill holds."""

        key = ("full",) if method.full else (method.key(self.window, seed), capacity)
        if key not in self._models:
            if method.full:
                text, label = self.exported.text, "original model"
            elif method.chunk:
                text = self._rewrite(method.compaction(self.window, capacity, seed),
                                     self.exported_extend.text)
                label = f"{method.name} model, C={capacity}"
            else:
                text = self._rewrite(method.compaction(self.window, capacity, seed))
                label = f"{method.name} model, C={capacity}"
            self._models[key] = self._compiled_model(text, label)
        return self._models[key]

    def _compiled_model(self, text: str, label: str):
        from .runtime import CompiledModel

        start = time.perf_counter()
        try:
            model = CompiledModel(text, weights=self.checkpoint,
                                  max_positions=self.max_positions)
        except ToolError as error:
            raise EvalError(f"compiling the {label} failed: {error}") from None
        self.compile_seconds += time.perf_counter() - start
        self.log(f"  {label}: {'cached library' if model.from_cache else 'compiled'} "
                 f"({model.library.seconds:.1f} s)")
        return model

    def measured_prefill(self, model, ids: np.ndarray):
        """(logits of the last position [V], caches, what prefill held and its seconds) of
        `model` (:meth:`own_model`) on `ids`."""
        start = time.perf_counter()
        logits, caches = model.prefill(np.ascontiguousarray(ids[None], dtype=np.int64))
        seconds = time.perf_counter() - start
        held = dict(model.last_prefill)
        return logits[0, -1], caches, dict(cache=held["peak_cache_bytes"],
                                           heap=held["peak_heap_bytes"],
                                           total=held["peak_bytes"],
                                           chunks=len(held["chunks"]), seconds=seconds)

    def _compile(self, text: str, label: str):
        from . import runtime

        start = time.perf_counter()
        try:
            library = runtime.compile_library(text, label=label)
        except ToolError as error:
            raise EvalError(f"compiling the {label} failed: {error}") from None
        self.compile_seconds += time.perf_counter() - start
        self.log(f"  {label}: {'cached library' if library.from_cache else 'compiled'} "
                 f"({library.seconds:.1f} s)")
        return library

    def _bound(self, text: str, name: str):
        from . import runtime
        from .frontend.checkpoint import weight_arrays

        if self._weights is None:
            self._weights = {}
        sig = runtime.signature(text, name)
        wanted = {n: (t.shape, t.elem) for n, t in sig.weight_args}
        if any(n not in self._weights for n in wanted):
            from .frontend.checkpoint import CheckpointError

            try:
                arrays, _ = weight_arrays(self.checkpoint, wanted)
            except CheckpointError as error:
                raise EvalError(str(error)) from None
            self._weights.update(arrays)
        return [self._weights[n] for n in wanted]

    def shared_prefill(self):
        if self._prefill is None:
            from . import runtime

            rewritten = self._rewrite(hf.Compaction(window=self.query_rows,
                                                    capacity=UNBOUNDED, gqa="mean"))
            only_prefill = ["--symbol-privatize=exclude=prefill", "--symbol-dce"]
            layers = hf.layer_functions(rewritten)
            if layers:
                # One function per layer (hf.export): the layer returns its select's arrays
                # and @prefill passes them out, so the layer is compiled once, not inlined
                # 30 times (which a 30-layer model's CPU pipeline cannot hold in 24 GiB).
                text = _opt([*only_prefill, f"--snapkv-expose-scores=functions={layers[0]} "
                                            f"through-callers=true"], rewritten)
                glue = runtime.glue_function(text, "prefill")
            else:
                text = _opt([*only_prefill, "--inline", "--snapkv-expose-scores="
                                                        "functions=prefill"], rewritten)
                glue = None
            label = "shared prefill (rewritten, scores exposed)"
            if glue is None:
                library = self._compile(text, label)
                self._prefill = _function(library, "prefill", text,
                                          self._bound(text, "prefill"))
            else:
                compiled = runtime.without_glue(text, [glue])
                library = self._compile(compiled, label)
                lib = ctypes.CDLL(str(library.path))
                functions = {callee: runtime.CompiledFunction(lib, callee,
                                                              runtime.signature(compiled, callee))
                             for callee in glue.callees}
                self._prefill = runtime.GlueRunner(glue, runtime.signature(text, "prefill"),
                                                   functions, self._bound(text, "prefill"))
        return self._prefill

    def need_rows(self, methods: Sequence[Method]):
        """Make the shared prefill expose enough query rows for every method's window."""
        rows = max([self.window] + [m.window(self.window) for m in methods])
        if rows > self.query_rows:
            self.query_rows, self._prefill = rows, None

    def selects(self, method: Method, capacity: int, seed: int):
        """Per layer a compiled select(q, K, V) -> (K', V', indices) of `method`."""
        key = (method.key(self.window, seed), capacity)
        if key not in self._selects:
            rewritten = self._rewrite(method.compaction(self.window, capacity, seed))
            text, names = select_module(prefill_selects(rewritten))
            library = self._compile(text, f"{method.name} select, C={capacity}")
            functions = {n: _function(library, n, text) for n in set(names)}
            self._selects[key] = [functions[n] for n in names]
        return self._selects[key]

    def decoder(self, method: Method):
        """A CompiledModel whose @decode is the method's (its @prefill is not used): the
        original's, the rewrite's for the method's gqa policy, or (adaptive) the ragged one."""

        gqa = "full" if method.full else {**PUBLISHED, **method.options}["gqa"]
        key = f"adaptive-{gqa}" if method.adaptive else gqa
        if key not in self._decoders:
            if gqa == "full":
                text, label = self.exported.text, "original model (decode)"
            elif method.adaptive:
                # Decode does not depend on the capacity; one the select can verify.
                capacity = max(self.max_positions or 0, self.window + 1)
                text = self._rewrite(hf.Compaction(window=self.window, capacity=capacity,
                                                   gqa=gqa, budget="adaptive"))
                label = f"ragged decode, gqa {gqa}"
            else:
                text = self._rewrite(hf.Compaction(window=self.window, capacity=UNBOUNDED,
                                                   gqa=gqa))
                label = f"decode, gqa {gqa}"
            self._decoders[key] = self._compiled_model(text, label)
        return self._decoders[key]

    # -- running --------------------------------------------------------------------------

    def prefill(self, ids: np.ndarray):
        """(logits of the last position [V], full caches [k0, v0, ...], window queries per
        layer)."""
        outputs = self.shared_prefill()(np.ascontiguousarray(ids[None], dtype=np.int64))
        layers = (len(outputs) - 1) // 7  # logits, 2 caches and 5 exposed arrays per layer
        caches = outputs[1:1 + 2 * layers]
        queries = [outputs[1 + 2 * layers + 5 * i] for i in range(layers)]
        return outputs[0][0, -1], caches, queries

    def compact(self, method: Method, capacity: int, seed: int, caches, queries):
        """(compacted caches, kept indices per layer [1, Hc, C]). With an adaptive method
        the caches are per layer packed keys and values ``[1, T, D]`` and their offsets ``[1,
        Hc + 1]`` (what its compiled prefill returns), and each layer's kept indices a list
        (batch 0) of the heads' index arrays, of different lengths."""
        functions = self.selects(method, capacity, seed)
        rows = method.window(self.window)
        out, kept = [], []
        for layer, function in enumerate(functions):
            q = np.ascontiguousarray(queries[layer][:, :, -rows:, :])
            k, v, index, *offsets = function(q, caches[2 * layer], caches[2 * layer + 1])
            out += [k, v, *offsets]
            if offsets:
                bounds = offsets[0][0]
                index = [[index[0, a:b] for a, b in zip(bounds[:-1], bounds[1:])]]
            kept.append(index)
        return out, kept

    @staticmethod
    def cache_bytes(method: Method, caches) -> int:
        """Bytes of the K/V rows in `caches` (an adaptive method's offsets not counted)."""
        step = 3 if method.adaptive else 2
        return int(sum(c.nbytes for i, c in enumerate(caches) if i % step < 2))

    def answer(self, method: Method, first: int, length: int, steps: int, caches, model=None):
        """Greedy tokens: `first` (from prefill) and `steps` decode steps on `caches` (not
        modified: the decoder's cache is a copy with room for the steps) with `model`'s
        decode (default: the method's decoder)."""
        model = model or self.decoder(method)
        tokens = [int(first)]
        caches = model.cache(caches, steps)  # each step writes its row in place
        for g in range(steps):
            logits, caches = model.decode(tokens[-1], length + g, caches)
            tokens.append(int(np.argmax(logits[0, 0])))
        return tokens

    def decode_ms(self, method: Method, token: int, length: int, caches,
                  repeat: int = 3, model=None) -> float:
        """Median milliseconds of one bare decode step on `caches`."""
        times = (model or self.decoder(method)).time_decode(token, length, caches,
                                                            repeat=repeat)
        return float(np.median(times) * 1e3)

    def compiler_digest(self) -> str:
        from .runtime.cache import _file_digest

        return _file_digest(tools.require(tools.snapkv_opt(), "snapkv-opt").resolve())


# ---------------------------------------------------------------------------------------------
# Tasks: what a prompt is and when its answer is right

@dataclasses.dataclass
class EvalSample:
    """One prompt as the eval runs it: `ids` [L]; `steps` decode steps after prefill's token;
    `judge(tokens)` says whether the greedy tokens answer it; `positions`: the prompt
    positions that hold the answer (what ``answer_kept`` looks for); `spans`: (start, end,
    role) of each needle, for the plots; `answer`: what is expected (JSON)."""
    ids: np.ndarray
    index: int
    steps: int
    answer: object
    positions: np.ndarray
    judge: Callable[[List[int]], bool]
    spans: List[tuple]
    said: Callable[[List[int]], Optional[str]] = lambda tokens: None

    @property
    def length(self) -> int:
        return int(self.ids.shape[0])


class RetrievalTask:
    """The synthetic retrieval task (:mod:`snapkv.tasks.retrieval`): right when the greedy
    tokens are exactly the answer's; ``answer_kept`` is the share of (layer, head) caches
    that hold every answer token."""
    default_window = DEFAULT_WINDOW

    def __init__(self, variant: str = retrieval.DEFAULT_VARIANT):
        self.variant = variant
        self.name = variant

    def key(self) -> dict:
        return dict(variant=self.variant, generator=retrieval.GENERATOR_VERSION)

    def min_length(self) -> int:
        return retrieval.min_length(self.variant)

    def max_new_tokens(self) -> int:
        return retrieval.VARIANTS[self.variant].answer_len[1]

    def check(self, pipeline: "Pipeline"):
        vocab = pipeline.checkpoint.config.get("vocab_size")
        if vocab is not None and vocab < retrieval.VOCAB_SIZE:
            raise EvalError(f"{pipeline.model_dir}: vocabulary of {vocab} ids, the retrieval "
                            f"task uses {retrieval.VOCAB_SIZE}")

    def sample(self, length: int, seed: int, index: int) -> EvalSample:
        return self.wrap(retrieval.generate(length, seed, self.variant, index))

    @staticmethod
    def wrap(sample) -> EvalSample:
        answer = sample.answer.tolist()
        return EvalSample(sample.ids, sample.index, len(answer) - 1, answer,
                          sample.value_positions, lambda tokens: list(tokens) == answer,
                          [(n.start, n.start + n.length, n.role) for n in sample.needles])

    @staticmethod
    def kept_share(sample: EvalSample, kept) -> float:
        return float(np.mean([np.isin(sample.positions, row).all()
                              for layer in kept for row in layer[0]]))


class TextTask:
    """A real-text task (:mod:`snapkv.tasks.text`: passkey, needle, multikey) tokenised with
    the checkpoint's own tokenizer: right when the answer string appears in the decoded
    greedy continuation; ``answer_kept`` is the mean share of the asked needle's tokens that
    a (layer, head) cache holds."""
    default_window = 32

    def __init__(self, name: str, checkpoint_dir: Path):
        from .tasks import text

        if name not in text.TASKS:
            raise EvalError(f"unknown task {name!r} (choose from {', '.join(text.TASKS)})")
        self.name, self.directory, self._text = name, Path(checkpoint_dir), text

    def _tokenizer(self):
        from . import tokenizer

        try:
            return tokenizer.load(self.directory)
        except tokenizer.TokenizerError as error:
            raise EvalError(str(error)) from None

    def key(self) -> dict:
        digest = hashlib.sha256()
        for name in sorted(p.name for p in self.directory.iterdir()
                           if p.name.startswith(("tokenizer", "special_tokens", "vocab"))):
            digest.update(name.encode() + file_digest(self.directory / name).encode())
        # The needle/multikey filler is this Python's own documentation (pydoc_data), which
        # differs between Python versions: its digest is part of what a prompt depends on.
        return dict(variant=f"text:{self.name}",
                    generator=[self._text.GENERATOR_VERSION, self._text.TASK_VERSIONS[self.name]],
                    tokenizer=digest.hexdigest(), prose=self._text.prose_digest())

    def min_length(self) -> int:
        return 0  # the generator refuses a length too short for its sentences, with the reason

    def max_new_tokens(self) -> int:
        return MAX_TEXT_ANSWER_TOKENS

    def check(self, pipeline: "Pipeline"):
        self._tokenizer()

    def sample(self, length: int, seed: int, index: int) -> EvalSample:
        from . import tokenizer

        try:
            found = self._text.generate(self.name, length, seed, index, self._tokenizer())
        except ValueError as error:
            raise EvalError(str(error)) from None

        def said(tokens):
            return tokenizer.decode(self.directory, tokens)

        return EvalSample(np.asarray(found.ids, dtype=np.int64), index,
                          found.max_new_tokens - 1, found.answer,
                          np.asarray(found.needle_positions),
                          lambda tokens: self._text.correct(found, said(tokens)),
                          [(int(found.needle_positions.min()),
                            int(found.needle_positions.max()) + 1, "asked")], said)

    @staticmethod
    def kept_share(sample: EvalSample, kept) -> float:
        return float(np.mean([np.isin(sample.positions, row).mean()
                              for layer in kept for row in layer[0]]))


def wilson(correct: int, n: int, z: float = 1.959964) -> tuple:
    """The 95 % Wilson score interval of `correct` successes in `n` trials."""
    if n == 0:
        return (None, None)
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, float(centre - half)), min(1.0, float(centre + half)))


# ---------------------------------------------------------------------------------------------
# Results cache

def default_cache_dir() -> Path:
    if os.environ.get("SNAPKV_EVAL_CACHE"):
        return Path(os.environ["SNAPKV_EVAL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "snapkv" / "eval"


class ResultCache:
    """One JSON file per (model, method options, length, capacity, seed, variant, window,
    generator, compiler): {"key": ..., "samples": {index: result}, "decode_ms": ...}."""

    def __init__(self, directory: Optional[Path], enabled: bool = True):
        self.directory = Path(directory) if directory else default_cache_dir()
        self.enabled = enabled
        self._files: Dict[str, dict] = {}

    def _name(self, key: dict) -> str:
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]

    def entry(self, key: dict) -> dict:
        name = self._name(key)
        if name not in self._files:
            data = {"key": key, "samples": {}, "decode_ms": None}
            path = self.directory / f"{name}.json"
            if self.enabled and path.is_file():
                try:
                    loaded = json.loads(path.read_text())
                    if loaded.get("key") == key:
                        data = loaded
                except (OSError, ValueError):
                    pass  # unreadable: recomputed and rewritten
            self._files[name] = data
        return self._files[name]

    def save(self, key: dict):
        if not self.enabled:
            return
        name = self._name(key)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            staged = self.directory / f".{name}.{os.getpid()}"
            staged.write_text(json.dumps(self._files[name]))
            os.replace(staged, self.directory / f"{name}.json")
        except OSError:
            pass  # a cache that cannot be written only costs time


# ---------------------------------------------------------------------------------------------
# The suite

@dataclasses.dataclass
class Job:
    """One (length, method, budget) cell; `capacity` is the length for `full`."""
    length: int
    method: Method
    budget: Fraction
    capacity: int
    key: dict = None


def jobs_for(lengths, methods, budgets) -> List[Job]:
    jobs = []
    for length in lengths:
        for method in methods:
            if method.full:
                jobs.append(Job(length, method, Fraction(1), length))
            else:
                jobs += [Job(length, method, b, capacity_of(length, b)) for b in budgets]
    return jobs


def check_jobs(jobs: List[Job], window: int, task, max_positions: Optional[int]):
    """Refuse, before anything runs, what cannot be evaluated (one message)."""
    if isinstance(task, str):
        task = RetrievalTask(task)
    shortest = task.min_length()
    longest_answer = task.max_new_tokens()
    for job in jobs:
        need = max(shortest, job.method.window(window) + 1)
        if job.length < need:
            raise EvalError(f"length {job.length} is too short: the {task.name!r} task needs "
                            f"at least {need} tokens")
        if max_positions is not None and job.length + longest_answer - 1 > max_positions:
            raise EvalError(f"length {job.length} and up to {longest_answer} answer tokens "
                            f"reach past the model's max_position_embeddings ({max_positions})")
        if not job.method.full and job.capacity <= job.method.window(window):
            raise EvalError(f"budget {fraction_text(job.budget)} of length {job.length} is "
                            f"C={job.capacity}, not more than {job.method.name}'s window "
                            f"({job.method.window(window)}): the "
                            f"capacity counts the window; use a larger budget or length")
        if not job.method.full and \
                job.method.capacity(window, job.capacity) <= job.method.window(window):
            raise EvalError(f"budget {fraction_text(job.budget)} of length {job.length} is "
                            f"C={job.capacity}, which leaves less than one block of "
                            f"{job.method.block} after {job.method.name}'s window "
                            f"({job.method.window(window)}); use a larger budget or length")


def evaluate(pipeline: Pipeline, lengths: Sequence[int], methods: Sequence[Method],
             budgets: Sequence[Fraction], samples: int, seed: int,
             variant=retrieval.DEFAULT_VARIANT, cache: Optional[ResultCache] = None,
             progress: Optional[Callable] = None, keep_indices: Optional[dict] = None) \
        -> List[dict]:
    """The result rows (see :func:`summarise`). `variant`: a retrieval variant's name or a
    task object (:class:`RetrievalTask`, :class:`TextTask`). `progress(done, total, note)` is
    called after each prompt. `keep_indices`, a dict, receives {(length, method name,
    capacity, index): kept indices per layer} for the prompts computed in this call."""
    task = RetrievalTask(variant) if isinstance(variant, str) else variant
    cache = cache or ResultCache(None, enabled=False)
    jobs = jobs_for(lengths, methods, budgets)
    task.check(pipeline)
    check_jobs(jobs, pipeline.window, task, pipeline.max_positions)
    compiler = pipeline.compiler_digest()
    for job in jobs:
        job.key = dict(version=EVAL_VERSION, model=pipeline.digest,
                       method=job.method.key(pipeline.window, seed), length=job.length,
                       capacity=job.capacity, window=pipeline.window, seed=seed,
                       compiler=compiler, **task.key())
        if pipeline.dtype != "f32":  # f32 results keep the keys they were stored under
            job.key["dtype"] = pipeline.dtype
    total = len(lengths) * samples
    done, computed, start = 0, 0, time.perf_counter()
    for length in lengths:
        here = [j for j in jobs if j.length == length]
        for index in range(samples):
            missing = [j for j in here if str(index) not in cache.entry(j.key)["samples"]
                       or (index == 0 and _unmeasured(pipeline, j, cache))]
            if missing:
                sample = task.sample(length, seed, index)
                _run_sample(pipeline, sample, missing, seed, cache, keep_indices, task)
                computed += 1
            done += 1
            if progress:
                progress(done, total, f"L={length} prompt {index + 1}/{samples}"
                         + ("" if missing else " (cached)"), computed,
                         time.perf_counter() - start)
    return summarise(jobs, samples, cache)


def answer_prompt(pipeline: Pipeline, sample, cells: Sequence[tuple], seed: int,
                  timed: Callable[[int], bool] = lambda i: True, task=None) -> List[dict]:
    """Answer `sample` (an :class:`EvalSample`, or a retrieval sample) with each (method,
    capacity) of `cells` after one shared prefill: per cell dict(tokens, answer, correct,
    answer_kept, kept_bytes, decode_ms (None where `timed(i)` is false), kept (indices per
    layer; None for full), prefill (what the method's own model's prefill held and took:
    measured where `timed(i)`, and on every prompt for a chunked method, which answers with
    its own model; else None), and for text tasks said (the decoded continuation))."""
    if not isinstance(sample, EvalSample):
        sample, task = RetrievalTask.wrap(sample), RetrievalTask
    task = task or RetrievalTask
    length, steps = sample.length, sample.steps
    pipeline.need_rows([method for method, _ in cells])
    logits, caches, queries = pipeline.prefill(sample.ids)
    first = int(np.argmax(logits))
    out = []
    for i, (method, capacity) in enumerate(cells):
        model, held, start = None, None, first
        if method.chunk:
            # Its own prefill: chunks after the first attend over the compacted cache. The
            # kept rows are rows of the last chunk's concatenation, not prompt positions.
            model = pipeline.own_model(method, capacity, seed)
            row, kept_caches, held = pipeline.measured_prefill(model, sample.ids)
            start, kept = int(np.argmax(row)), None
        elif method.full:
            kept_caches, kept = caches, None
        else:
            kept_caches, kept = pipeline.compact(method, capacity, seed, caches, queries)
        if held is None and timed(i) and pipeline.measure_prefill and not method.adaptive:
            _, _, held = pipeline.measured_prefill(pipeline.own_model(method, capacity, seed),
                                                   sample.ids)
        tokens = pipeline.answer(method, start, length, steps, kept_caches, model)
        result = dict(
            tokens=tokens, answer=sample.answer, correct=bool(sample.judge(tokens)),
            answer_kept=None if method.chunk else
            1.0 if kept is None else task.kept_share(sample, kept),
            kept_bytes=pipeline.cache_bytes(method, kept_caches),
            decode_ms=pipeline.decode_ms(method, start, length, kept_caches, model=model)
            if timed(i) else None, kept=kept, prefill=held)
        said = sample.said(tokens)
        if said is not None:
            result["said"] = said
        out.append(result)
    return out


def _run_sample(pipeline: Pipeline, sample: EvalSample, jobs: List[Job], seed: int,
                cache: ResultCache, keep_indices: Optional[dict], task):
    entries = [cache.entry(job.key) for job in jobs]
    results = answer_prompt(pipeline, sample, [(j.method, j.capacity) for j in jobs], seed,
                            timed=lambda i: entries[i].get("decode_ms") is None
                            or _unmeasured(pipeline, jobs[i], cache), task=task)
    for job, entry, result in zip(jobs, entries, results):
        kept = result.pop("kept")
        decode_ms = result.pop("decode_ms")
        prefill = result.pop("prefill")
        entry["samples"][str(sample.index)] = result
        if decode_ms is not None:
            entry["decode_ms"] = decode_ms
        if prefill is not None:
            entry.setdefault("prefill", {})[str(sample.index)] = prefill
        cache.save(job.key)
        if keep_indices is not None and kept is not None:
            keep_indices[(job.length, job.method.name, job.capacity, sample.index)] = kept


def _unmeasured(pipeline: Pipeline, job: Job, cache: ResultCache) -> bool:
    """A cell to measure (``measure_prefill``; not adaptive methods) whose own prefill was
    never measured: its first prompt is run again to measure it."""
    return pipeline.measure_prefill and not job.method.adaptive and \
        not cache.entry(job.key).get("prefill")


def _prefill_summary(measured: dict) -> dict:
    """The most bytes a method's own prefill held (the largest over the prompts measured:
    K/V held by the runner, the compiled code's heap in one call, their sum) and its median
    seconds; None where nothing was measured."""
    runs = list(measured.values())
    if not runs:
        return dict(peak_cache_bytes=None, peak_heap_bytes=None, peak_bytes=None,
                    prefill_s=None)
    return dict(peak_cache_bytes=max(r["cache"] for r in runs),
                peak_heap_bytes=max((r["heap"] or 0) for r in runs) or None,
                peak_bytes=max(r["total"] for r in runs),
                prefill_s=float(np.median([r["seconds"] for r in runs])))


def summarise(jobs: List[Job], samples: int, cache: ResultCache) -> List[dict]:
    rows = []
    for job in jobs:
        entry = cache.entry(job.key)
        found = [entry["samples"][str(i)] for i in range(samples)
                 if str(i) in entry["samples"]]
        correct = sum(r["correct"] for r in found)
        rows.append(dict(
            method=job.method.name, length=job.length, budget=float(job.budget),
            budget_fraction=fraction_text(job.budget), capacity=job.capacity,
            accuracy=correct / len(found) if found else None, n=len(found), correct=correct,
            interval=wilson(correct, len(found)) if found else None,
            answer_kept=float(np.mean([r["answer_kept"] for r in found]))
            if found and all(r["answer_kept"] is not None for r in found) else None,
            kept_bytes=found[0]["kept_bytes"] if found else None,
            decode_ms=entry.get("decode_ms"), **_prefill_summary(entry.get("prefill", {}))))
    return rows
