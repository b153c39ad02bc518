"""Generate MLIR modules that run `snapkv.select` on given inputs, compile them ahead of
time (:func:`snapkv.runtime.compile_library`: ``snapkv-opt --snapkv-cpu-pipeline``,
snapkv-translate, clang) and call them in process (:class:`snapkv.runtime.CompiledFunction`).

One module holds many cases (one function each, ``@case<n>() -> (indices, keys, values)``,
its inputs as constants) so that the compile is paid once per batch. The results come back as
memrefs through the C interface, so keys and values are compared with the reference bit for
bit without printing or parsing anything."""

import ctypes
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from . import reference
from . import tools as _tools
from .dtypes import bits, element_type
from .runtime.build import PIPELINE, compile_library
from .runtime.memref import CompiledCheckError, CompiledFunction
from .runtime.signatures import Signature, TensorType
from .tools import REPO, ToolError  # noqa: F401  (re-exported: raised by the runners)


@dataclass
class Case:
    """One `snapkv.select` invocation. Optional clauses left at None are omitted from the op
    (so the op's defaults apply); `dynamic` passes keys/values with a dynamic L."""
    q: np.ndarray = field(repr=False)
    k: np.ndarray = field(repr=False)
    v: np.ndarray = field(repr=False)
    window: int
    capacity: int
    kernel: Optional[int] = None
    pooling: Optional[str] = None
    gqa: Optional[str] = None
    order: Optional[str] = None
    scale: Optional[float] = None
    dtype: Optional[str] = None  # "bf16" when q/k/v are uint16 bit patterns
    dynamic: bool = False
    scoring: Optional[str] = None
    sinks: Optional[int] = None
    seed: Optional[int] = None
    block: Optional[int] = None
    # `snapkv.select_adaptive` instead (its `floor` clause when not None): results packed
    # [B, T, ...] with offsets [B, Hc + 1].
    adaptive: bool = False
    floor: Optional[int] = None

    @property
    def elem(self):
        return element_type(self.q, self.dtype)

    def options(self):
        """Keyword arguments of `reference.select` (defaults where a clause is omitted)."""
        given = dict(kernel=self.kernel, pooling=self.pooling, gqa=self.gqa,
                     order=self.order, scale=self.scale, scoring=self.scoring,
                     sinks=self.sinks, seed=self.seed, block=self.block)
        return {name: value for name, value in given.items() if value is not None}

    def reference(self):
        if self.adaptive:
            options = {n: x for n, x in self.options().items()
                       if n not in ("order", "sinks", "seed")}
            if self.floor is not None:
                options["floor"] = self.floor
            return reference.select_adaptive(self.q, self.k, self.v, self.window,
                                             self.capacity, dtype=self.dtype, **options)
        return reference.select(self.q, self.k, self.v, self.window, self.capacity,
                                dtype=self.dtype, **self.options())

    def describe(self):
        """Short text naming the configuration (for failure messages)."""
        return (f"q{list(self.q.shape)} k{list(self.k.shape)} {self.elem} "
                f"window={self.window} capacity={self.capacity} {self.options()} "
                f"dynamic={self.dynamic}"
                + (f" adaptive floor={self.floor}" if self.adaptive else ""))


@dataclass
class CaseOutput:
    indices: np.ndarray  # int64 [B, Hc, S] ([B, T] for select_adaptive)
    keys: np.ndarray     # gathered keys as signed integer bits (int32 for f32, int16 otherwise)
    values: np.ndarray
    offsets: Optional[np.ndarray] = None  # int64 [B, Hc + 1] (select_adaptive only)


def tensor_type(shape, elem):
    dims = "x".join("?" if d is None else str(d) for d in shape)
    return f"tensor<{dims}x{elem}>"


def dense_hex(array):
    """Raw little-endian bytes as an MLIR hex dense literal (bit-exact for any float type)."""
    array = np.ascontiguousarray(array)
    return '"0x' + array.astype(array.dtype.newbyteorder("<")).tobytes().hex().upper() + '"'


