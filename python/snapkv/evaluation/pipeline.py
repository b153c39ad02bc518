"""The compiled pieces the evaluation runs a prompt through, and why so (prefill is the
cost: its attention is quadratic in L):

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
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from .. import hf, interface, tools
from ..models import file_digest
from ..reference import quantize_rows
from ..tools import ToolError
from . import DEFAULT_WINDOW, EvalError
from .methods import PUBLISHED, Method

UNBOUNDED = 1 << 40            # a capacity no prompt reaches: the select keeps everything


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
    from .. import runtime

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
                 dtype: str = "f32", kv_dtype: str = "same"):
        """`measure_prefill`: also run each one-shot cell's own compiled model once (its
        first prompt) to measure what its prefill holds and takes; chunked methods are
        always measured (they answer with their own model). `dtype`: the element type the
        checkpoint is exported in (:class:`snapkv.hf.ExportOptions`). `kv_dtype`: the
        compacted caches' element type (:class:`snapkv.hf.Compaction`; the full cache keeps
        `dtype`); "i8" is not available with chunked or adaptive methods."""
        from ..frontend.checkpoint import Checkpoint, CheckpointError

        self.model_dir, self.window, self.dtype = Path(model_dir), window, dtype
        self.kv_dtype = kv_dtype
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
                text = self._rewrite(dataclasses.replace(
                    method.compaction(self.window, capacity, seed), kv_dtype=self.kv_dtype))
                label = f"{method.name} model, C={capacity}"
            self._models[key] = self._compiled_model(text, label)
        return self._models[key]

    def _compiled_model(self, text: str, label: str):
        from ..runtime import CompiledModel

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
        from .. import runtime

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
        from .. import runtime
        from ..frontend.checkpoint import weight_arrays

        if self._weights is None:
            self._weights = {}
        sig = runtime.signature(text, name)
        wanted = {n: (t.shape, t.elem) for n, t in sig.weight_args}
        if any(n not in self._weights for n in wanted):
            from ..frontend.checkpoint import CheckpointError

            try:
                arrays, _ = weight_arrays(self.checkpoint, wanted)
            except CheckpointError as error:
                raise EvalError(str(error)) from None
            self._weights.update(arrays)
        return [self._weights[n] for n in wanted]

    def shared_prefill(self):
        if self._prefill is None:
            from .. import runtime

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
        if not method.full and self.kv_dtype != "same":
            key += f"-{self.kv_dtype}"
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
                                                   gqa=gqa, kv_dtype=self.kv_dtype))
                label = f"decode, gqa {gqa}" + \
                    (f", {self.kv_dtype} cache" if self.kv_dtype != "same" else "")
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
            if self.kv_dtype == "i8":  # the select votes unquantized; its rows are stored
                k, v = quantize_rows(k), quantize_rows(v)
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
        from ..runtime.cache import _file_digest

        return _file_digest(tools.require(tools.snapkv_opt(), "snapkv-opt").resolve())
