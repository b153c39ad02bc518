"""Run an exported model module (``@prefill`` + ``@decode``) on the CPU.

:func:`run_prefill_decode` appends a ``@main`` to the module that calls ``@prefill`` on given
token ids, prints its results, calls ``@decode`` on one more token, its logical position and
the K/V prefill returned, prints those results too, then compiles the module with
``snapkv-opt --snapkv-cpu-pipeline`` and runs it with ``mlir-runner``. Floats are printed as
their bit patterns, so the arrays returned are exactly what the compiled code computed.

Needs numpy and the tools only (no torch).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from .. import interface
from .. import tools as _tools
from ..mlirgen import ToolError, _run, parse_memrefs, tools

# Passes run before --snapkv-cpu-pipeline (none needed: the pipeline expands math.fpowi
# itself since the RMSNorm's x**2 exposed that).
PRE_PASSES = []

# The plain upstream lowering (scalar loops, no vectorisation) from docs/TOOLCHAIN, run with
# mlir-opt: a second opinion on what a module computes, independent of our pipeline.
UPSTREAM_PIPELINE = (
    "builtin.module(math-expand-ops{ops=fpowi},"
    "one-shot-bufferize{bufferize-function-boundaries},convert-linalg-to-loops,"
    "expand-strided-metadata,lower-affine,convert-scf-to-cf,convert-to-llvm,"
    "reconcile-unrealized-casts)")

def signature(text: str, name: str):
    """(argument types, result types) of ``@name`` as lists of ``tensor<...>`` strings."""
    args, results = _typed(text, name)
    return [t.text for t in args], [t.text for t in results]


def _typed(text: str, name: str):
    """(argument types, result types) of ``@name`` as :class:`interface.TypeInfo`."""
    function = interface.describe(text).function(name)
    return [a.type for a in function.arguments], list(function.results)


def _print_bits(value, ttype, tag):
    """Lines that print `value` (an f32 or i64 tensor of :class:`interface.TypeInfo` `ttype`,
    any rank) exactly."""
    tensor_type, elem = ttype.text, ttype.element
    dims = ["?" if d is None else str(d) for d in ttype.shape]
    lines = []
    if elem == "f32":
        rank = len(dims)
        dyn = []
        for i, d in enumerate(dims):
            if d == "?":
                lines += [f"%{tag}_c{i} = arith.constant {i} : index",
                          f"%{tag}_d{i} = tensor.dim {value}, %{tag}_c{i} : {tensor_type}"]
                dyn.append(f"%{tag}_d{i}")
        bits_type = f"tensor<{'x'.join(dims)}xi32>"
        idx = ", ".join(f"d{i}" for i in range(rank))
        ident = f"affine_map<({idx}) -> ({idx})>"
        iterators = ", ".join(['"parallel"'] * rank)
        lines += [
            f"%{tag}_e = tensor.empty({', '.join(dyn)}) : {bits_type}",
            f"%{tag}_b = linalg.generic {{indexing_maps = [{ident}, {ident}], iterator_types = "
            f"[{iterators}]}} ins({value} : {tensor_type}) "
            f"outs(%{tag}_e : {bits_type}) {{",
            "^bb0(%in: f32, %out: i32):",
            "  %c = arith.bitcast %in : f32 to i32",
            "  linalg.yield %c : i32",
            f"}} -> {bits_type}",
        ]
        value, tensor_type, elem = f"%{tag}_b", bits_type, "i32"
    memref_type = "memref<" + tensor_type[len("tensor<"):]
    printer = {"i32": "printMemrefI32", "i64": "printMemrefI64"}[elem]
    lines += [f"%{tag}_m = bufferization.to_buffer {value} : {tensor_type} to {memref_type}",
              f"%{tag}_u = memref.cast %{tag}_m : {memref_type} to memref<*x{elem}>",
              f"call @{printer}(%{tag}_u) : (memref<*x{elem}>) -> ()"]
    return lines


def _cast(value, from_type, to_type, tag):
    if from_type == to_type:
        return value, []
    return f"%{tag}", [f"%{tag} = tensor.cast {value} : {from_type} to {to_type}"]


def main_function(text: str, ids: np.ndarray, token: int, position: int) -> str:
    """Text of a ``@main`` that runs prefill on `ids`, then decode on `token`/`position`."""
    p_args, p_results = signature(text, "prefill")
    d_args, d_results = signature(text, "decode")
    p_typed, d_typed = _typed(text, "prefill")[1], _typed(text, "decode")[1]
    batch, length = ids.shape
    body = []
    ids_type = f"tensor<{batch}x{length}xi64>"
    rows = ", ".join("[" + ", ".join(str(int(x)) for x in row) + "]" for row in ids)
    body.append(f"%ids = arith.constant dense<[{rows}]> : {ids_type}")
    ids_value, lines = _cast("%ids", ids_type, p_args[0], "ids_c")
    body += lines
    body.append(f"%p:{len(p_results)} = call @prefill({ids_value}) : ({p_args[0]}) -> "
                f"({', '.join(p_results)})")
    for i, t in enumerate(p_typed):
        body += _print_bits(f"%p#{i}", t, f"pr{i}")
    tok_type = f"tensor<{batch}x1xi64>"
    body.append(f"%tok = arith.constant dense<{token}> : {tok_type}")
    body.append(f"%pos = arith.constant dense<{position}> : tensor<1xi64>")
    operands = ["%tok", "%pos"]
    for i, (have, want) in enumerate(zip(p_results[1:], d_args[2:])):
        value, lines = _cast(f"%p#{i + 1}", have, want, f"kv_c{i}")
        body += lines
        operands.append(value)
    body.append(f"%d:{len(d_results)} = call @decode({', '.join(operands)}) : "
                f"({', '.join(d_args)}) -> ({', '.join(d_results)})")
    for i, t in enumerate(d_typed):
        body += _print_bits(f"%d#{i}", t, f"dr{i}")
    decls = [f"func.func private @{n}(memref<*x{e}>) attributes {{llvm.emit_c_interface}}"
             for n, e in (("printMemrefI32", "i32"), ("printMemrefI64", "i64"))]
    return "\n".join(decls + ["func.func @main() {", *("  " + line for line in body),
                              "  return", "}"])


def with_main(text: str, main: str) -> str:
    """`text` (one module, maybe followed by a `{-# ... #-}` resource section) plus `main`."""
    resources = text.find("\n{-#")
    head, tail = (text, "") if resources < 0 else (text[:resources], text[resources:])
    close = head.rstrip().rfind("}")
    if close < 0:
        raise ValueError("module text does not end with '}'")
    return head[:close] + main + "\n}\n" + tail


def run_prefill_decode(text: str, ids: np.ndarray, token: int, position: int,
                       pipeline: str = "snapkv", timeout: int = 600):
    """Compile and run; returns [prefill results..., decode results...] as numpy arrays.

    `pipeline` is "snapkv" (`snapkv-opt --snapkv-cpu-pipeline`, after PRE_PASSES) or
    "upstream" (`mlir-opt` with UPSTREAM_PIPELINE).
    """
    opt, runner, libs = tools()
    if pipeline == "snapkv":
        compile_args = [str(opt), *PRE_PASSES, "--snapkv-cpu-pipeline"]
    elif pipeline == "upstream":
        mlir_opt = _tools.require(_tools.mlir_opt(), "mlir-opt")
        compile_args = [str(mlir_opt), f"--pass-pipeline={UPSTREAM_PIPELINE}"]
    else:
        raise ValueError(f"unknown pipeline {pipeline!r}")
    module = with_main(text, main_function(text, ids, token, position))
    with tempfile.TemporaryDirectory(prefix="snapkv-model-") as tmp:
        source, lowered = Path(tmp) / "in.mlir", Path(tmp) / "lowered.mlir"
        source.write_text(module)
        _run([*compile_args, str(source), "-o", str(lowered)], timeout)
        stdout = _run([str(runner), "-e", "main", "-entry-point-result=void",
                       "-shared-libs=" + ",".join(map(str, libs)), str(lowered)], timeout)
    arrays = parse_memrefs(stdout)
    types = _typed(text, "prefill")[1] + _typed(text, "decode")[1]
    if len(arrays) != len(types):
        raise ToolError(f"expected {len(types)} printed memrefs, got {len(arrays)}")
    out = []
    for array, t in zip(arrays, types):
        if t.element == "f32":
            array = array.astype(np.int32).view(np.float32)
        out.append(array)
    return out