def select_op(case, q_t, k_t, result_shapes):
    """Text of the `snapkv.select` op on %q, %k, %v with results %ko, %vo, %idx."""
    clauses = f"window {case.window} capacity {case.capacity}"
    if case.adaptive and case.floor is not None:
        clauses += f" floor {case.floor}"
    for name in ("kernel", "pooling", "gqa") + (() if case.adaptive else ("order",)):
        if getattr(case, name) is not None:
            clauses += f" {name} {getattr(case, name)}"
    if case.scale is not None:
        clauses += f" scale {float(case.scale):.17e}"
    for name in ("scoring", "sinks", "seed", "block"):
        if getattr(case, name) is not None:
            clauses += f" {name} {getattr(case, name)}"
    kv_shape, idx_shape, *offsets_shape = result_shapes
    kv_t = tensor_type(kv_shape, case.elem)
    if case.adaptive:
        return (f"%ko, %vo, %idx, %off = snapkv.select_adaptive %q, %k, %v {clauses}\n"
                f"        : ({q_t}, {k_t}, {k_t}) -> ({kv_t}, {kv_t}, "
                f"{tensor_type(idx_shape, 'i64')}, {tensor_type(offsets_shape[0], 'i64')})")
    return (f"%ko, %vo, %idx = snapkv.select %q, %k, %v {clauses}\n"
            f"        : ({q_t}, {k_t}, {k_t}) -> ({kv_t}, {kv_t}, {tensor_type(idx_shape, 'i64')})")


def result_shapes(case):
    """(rows, indices) shapes, and the offsets' for select_adaptive."""
    batch, q_heads, _, dim = case.q.shape
    heads = q_heads if (case.gqa or "expand") == "expand" else case.k.shape[1]
    kept = None if case.dynamic else min(case.k.shape[2], case.capacity)
    if case.adaptive:
        rows = None if kept is None else heads * kept
        return (batch, rows, dim), (batch, rows), (batch, heads + 1)
    return (batch, heads, kept, dim), (batch, heads, kept)


def case_functions(case, number):
    """MLIR functions for one case: ``@case<number>() -> (indices, keys, values)`` (then the
    offsets for select_adaptive; and ``@select<number>`` when dynamic)."""
    elem = case.elem
    shapes = result_shapes(case)
    q_static = tensor_type(case.q.shape, elem)
    # Accumulated scorings take any number of query rows: dynamic with the prompt length.
    q_t = tensor_type((*case.q.shape[:2], None, case.q.shape[3]), elem) \
        if case.dynamic and case.scoring in reference.ACCUMULATED else q_static
    k_static = tensor_type(case.k.shape, elem)
    k_t = tensor_type((*case.k.shape[:2], None, case.k.shape[3]), elem) if case.dynamic \
        else k_static
    op = select_op(case, q_t, k_t, shapes)
    kv_t = tensor_type(shapes[0], elem)
    # The op's results, and what @case returns (indices first).
    op_results = [("%ko", kv_t), ("%vo", kv_t), ("%idx", tensor_type(shapes[1], "i64"))]
    if case.adaptive:
        op_results.append(("%off", tensor_type(shapes[2], "i64")))
    returned = [op_results[2], *op_results[:2], *op_results[3:]]

    def listed(pairs, part):
        return ", ".join(pair[part] for pair in pairs)

    q_name = "%q" if q_t == q_static else "%qs"
    body = [f"{q_name} = arith.constant dense<{dense_hex(case.q)}> : {q_static}"]
    if q_t != q_static:
        body.append(f"%q = tensor.cast %qs : {q_static} to {q_t}")
    # Static cases use the constants directly; dynamic ones cast them to %k, %v first.
    k_name, v_name = ("%ks", "%vs") if case.dynamic else ("%k", "%v")
    body += [f"{k_name} = arith.constant dense<{dense_hex(case.k)}> : {k_static}",
             f"{v_name} = arith.constant dense<{dense_hex(case.v)}> : {k_static}"]
    funcs = []
    if case.dynamic:
        # The select sits behind a function boundary (not inlined) so L really is unknown
        # when it is lowered.
        funcs.append("\n".join([
            f"func.func @select{number}(%q: {q_t}, %k: {k_t}, %v: {k_t}) -> "
            f"({listed(op_results, 1)}) attributes {{no_inline}} {{",
            "  " + op,
            f"  return {listed(op_results, 0)} : {listed(op_results, 1)}",
            "}"]))
        body += [f"%k = tensor.cast %ks : {k_static} to {k_t}",
                 f"%v = tensor.cast %vs : {k_static} to {k_t}",
                 f"{listed(op_results, 0)} = call @select{number}(%q, %k, %v) : "
                 f"({q_t}, {k_t}, {k_t}) -> ({listed(op_results, 1)})"]
    else:
        body.append(op)
    body.append(f"return {listed(returned, 0)} : {listed(returned, 1)}")
    funcs.append("\n".join([f"func.func @case{number}() -> ({listed(returned, 1)}) {{",
                             *("  " + line for line in body), "}"]))
    return funcs


