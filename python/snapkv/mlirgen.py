"""Generate MLIR modules that run `snapkv.select` on given inputs, run them through
`snapkv-opt --snapkv-cpu-pipeline | mlir-runner`, and parse what they print.

One module holds many cases (one function each, `@main` calls them all) so that the JIT cost
of mlir-runner is paid once per batch. Each case prints a marker memref [MARKER, case number],
then the indices, then the gathered keys and values bitcast to integers, so that comparisons
with the reference are bit-exact."""

import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from . import reference
from . import tools as _tools
from .dtypes import element_type
from .tools import REPO, ToolError  # noqa: F401  (re-exported: raised by the runners)

MARKER = -123456789
_BIT_TYPES = {"f32": "i32", "f16": "i16", "bf16": "i16"}
_PRINTERS = {"i64": "printMemrefI64", "i32": "printMemrefI32", "i16": "printMemrefI16"}


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

    @property
    def elem(self):
        return element_type(self.q, self.dtype)

    def options(self):
        """Keyword arguments of `reference.select` (defaults where a clause is omitted)."""
        given = dict(kernel=self.kernel, pooling=self.pooling, gqa=self.gqa,
                     order=self.order, scale=self.scale, scoring=self.scoring,
                     sinks=self.sinks, seed=self.seed)
        return {name: value for name, value in given.items() if value is not None}

    def reference(self):
        return reference.select(self.q, self.k, self.v, self.window, self.capacity,
                                dtype=self.dtype, **self.options())

    def describe(self):
        """Short text naming the configuration (for failure messages)."""
        return (f"q{list(self.q.shape)} k{list(self.k.shape)} {self.elem} "
                f"window={self.window} capacity={self.capacity} {self.options()} "
                f"dynamic={self.dynamic}")


@dataclass
class CaseOutput:
    indices: np.ndarray  # int64 [B, Hc, S]
    keys: np.ndarray     # gathered keys as signed integer bits (int32 for f32, int16 otherwise)
    values: np.ndarray


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
    for name in ("kernel", "pooling", "gqa", "order"):
        if getattr(case, name) is not None:
            clauses += f" {name} {getattr(case, name)}"
    if case.scale is not None:
        clauses += f" scale {float(case.scale):.17e}"
    for name in ("scoring", "sinks", "seed"):
        if getattr(case, name) is not None:
            clauses += f" {name} {getattr(case, name)}"
    kv_shape, idx_shape = result_shapes
    kv_t = tensor_type(kv_shape, case.elem)
    return (f"%ko, %vo, %idx = snapkv.select %q, %k, %v {clauses}\n"
            f"        : ({q_t}, {k_t}, {k_t}) -> ({kv_t}, {kv_t}, {tensor_type(idx_shape, 'i64')})")


def result_shapes(case):
    batch, q_heads, _, dim = case.q.shape
    heads = q_heads if (case.gqa or "expand") == "expand" else case.k.shape[1]
    kept = None if case.dynamic else min(case.k.shape[2], case.capacity)
    return (batch, heads, kept, dim), (batch, heads, kept)


def _print_lines(value, shape, elem, printer_elem, tag):
    """Lines that bufferize `value` (a tensor of `elem`) and print it as `printer_elem`."""
    lines = []
    t = tensor_type(shape, elem)
    if printer_elem != elem:  # bitcast floats to same-width integers for bit-exact printing
        dyn = [f"%{tag}_d{i}" for i, d in enumerate(shape) if d is None]
        for i, d in enumerate(shape):
            if d is None:
                lines += [f"%{tag}_c{i} = arith.constant {i} : index",
                          f"%{tag}_d{i} = tensor.dim {value}, %{tag}_c{i} : {t}"]
        bt = tensor_type(shape, printer_elem)
        ident = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>"
        lines += [
            f"%{tag}_e = tensor.empty({', '.join(dyn)}) : {bt}",
            f"%{tag}_bits = linalg.generic {{indexing_maps = [{ident}, {ident}], "
            f'iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} '
            f"ins({value} : {t}) outs(%{tag}_e : {bt}) {{",
            f"^bb0(%in: {elem}, %out: {printer_elem}):",
            f"  %c = arith.bitcast %in : {elem} to {printer_elem}",
            f"  linalg.yield %c : {printer_elem}",
            f"}} -> {bt}",
        ]
        value, t = f"%{tag}_bits", bt
    mt = "memref<" + t[len("tensor<"):]
    ut = f"memref<*x{printer_elem}>"
    lines += [f"%{tag}_m = bufferization.to_buffer {value} : {t} to {mt}",
              f"%{tag}_u = memref.cast %{tag}_m : {mt} to {ut}",
              f"call @{_PRINTERS[printer_elem]}(%{tag}_u) : ({ut}) -> ()"]
    return lines


