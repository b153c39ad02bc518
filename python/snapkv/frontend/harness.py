"""Run an exported model module (``@prefill`` + ``@decode``) on the CPU, as a check of
what it computes.

:func:`run_prefill_decode` compiles the module with one of two lowerings -- ours
(``snapkv-opt --snapkv-cpu-pipeline``) or the plain upstream one (scalar loops, a second
opinion independent of our pipeline) -- into a shared library
(:func:`snapkv.runtime.compile_library`), calls ``@prefill`` on given token ids, then
``@decode`` on one more token, its logical position and the K/V prefill returned, and returns
every result as the numpy array the compiled code wrote (bit for bit).

Needs numpy and the tools only (no torch).
"""

from __future__ import annotations

import ctypes
import tempfile

import numpy as np

from .. import interface
from ..runtime import build as _build
from ..runtime.memref import CompiledCheckError, CompiledFunction
from ..runtime.signatures import signature as _signature
from ..tools import ToolError

# The plain upstream lowering (scalar loops, no vectorisation) from docs/TOOLCHAIN, with C
# interfaces for the runtime and upstream's ownership-based deallocation (every returned
# buffer is a fresh allocation the caller frees, as with our pipeline).
UPSTREAM_PIPELINE = (
    "builtin.module(func.func(llvm-request-c-wrappers),math-expand-ops{ops=fpowi},"
    "one-shot-bufferize{bufferize-function-boundaries},buffer-deallocation-pipeline,"
    "convert-linalg-to-loops,expand-strided-metadata,lower-affine,convert-scf-to-cf,"
    "convert-to-llvm,reconcile-unrealized-casts)")
PIPELINES = {"snapkv": _build.PIPELINE, "upstream": UPSTREAM_PIPELINE}


def signature(text: str, name: str):
    """(argument types, result types) of ``@name`` as lists of ``tensor<...>`` strings."""
    args, results = _typed(text, name)
    return [t.text for t in args], [t.text for t in results]


def _typed(text: str, name: str):
    """(argument types, result types) of ``@name`` as :class:`interface.TypeInfo`."""
    function = interface.describe(text).function(name)
    return [a.type for a in function.arguments], list(function.results)


def run_prefill_decode(text: str, ids: np.ndarray, token: int, position: int,
                       pipeline: str = "snapkv", timeout: int = 600):
    """Compile and run; returns [prefill results..., decode results...] as numpy arrays.

    `pipeline` is "snapkv" (``snapkv-cpu-pipeline{asserts=report}``, as the runtime compiles)
    or "upstream" (:data:`UPSTREAM_PIPELINE`). A compile failure, or a failed run-time check
    of our pipeline, is a ToolError.
    """
    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r}")
    with tempfile.TemporaryDirectory(prefix="snapkv-model-") as tmp:
        library = _build.compile_library(text, cache_dir=tmp, timeout=timeout,
                                         label=f"model ({pipeline} lowering)",
                                         pipeline=PIPELINES[pipeline])
        handle = ctypes.CDLL(str(library.path))  # stays mapped after the file is removed
    # Upstream's lowering has no report-mode checks (snapkv_last_error).
    checks = pipeline == "snapkv"
    prefill, decode = (CompiledFunction(handle, name, _signature(text, name), checks=checks)
                       for name in ("prefill", "decode"))
    try:
        first = prefill(np.ascontiguousarray(ids, dtype=np.int64))
        step = decode(np.full((ids.shape[0], 1), token, np.int64),
                      np.array([position], np.int64), *first[1:])
    except CompiledCheckError as error:
        raise ToolError(str(error)) from None
    return first + step