def case_signature(case):
    """What ``@case<n>`` takes and returns (it is generated here, so nothing is read back)."""
    kv_shape, idx_shape, *offsets = result_shapes(case)
    return Signature((), (TensorType(idx_shape, "i64"), TensorType(kv_shape, case.elem),
                          TensorType(kv_shape, case.elem),
                          *(TensorType(shape, "i64") for shape in offsets)))


def build_module(cases):
    """One module: a function per case."""
    parts = []
    for number, case in enumerate(cases):
        parts += case_functions(case, number)
    return "module {\n" + "\n\n".join(parts) + "\n}\n"


# ---------------------------------------------------------------------------------------------
# Running

def tools():
    """Paths of (snapkv-opt, snapkv-translate, clang) -- what :func:`run_cases` compiles
    with; raises ToolError if one is missing."""
    return (_tools.require(_tools.snapkv_opt(), "snapkv-opt"),
            _tools.require(_tools.snapkv_translate(), "snapkv-translate"),
            _tools.require(_tools.clang(), "clang"))


# Passes that run the GPU kernels on the CPU: the tensor-level half of the GPU pipeline
# (the same blocks, the same per-thread tiles), after which --snapkv-cpu-pipeline runs the
# block and thread loops as loops. Elements of a textual pass pipeline (``pre_passes``).
GPU_EMULATION = ("snapkv-gpu-emulation",)


def pipeline(pre_passes=()):
    """The runtime's pipeline (C interfaces, ``snapkv-cpu-pipeline{asserts=report}``) with
    `pre_passes` (textual pipeline elements) first."""
    inner = PIPELINE[len("builtin.module("):-1]
    return f"builtin.module({','.join([*pre_passes, inner])})"


def compile_functions(text, signatures, timeout=600, pre_passes=(), label="module"):
    """Compile `text` (`pre_passes`, then the CPU pipeline) into a library of its own and
    return a :class:`~snapkv.runtime.CompiledFunction` per entry of `signatures` (function
    name to :class:`~snapkv.runtime.Signature`). A compile failure is a ToolError."""
    with tempfile.TemporaryDirectory(prefix="snapkv-cases-") as tmp:
        library = compile_library(text, cache_dir=tmp, timeout=timeout, label=label,
                                  pipeline=pipeline(pre_passes))
        handle = ctypes.CDLL(str(library.path))  # stays mapped after the file is removed
    return {name: CompiledFunction(handle, name, sig) for name, sig in signatures.items()}


def call(function, *arrays):
    """`function`'s results; a failed run-time check of the compiled code is a ToolError."""
    try:
        return function(*arrays)
    except CompiledCheckError as error:
        raise ToolError(str(error)) from None


def run_cases(cases, timeout=600, pre_passes=()):
    """Compile `cases` as one module and call each case; one CaseOutput per case. A compile
    failure or a failed run-time check is a ToolError."""
    functions = compile_functions(
        build_module(cases), {f"case{n}": case_signature(c) for n, c in enumerate(cases)},
        timeout, pre_passes, label=f"{len(cases)} select cases")
    outputs = []
    for number, case in enumerate(cases):
        indices, keys, values, *offsets = call(functions[f"case{number}"])
        outputs.append(CaseOutput(indices=indices, keys=bits(keys, case.elem),
                                  values=bits(values, case.elem),
                                  offsets=offsets[0] if offsets else None))
    return outputs


def run_batches(cases, batch_size=40, workers=2, timeout=600, pre_passes=()):
    """Run `cases` in modules of `batch_size`, `workers` at a time. Returns, per case, a
    CaseOutput or the ToolError of its batch (so one bad batch does not hide the others)."""
    batches = [cases[i:i + batch_size] for i in range(0, len(cases), batch_size)]

    def attempt(batch):
        try:
            return run_cases(batch, timeout, pre_passes)
        except ToolError as error:
            return [error] * len(batch)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return [out for outs in pool.map(attempt, batches) for out in outs]