def case_functions(case, number):
    """MLIR functions for one case: @case<number> (and @select<number> when dynamic)."""
    elem = case.elem
    kv_shape, idx_shape = result_shapes(case)
    q_t = tensor_type(case.q.shape, elem)
    k_static = tensor_type(case.k.shape, elem)
    k_t = tensor_type((*case.k.shape[:2], None, case.k.shape[3]), elem) if case.dynamic \
        else k_static
    op = select_op(case, q_t, k_t, (kv_shape, idx_shape))
    kv_t, idx_t = tensor_type(kv_shape, elem), tensor_type(idx_shape, "i64")
    body = [f"%mark = arith.constant dense<[{MARKER}, {number}]> : tensor<2xi64>",
            *_print_lines("%mark", (2,), "i64", "i64", "mark"),
            f"%q = arith.constant dense<{dense_hex(case.q)}> : {q_t}"]
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
            f"({kv_t}, {kv_t}, {idx_t}) attributes {{no_inline}} {{",
            "  " + op,
            f"  return %ko, %vo, %idx : {kv_t}, {kv_t}, {idx_t}",
            "}"]))
        body += [f"%k = tensor.cast %ks : {k_static} to {k_t}",
                 f"%v = tensor.cast %vs : {k_static} to {k_t}",
                 f"%ko, %vo, %idx = call @select{number}(%q, %k, %v) : ({q_t}, {k_t}, {k_t}) "
                 f"-> ({kv_t}, {kv_t}, {idx_t})"]
    else:
        body.append(op)
    bit_elem = _BIT_TYPES[elem]
    body += _print_lines("%idx", idx_shape, "i64", "i64", "idx")
    body += _print_lines("%ko", kv_shape, elem, bit_elem, "kb")
    body += _print_lines("%vo", kv_shape, elem, bit_elem, "vb")
    funcs.append("\n".join([f"func.func @case{number}() {{", *("  " + line for line in body),
                            "  return", "}"]))
    return funcs


def build_module(cases):
    """One module: a function per case and @main calling them in order."""
    parts = [f"func.func private @{name}(memref<*x{elem}>) attributes {{llvm.emit_c_interface}}"
             for elem, name in _PRINTERS.items()]
    for number, case in enumerate(cases):
        parts += case_functions(case, number)
    calls = [f"  call @case{n}() : () -> ()" for n in range(len(cases))]
    parts.append("\n".join(["func.func @main() {", *calls, "  return", "}"]))
    return "module {\n" + "\n\n".join(parts) + "\n}\n"


# ---------------------------------------------------------------------------------------------
# Running

def tools():
    """Paths of (snapkv-opt, mlir-runner, [runner libs]); raises ToolError if one is missing."""
    return (_tools.require(_tools.snapkv_opt(), "snapkv-opt"),
            _tools.require(_tools.mlir_runner(), "mlir-runner"),
            [_tools.require(lib) for lib in _tools.runner_libs()])


# Passes that run the GPU kernels on the CPU: the tensor-level half of the GPU pipeline
# (the same blocks, the same per-thread tiles), after which --snapkv-cpu-pipeline runs the
# block and thread loops as loops.
GPU_EMULATION = ("--snapkv-gpu-emulation",)


def run_module(text, timeout=600, pre_passes=()):
    """Lower `text` with `pre_passes` then --snapkv-cpu-pipeline, run @main with
    mlir-runner, return stdout."""
    opt, runner, libs = tools()
    with tempfile.TemporaryDirectory(prefix="snapkv-") as tmp:
        source, lowered = Path(tmp) / "in.mlir", Path(tmp) / "lowered.mlir"
        source.write_text(text)
        _run([str(opt), *pre_passes, "--snapkv-cpu-pipeline", str(source), "-o",
              str(lowered)], timeout)
        return _run([str(runner), "-e", "main", "-entry-point-result=void",
                     "-shared-libs=" + ",".join(map(str, libs)), str(lowered)], timeout)


def _run(command, timeout):
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError(f"timed out after {timeout}s: {command[0]}") from None
    if done.returncode != 0:
        raise ToolError(f"{Path(command[0]).name} failed (exit {done.returncode}):\n"
                        f"{done.stderr[-4000:]}")
    return done.stdout


_HEADER = re.compile(r"Unranked Memref base@ = \S+ rank = (\d+) offset = \d+ "
                     r"sizes = \[([^\]]*)\] strides = \[[^\]]*\] data =")
_NUMBER = re.compile(r"[-+]?(?:nan|inf|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", re.IGNORECASE)


def parse_memrefs(text):
    """Arrays printed by printMemref* in `text`, in order (int64 or float64)."""
    arrays = []
    for header in _HEADER.finditer(text):
        sizes = [int(s) for s in header.group(2).split(",") if s.strip()]
        start = text.index("[", header.end())
        depth, end = 0, start
        for end in range(start, len(text)):  # the data is one balanced [...] block
            depth += {"[": 1, "]": -1}.get(text[end], 0)
            if depth == 0:
                break
        tokens = _NUMBER.findall(text[start:end + 1])
        is_int = all(re.fullmatch(r"[-+]?\d+", t) for t in tokens)
        data = np.array([int(t) if is_int else float(t) for t in tokens],
                        dtype=np.int64 if is_int else np.float64)
        if data.size != int(np.prod(sizes)):
            raise ValueError(f"memref with sizes {sizes} printed {data.size} numbers")
        arrays.append(data.reshape(sizes))
    return arrays


def split_outputs(stdout, count):
    """Per-case outputs of a module built from `count` cases."""
    try:
        arrays = parse_memrefs(stdout)
    except ValueError as error:
        raise ToolError(f"unreadable mlir-runner output: {error}") from None
    if len(arrays) != 4 * count:
        raise ToolError(f"expected {4 * count} printed memrefs, got {len(arrays)}")
    outputs = []
    for number in range(count):
        mark, idx, keys, values = arrays[4 * number: 4 * number + 4]
        if list(mark) != [MARKER, number]:
            raise ToolError(f"output out of step at case {number}: marker {list(mark)}")
        outputs.append(CaseOutput(indices=idx, keys=keys, values=values))
    return outputs


def run_cases(cases, timeout=600, pre_passes=()):
    """Compile and run `cases` as one module; one CaseOutput per case."""
    return split_outputs(run_module(build_module(cases), timeout, pre_passes), len(cases))


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
