"""``snapkv.select`` and the rewritten model on IREE: ``iree-compile`` (llvm-cpu), ``iree.runtime``.

See docs/iree.md. Everything goes through plain ``iree-compile`` on what
``convert-snapkv-to-linalg`` prints: no text rewriting on our side.

The model (each step a function here):

1. :func:`compress` -- ``snapkv-opt --snapkv-compress-kv-cache="..."`` (``strict=true``, so a
   model the pass does not recognise is an error, not a silently unchanged module);
2. :func:`lower_to_upstream` -- ``snapkv-opt --snapkv-fuse-attention
   --convert-snapkv-to-linalg``: the importer's attention becomes one ``snapkv.attention``
   (no ``[L, L]`` scores), which the untiled conversion lowers to one loop over key tiles
   of linalg ops (docs/lowering.md), and ``snapkv.select`` becomes
   func/arith/math/linalg/tensor/scf/cf/affine code; :func:`dialects` checks that no other
   dialect (in particular no ``snapkv`` op) is left;
3. :func:`compile_vmfb` -- ``iree-compile`` with :data:`IREE_COMPILE_FLAGS`;
4. :class:`IreeModel` -- prefill/decode/generate through ``iree.runtime`` with the same calling
   convention and the same ``generate()`` as :class:`snapkv.runtime.CompiledModel`.

One ``snapkv.select`` on its own: :func:`select_module` writes a function ``@select`` around
the op of a :class:`snapkv.mlirgen.Case`, and :class:`IreeSelect` lowers, compiles and calls it
(``(keys, values, indices)`` as numpy arrays).

Runtime devices: :func:`config` gives the ``local-sync`` driver (one thread, the tests'
default) or ``local-task`` with a chosen number of worker threads (the benchmarks).

Needs ``iree-base-compiler`` and ``iree-base-runtime`` (PyPI), numpy and ``snapkv-opt``.
Command line (compares with the CPU pipeline)::

    python -m snapkv.iree_backend test/Models/tiny_llama_dynamic.mlir --window 8 --capacity 24 \\
        --prompt-length 48 --seed 7 --steps 8 --compare --save-dir /tmp/snapkv-iree

(The module is not called ``snapkv/iree.py`` so that running it as a script can never shadow the
``iree`` package.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from . import mlirgen, runtime, tools
from .tools import ToolError

# What convert-snapkv-to-linalg may leave (the importer's IR uses the same dialects).
UPSTREAM_DIALECTS = frozenset({"builtin", "func", "arith", "math", "linalg", "tensor", "scf",
                               "cf", "affine"})

# The input is plain upstream MLIR (no torch/stablehlo/tosa conversion). `host`: the vmfb is
# built for the machine that runs it (the tests compile and run in one process).
IREE_COMPILE_FLAGS = (
    "--iree-input-type=none",
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=host",
)
# Added for a select on its own: data tiling (operands packed into the register tiles of the
# contractions; off by default in iree-compile 3.13) made it 1.5x faster at L = 16384
# (docs/benchmarks.md). Not for the model: iree-compile 3.13 then fails on the decode
# attention over a dynamic cache length ("'affine.delinearize_index' op no basis element may
# be statically non-positive").
SELECT_COMPILE_FLAGS = ("--iree-opt-data-tiling=true",)

# Single-threaded, synchronous local device: deterministic and modest on a shared machine.
DEFAULT_DRIVER = "local-sync"
# The multi-threaded local device (a task executor with worker threads).
TASK_DRIVER = "local-task"


def unavailable_reason() -> Optional[str]:
    """None if ``iree.compiler`` and ``iree.runtime`` import, else why not."""
    for name in ("iree.compiler", "iree.runtime"):
        try:
            __import__(name)
        except ImportError as error:
            return (f"{name} is not importable ({error}); "
                    f"pip install iree-base-compiler iree-base-runtime")
    return None


def versions() -> Dict[str, str]:
    """Installed versions of the IREE wheels (and the compiler's own version line)."""
    from importlib import metadata
    out = {}
    for dist in ("iree-base-compiler", "iree-base-runtime"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


# ---------------------------------------------------------------------------------------------
# snapkv-opt steps

def snapkv_opt(text: str, *args: str, timeout: int = 600) -> str:
    """``snapkv-opt <args>`` on `text` (stdin), returning the printed module."""
    return tools.opt(list(args), text=text, timeout=timeout).stdout


def compress_options(window: int, capacity: int, kernel_size: int = 5, pooling: str = "avg",
                     gqa: str = "expand", order: str = "position") -> str:
    return (f"window={window} capacity={capacity} kernel={kernel_size} "
            f"pooling={pooling} gqa={gqa} order={order} strict=true")


def compress(text: str, **options) -> str:
    """The model rewrite (``--snapkv-compress-kv-cache``, strict): keeps ``snapkv.select`` ops."""
    return snapkv_opt(text, f"--snapkv-compress-kv-cache={compress_options(**options)}")


def lower_to_upstream(text: str, strategy: Optional["Strategy"] = None) -> str:
    """``--snapkv-fuse-attention --convert-snapkv-to-linalg`` (untiled: IREE tiles and
    distributes the linalg itself); raises if anything but upstream dialects remains. IREE
    leaves the importer's ``[L, L]`` attention over a dynamic prompt length untiled (the
    tiny model's prefill at 1,024 tokens took 240 ms through it, 16 ms fused).
    `strategy` (:func:`strategy`): the formulation gets its key tile, query tile and chunk."""
    convert = "--convert-snapkv-to-linalg"
    if strategy is not None:
        convert += (f"=key-tile={strategy.key_tile} query-tile={strategy.query_tile} "
                    f"chunk={strategy.chunk}")
    lowered = snapkv_opt(text, "--snapkv-fuse-attention", convert)
    extra = dialects(lowered) - UPSTREAM_DIALECTS
    if extra:
        raise ToolError(f"convert-snapkv-to-linalg left ops of {sorted(extra)}")
    return lowered


# ---------------------------------------------------------------------------------------------
# IR inspection (MLIR Python bindings of iree-base-compiler)

def _parse(text: str):
    from iree.compiler import ir
    context = ir.Context()
    # So that a module with a snapkv op left in it parses, and dialects() can say so.
    context.allow_unregistered_dialects = True
    with context:
        return context, ir.Module.parse(text)


def _ops(module) -> list:
    """Every operation in `module` (a Module or an operation), nested ones included."""
    from iree.compiler import ir
    ops = []

    def visit(op):
        ops.append(op)
        return ir.WalkResult.ADVANCE

    getattr(module, "operation", module).walk(visit)
    return ops


def dialects(text: str) -> set:
    """Dialect namespaces of every operation in `text` (nested ones included)."""
    context, module = _parse(text)
    with context:
        return {op.name.split(".", 1)[0] for op in _ops(module)}


def count_ops(text: str, name: str) -> int:
    """How many `name` ops `text` holds (`text` must parse without the snapkv dialect)."""
    context, module = _parse(text)
    with context:
        return sum(op.name == name for op in _ops(module))


# ---------------------------------------------------------------------------------------------
# Our per-op strategy on IREE's dispatches (docs/iree.md, "Our strategy on IREE's dispatches")

class Strategy(NamedTuple):
    """What ``snapkv-configure-lowering`` chose for a module's root ops (its JSON report):
    the one place where tile sizes are decided, for our CPU pipeline and for IREE.
    ``vector_bits``: the CPU's vector register width."""
    key_tile: int
    query_tile: int
    chunk: int
    vector_bits: int


def strategy(text: str) -> Strategy:
    """``snapkv-configure-lowering{target=cpu report=-}`` on `text` (snapkv ops, before
    lowering): the choice its root ops share. Raises :class:`ToolError` if it has none or
    if they differ (the conversion options below take one choice for the whole module)."""
    done = tools.opt(["--snapkv-configure-lowering=target=cpu report=-", "-o", os.devnull],
                     text=text)
    chosen = {Strategy(r["config"]["key_tile"], r["config"]["query_tile"], r["config"]["chunk"],
                       r["vector_bits"])
              for r in map(json.loads, done.stdout.splitlines()) if "config" in r}
    if len(chosen) != 1:
        raise ToolError(f"snapkv-configure-lowering chose {len(chosen)} different "
                        f"configurations ({sorted(chosen)}); one is needed for IREE")
    return chosen.pop()


def _loop_ranges(op) -> List[Optional[int]]:
    """Static extent of each loop of a ``linalg.generic`` (None: dynamic), from its operands'
    shapes and indexing maps."""
    from iree.compiler import ir
    maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
    ranges: List[Optional[int]] = [None] * maps[0].n_dims
    for operand, amap in zip(op.operands, maps):
        shaped = ir.ShapedType(operand.type)
        for i, expr in enumerate(amap.results):
            if isinstance(expr, ir.AffineDimExpr) and not shaped.is_dynamic_dim(i):
                ranges[expr.position] = shaped.shape[i]
    return ranges


def key_tile_config(op, choice: Strategy) -> Optional[Dict[str, list]]:
    """IREE's ``#iree_cpu.lowering_config`` sizes for a dispatch root that computes the
    statistics of our key tiles, as our CPU pipeline runs them; None for any other op.

    Such a root is a float ``linalg.generic`` reducing over one loop of exactly
    ``choice.key_tile`` keys whose first input is contiguous along a parallel loop (the
    query rows: the logits are ``[.., key, query]``). IREE's own choice vectorises the
    reduction, i.e. strided loads across keys; ours: each workgroup one key tile of one row
    of the outermost loop (an iteration of the CPU pipeline's ``scf.forall``), the query rows
    in vectors of ``choice.vector_bits``, the keys one after the other."""
    from iree.compiler import ir
    if op.name != "linalg.generic" or not op.operands:
        return None
    iterators = [str(a) for a in op.attributes["iterator_types"]]
    reductions = [i for i, kind in enumerate(iterators) if "reduction" in kind]
    ranges = _loop_ranges(op)
    first = ir.ShapedType(op.operands[0].type)
    if (len(reductions) != 1 or ranges[reductions[0]] != choice.key_tile
            or not isinstance(first.element_type, ir.FloatType)):
        return None
    inner = ir.AffineMapAttr(op.attributes["indexing_maps"][0]).value.results[-1]
    if not isinstance(inner, ir.AffineDimExpr):
        return None
    contiguous = inner.position
    if contiguous in reductions or ranges[contiguous] is None:
        return None
    lanes = choice.vector_bits // first.element_type.width
    parallel = [0 if i in reductions else min(lanes, ranges[i]) if i == contiguous else 1
                for i in range(len(ranges))]
    return dict(distribution=[1] + [0] * (len(ranges) - 1),
                vector_common_parallel=parallel,
                vector_reduction=[int(i in reductions) for i in range(len(ranges))])


def lowering_config(sizes: Dict[str, list]):
    """IREE's ``#iree_cpu.lowering_config`` with the tile sizes of :func:`key_tile_config`
    (in the current ``ir.Context``)."""
    from iree.compiler import ir
    levels = ", ".join(f"{name} = [{', '.join(map(str, v))}]" for name, v in sizes.items())
    return ir.Attribute.parse(f"#iree_cpu.lowering_config<{levels}>")


def _compilation_info(sizes: Dict[str, list]):
    # IREE's CPU pipeline for tiled reductions, the one it picks for these roots itself.
    from iree.compiler import ir
    return ir.Attribute.parse(
        f"#iree_codegen.compilation_info<lowering_config = {lowering_config(sizes)},"
        " translation_info = #iree_codegen.translation_info<"
        "pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>")


def attach_strategy(sources: str, choice: Strategy) -> Tuple[str, List[dict]]:
    """`sources` (``iree-compile --compile-to=executable-sources``) with an
    ``#iree_codegen.compilation_info`` on every dispatch root that :func:`key_tile_config`
    maps; returns the module text and ``[{"dispatch", "config"}]``, one per root.

    The attribute goes on the executables, after IREE's global optimisation: one set on our
    linalg input does not survive its unit-dimension folding (``FoldUnitExtentDimsPass``
    rebuilds the op without it)."""
    from iree.compiler import ir
    context = ir.Context()
    applied: List[dict] = []
    with context:
        module = ir.Module.parse(sources)
        for func in _ops(module):
            variant = func.parent.parent if func.name == "func.func" else None
            if variant is None or variant.name != "hal.executable.variant":
                continue
            # The root: the last structured op before the results are stored.
            roots = [op for op in _ops(func) if op.name == "linalg.generic"]
            sizes = key_tile_config(roots[-1], choice) if roots else None
            if sizes is not None:
                roots[-1].attributes["compilation_info"] = _compilation_info(sizes)
                applied.append(dict(dispatch=ir.StringAttr(func.attributes["sym_name"]).value,
                                    config=sizes))
        return str(module), applied


# ---------------------------------------------------------------------------------------------
# Compiling and running

def compile_vmfb(text: str, extra_args: Sequence[str] = (),
                 choice: Optional[Strategy] = None) -> bytes:
    """``iree-compile`` `text` (upstream dialects only) for llvm-cpu; returns the vmfb bytes.
    With `choice`, in two steps: to IREE's executable sources, where
    :func:`attach_strategy` configures the dispatch roots, then on from there."""
    import iree.compiler
    flags = [*IREE_COMPILE_FLAGS, *extra_args]
    try:
        if choice is None:
            return iree.compiler.compile_str(text, extra_args=flags)
        sources = iree.compiler.compile_str(
            text, extra_args=[*flags, "--compile-to=executable-sources"]).decode()
        configured, _ = attach_strategy(sources, choice)
        return iree.compiler.compile_str(
            configured, extra_args=[*flags, "--compile-from=executable-sources"])
    except iree.compiler.CompilerToolError as error:
        raise ToolError(str(error)[-6000:]) from None


def config(driver: str = DEFAULT_DRIVER, workers: Optional[int] = None):
    """An ``iree.runtime.Config`` on a new device of `driver`.

    `workers` (``local-task`` only) is the number of worker threads of the device's task
    executor (``--task_topology_group_count``; the runtime reads its flags when a device is
    created, so each call gets a device of its own). None keeps IREE's default (one worker
    per core).
    """
    import iree.runtime as rt
    from iree.runtime import system_setup
    if workers is not None:
        if driver != TASK_DRIVER:
            raise ValueError(f"workers applies to the {TASK_DRIVER} driver, not {driver}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        rt.flags.parse_flags(f"--task_topology_group_count={workers}")
    return rt.Config(device=system_setup.get_device(driver, cache=False))


def prepare(text: str, **options) -> Dict[str, object]:
    """The whole path from an imported model to IREE's input.

    Returns ``rewritten`` (what :class:`~snapkv.runtime.CompiledModel` compiles) and
    ``lowered`` (upstream dialects only: what ``iree-compile`` gets, unchanged).
    """
    rewritten = compress(text, **options)
    return dict(rewritten=rewritten, lowered=lower_to_upstream(rewritten))


def device_array(device, array):
    """`array` on `device`; a uint16 array is bf16 bit patterns (numpy has no bf16,
    :mod:`snapkv.dtypes`), uploaded as bf16, which is what the module's bf16 arguments check."""
    import iree.runtime as rt
    array = np.ascontiguousarray(array)
    if array.dtype != np.uint16:
        return rt.asdevicearray(device, array)
    # asdevicearray takes the element type from the numpy dtype whatever it is told.
    view = device.allocator.allocate_buffer_copy(
        memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
        device=device, buffer=array, element_type=rt.HalElementType.BFLOAT_16)
    return rt.DeviceArray(device, view, override_dtype=array.dtype)


def _copy(array) -> np.ndarray:
    # A returned DeviceArray's host view maps the device buffer; once the DeviceArray is gone
    # the allocator reuses that memory (later calls overwrite it), so copy every result.
    return np.array(array.to_host(), copy=True)


class IreeModel:
    """A compiled ``@prefill``/``@decode`` module loaded into an IREE runtime context.

    Same interface as :class:`snapkv.runtime.CompiledModel`: ``prefill(ids)`` ->
    ``(logits [1, L, V], caches)``, ``decode(token, position, caches)`` -> ``(logits [1, 1, V],
    caches)`` and the very same ``generate(ids, steps)`` (greedy, logical positions ``L + g``),
    which checks ``max_positions`` and, when the module text is known (:meth:`from_text`), the
    memory the largest tensor needs, as CompiledModel does.
    """

    def __init__(self, vmfb: bytes, *, vocab_size: Optional[int] = None,
                 driver: str = DEFAULT_DRIVER, workers: Optional[int] = None,
                 growth: Optional[dict] = None, max_positions: Optional[int] = None,
                 weights: Optional[Dict[str, Sequence[np.ndarray]]] = None):
        """`weights`: for a module whose entry points take weights (``snapkv.weight``
        arguments, as ``snapkv.hf`` exports them), the arrays each of ``prefill`` and
        ``decode`` takes after its other arguments, in order; moved to the device once."""
        import iree.runtime as rt
        self.vocab_size = vocab_size
        self.max_positions = max_positions
        self._growth = growth or {"prefill": {}, "decode": {}}
        self.config = config(driver, workers)
        self.context = rt.SystemContext(config=self.config)
        self.context.add_vm_module(rt.VmModule.copy_buffer(self.config.vm_instance, vmfb))
        module = self.context.modules.module
        self._prefill, self._decode = module["prefill"], module["decode"]
        # Device arrays shared by both entry points (one copy of each weight).
        device = {}
        for arrays in (weights or {}).values():
            for array in arrays:
                if id(array) not in device:
                    device[id(array)] = device_array(self.config.device, array)
        self._weights = {name: [device[id(a)] for a in (weights or {}).get(name, ())]
                         for name in ("prefill", "decode")}

    @classmethod
    def from_text(cls, text: str, weights=None, **kwargs) -> "IreeModel":
        """Compile `text` (upstream dialects only, see :func:`prepare`) and load it.
        `weights`: a Checkpoint (or {tensor name: array}) for a module whose entry points
        take weights, bound as :class:`snapkv.runtime.CompiledModel` binds them."""
        signatures = [runtime.signature(text, name) for name in ("prefill", "decode")]
        vocab = signatures[0].results[0].shape[-1]
        growth = {name: runtime.growth(text, name) for name in ("prefill", "decode")}
        bound, _ = runtime.bind_weights(signatures, weights)
        arrays = {name: [bound[ref] for ref, _ in sig.weight_args]
                  for name, sig in zip(("prefill", "decode"), signatures)}
        return cls(compile_vmfb(text), vocab_size=vocab, growth=growth, weights=arrays,
                   **kwargs)

    def _check_ids(self, ids: np.ndarray):
        # IREE drops the cf.assert inside the embedding gather's linalg body (a dispatch), so
        # an out-of-range id would read out of bounds without an error.
        runtime.check_token_ids(ids, self.vocab_size)

    def prefill(self, ids, chunk: Optional[int] = None) -> Tuple[np.ndarray, List[np.ndarray]]:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None]
        self._check_ids(ids)
        if len(self._chunks(ids.shape[1], chunk)) > 1:
            raise ValueError("chunked prefill is not available through IREE (no @extend)")
        out = [_copy(o) for o in self.call_prefill(ids)]
        return out[0], out[1:]

    def decode(self, token: int, position: int, caches: Sequence[np.ndarray]) \
            -> Tuple[np.ndarray, List[np.ndarray]]:
        self._check_ids(np.array([[int(token)]], dtype=np.int64))
        out = [_copy(o) for o in self.call_decode(token, position,
                                                  [np.ascontiguousarray(c) for c in caches])]
        return out[0], out[1:]

    def call_prefill(self, ids: np.ndarray) -> list:
        """One prefill call on checked `ids`; the results stay on the device
        (``DeviceArray``s: logits, then the caches)."""
        return self._prefill(ids, *self._weights["prefill"])

    def call_decode(self, token: int, position: int, caches: Sequence) -> list:
        """One decode step; `caches` are numpy arrays or the ``DeviceArray``s a previous call
        returned (then nothing is copied between the host and the device but the token, the
        position and the results' shapes). The results stay on the device."""
        caches = [device_array(self.config.device, c) if isinstance(c, np.ndarray) else c
                  for c in caches]
        return self._decode(np.array([[int(token)]], dtype=np.int64),
                            np.array([int(position)], dtype=np.int64), *caches,
                            *self._weights["decode"])

    # The generation loop is CompiledModel's, unchanged (it only calls prefill/decode);
    # decode returns new caches each step (no in-place ABI through IREE).
    in_place = None
    chunked = default_chunk = decode_compression = None  # one-shot prefill only
    _chunks = runtime.CompiledModel._chunks
    compress_if_due = runtime.CompiledModel.compress_if_due
    cache = runtime.CompiledModel.cache
    _physical = staticmethod(runtime.CompiledModel._physical)
    check_limits = runtime.CompiledModel.check_limits
    generate = runtime.CompiledModel.generate


# ---------------------------------------------------------------------------------------------
# One snapkv.select

def select_module(case: mlirgen.Case) -> str:
    """A module with ``@select(%q, %k, %v) -> (keys, values, indices)`` holding the
    ``snapkv.select`` of `case` (its shapes, clauses, element type; a dynamic L when
    ``case.dynamic``); with ``case.adaptive`` the ``snapkv.select_adaptive``, whose offsets
    come fourth."""
    batch, kv_heads, length, dim = case.k.shape
    q_t = mlirgen.tensor_type(case.q.shape, case.elem)
    k_t = mlirgen.tensor_type((batch, kv_heads, None if case.dynamic else length, dim),
                              case.elem)
    shapes = mlirgen.result_shapes(case)
    kv_t = mlirgen.tensor_type(shapes[0], case.elem)
    results = [("%ko", kv_t), ("%vo", kv_t), ("%idx", mlirgen.tensor_type(shapes[1], "i64"))]
    if case.adaptive:
        results.append(("%off", mlirgen.tensor_type(shapes[2], "i64")))
    names, types = ", ".join(n for n, _ in results), ", ".join(t for _, t in results)
    return (f"func.func @select(%q: {q_t}, %k: {k_t}, %v: {k_t})\n"
            f"    -> ({types}) {{\n"
            f"  {mlirgen.select_op(case, q_t, k_t, shapes)}\n"
            f"  return {names} : {types}\n}}\n")


class IreeSelect:
    """A compiled ``@select`` module (see :meth:`compile`) loaded on a runtime device.

    ``select(q, k, v)`` returns ``(keys, values, indices)`` as numpy arrays (f16/bf16 keys and
    values as their 16-bit patterns, like :mod:`snapkv.mlirgen`'s inputs). A module compiled
    for a dynamic L takes any prompt length.
    """

    def __init__(self, vmfb: bytes, *, driver: str = DEFAULT_DRIVER,
                 workers: Optional[int] = None):
        import iree.runtime as rt
        self.vmfb = vmfb
        self.config = config(driver, workers)
        self.context = rt.SystemContext(config=self.config)
        self.context.add_vm_module(rt.VmModule.copy_buffer(self.config.vm_instance, vmfb))
        self._select = self.context.modules.module["select"]

    @classmethod
    def compile(cls, case: mlirgen.Case, *, extra_args: Sequence[str] = (),
                carry_strategy: bool = True, **kwargs) -> "IreeSelect":
        """Lower and compile the select of `case`, then load it (`kwargs`: driver, workers).
        With `carry_strategy` (the default) the formulation and IREE's dispatch roots follow
        ``snapkv-configure-lowering``'s choice (:func:`strategy`, :func:`attach_strategy`);
        without, IREE chooses every tile itself. ``lowered``, ``strategy`` (None without)
        and ``compile_seconds`` (``iree-compile`` alone) are kept."""
        module = select_module(case)
        choice = strategy(module) if carry_strategy else None
        lowered = lower_to_upstream(module, choice)
        start = time.perf_counter()
        vmfb = compile_vmfb(lowered, [*SELECT_COMPILE_FLAGS, *extra_args], choice)
        seconds = time.perf_counter() - start
        select = cls(vmfb, **kwargs)
        select.lowered, select.strategy, select.compile_seconds = lowered, choice, seconds
        return select

    def device_arrays(self, *arrays):
        """`arrays` uploaded once, for timing calls without the host-to-device copy."""
        return [device_array(self.config.device, a) for a in arrays]

    def call(self, q, k, v):
        """One call; the results stay on the device (``DeviceArray``s)."""
        return self._select(q, k, v)

    def __call__(self, q, k, v) -> Tuple[np.ndarray, ...]:
        """(keys, values, indices), and the offsets of a ``snapkv.select_adaptive``."""
        return tuple(_copy(o) for o in self.call(q, k, v))


def compare(iree_out: dict, cpu_out: dict) -> Dict[str, object]:
    """Differences between two ``generate()`` results."""
    return dict(
        tokens_equal=iree_out["tokens"] == cpu_out["tokens"],
        physical_equal=iree_out["physical_lengths"] == cpu_out["physical_lengths"],
        logits_max_abs_diff=float(np.abs(iree_out["logits"] - cpu_out["logits"]).max()),
        cache_max_abs_diff=max(float(np.abs(a - b).max())
                               for a, b in zip(iree_out["caches"], cpu_out["caches"])),
    )


# ---------------------------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path, help="imported model (@prefill, @decode)")
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--capacity", type=int, default=24)
    parser.add_argument("--kernel", "--kernel-size", type=int, default=5, dest="kernel_size")
    parser.add_argument("--pooling", default="avg")
    parser.add_argument("--gqa", default="expand")
    parser.add_argument("--order", default="position")
    parser.add_argument("--prompt-length", "--prompt-len", type=int, default=48,
                        dest="prompt_length")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--compare", action="store_true",
                        help="also run the CPU pipeline (CompiledModel) and print differences")
    parser.add_argument("--save-dir", type=Path,
                        help="write rewritten.mlir, lowered.mlir, model.vmfb")
    args = parser.parse_args(argv)
    reason = unavailable_reason()
    if reason:
        sys.exit(reason)
    print("versions:", ", ".join(f"{k} {v}" for k, v in versions().items()))
    options = dict(window=args.window, capacity=args.capacity, kernel_size=args.kernel_size,
                   pooling=args.pooling, gqa=args.gqa, order=args.order)
    stages = prepare(args.module.read_text(), **options)
    print(f"lowered: dialects {sorted(dialects(stages['lowered']))}")
    start = time.perf_counter()
    vmfb = compile_vmfb(stages["lowered"])
    print(f"iree-compile: {len(vmfb)} bytes in {time.perf_counter() - start:.1f} s")
    if args.save_dir:
        args.save_dir.mkdir(parents=True, exist_ok=True)
        for name in ("rewritten", "lowered"):
            (args.save_dir / f"{name}.mlir").write_text(stages[name])
        (args.save_dir / "model.vmfb").write_bytes(vmfb)
        print(f"saved to {args.save_dir}")
    vocab = runtime.signature(stages["lowered"], "prefill").results[0].shape[-1]
    model = IreeModel(vmfb, vocab_size=vocab)
    ids = np.random.default_rng(args.seed).integers(0, vocab, args.prompt_length)[None]
    start = time.perf_counter()
    out = model.generate(ids, args.steps)
    print(f"iree generate: {(time.perf_counter() - start) * 1e3:.1f} ms")
    print(f"tokens:           {out['tokens']}")
    print(f"positions:        {out['positions']}")
    print(f"physical lengths: {out['physical_lengths']}")
    if args.compare:
        cpu = runtime.CompiledModel(stages["rewritten"]).generate(ids, args.steps)
        print(f"cpu tokens:       {cpu['tokens']}")
        for key, value in compare(out, cpu).items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
