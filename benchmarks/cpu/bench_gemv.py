#!/usr/bin/env python3
"""A decode step's vector x matrix products against the machine's memory bandwidth.

A decode step reads every weight once: its projections are vector x matrix products
(``[1, K] x [K, N]``) bound by how fast the weights stream from DRAM. This measures, on
``--layers`` distinct copies of one layer's weights (more bytes than the caches hold, so each
product reads its matrix from memory, as a decode step does):

* **read bandwidth**: ``torch.sum`` over all the weights (2 threads by default), the bytes a
  sum must read divided by its time: what a memory-bound kernel can reach here;
* **ours**: per shape, one compiled function (``snapkv-opt --snapkv-cpu-pipeline``, clang,
  called through ``snapkv.runtime``) that computes ``linalg.matmul`` of ``[1, K] x [K, N]``
  f32 for every copy of that shape, each product at the top of the function as in a decode
  step's layer code, so that one call from Python covers many products; twice: as the
  pipeline builds it (the reduction split into parts, ``reduction-parts=8``, whose 8
  iterations keep OpenMP's static schedule), with ``reduction-parts=0`` (column blocks, the
  form before 2026-12-05) and with ``static-trip-count=0`` (the 8 parts handed out by the
  ``guided`` schedule, as before 2026-12-05 12:00), passes alternated, each after a pause
  (``PAUSE``) so that no runtime's idle threads still spin;
* **torch**: ``x @ W`` on the same arrays.

Then the same shapes over ``--rows`` prompt rows (a prefill's projections, default 2048):
GFLOP/s of ours and of torch's matmul against the 2-thread FMA peak that ``fma_peak.c``
measures (independent FMA chains on every thread).

For each: GB/s of weights read and the share of the read bandwidth. Median of ``--runs``
passes over all copies after one warm-up pass. Timings are measurements, never pass/fail.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

PAUSE = 0.5  # seconds before each timed pass

# SmolLM2-135M's decode projections: (K, N) and how many of each a layer has.
SHAPES = [((576, 576), 2), ((576, 192), 2), ((576, 1536), 2), ((1536, 576), 1)]


def _gemv_module(k: int, n: int, rows: int = 1) -> str:
    # A prefill's projections have a dynamic number of rows (the prompt length).
    m = rows if rows == 1 else "?"
    dims = "()" if rows == 1 else "(%n)"
    return f"""module {{
func.func @gemv(%x: tensor<{m}x{k}xf32>, %w: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<{m}x{k}xf32>
  %e = tensor.empty{dims} : tensor<{m}x{n}xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %y = linalg.matmul ins(%x, %w : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>)
                     outs(%init : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %y : tensor<{m}x{n}xf32>
}}
}}
"""


def _copies_module(k: int, n: int, copies: int) -> str:
    """`@gemv_all(x [1, K], w [copies, K, N]) -> [copies, 1, N]`: one product per copy, each
    at the top of the function (where snapkv-parallelize splits it)."""
    out = f"tensor<{copies}x1x{n}xf32>"
    lines = [f"func.func @gemv_all(%x: tensor<1x{k}xf32>, %w: tensor<{copies}x{k}x{n}xf32>) "
             f"-> {out} {{",
             "  %zero = arith.constant 0.0 : f32",
             f"  %out = tensor.empty() : {out}"]
    prev = "%out"
    for i in range(copies):
        lines += [
            f"  %w{i} = tensor.extract_slice %w[{i}, 0, 0] [1, {k}, {n}] [1, 1, 1] : "
            f"tensor<{copies}x{k}x{n}xf32> to tensor<{k}x{n}xf32>",
            f"  %e{i} = tensor.empty() : tensor<1x{n}xf32>",
            f"  %i{i} = linalg.fill ins(%zero : f32) outs(%e{i} : tensor<1x{n}xf32>) "
            f"-> tensor<1x{n}xf32>",
            f"  %y{i} = linalg.matmul ins(%x, %w{i} : tensor<1x{k}xf32>, tensor<{k}x{n}xf32>) "
            f"outs(%i{i} : tensor<1x{n}xf32>) -> tensor<1x{n}xf32>",
            f"  %o{i} = tensor.insert_slice %y{i} into {prev}[{i}, 0, 0] [1, 1, {n}] [1, 1, 1] "
            f": tensor<1x{n}xf32> into {out}"]
        prev = f"%o{i}"
    lines += [f"  return {prev} : {out}", "}"]
    return "module {\n" + "\n".join(lines) + "\n}\n"


def _fma_peak(threads: int) -> float:
    """GFLOP/s of ``fma_peak.c`` (independent FMA chains on every thread), compiled here."""
    import re
    import subprocess
    import tempfile

    from snapkv import tools

    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "fma_peak"
        subprocess.run([str(tools.require(tools.clang(), "clang")), "-O2", "-march=native",
                        "-pthread", str(here / "fma_peak.c"), "-o", str(exe)], check=True)
        out = subprocess.run([str(exe), str(threads)], capture_output=True, text=True,
                             check=True).stdout
    return float(re.search(r"gflops=([\d.]+)", out).group(1))


def prefill_projections(args, runtime, torch):
    """The same projections over `args.rows` prompt rows (a prefill's GEMMs): GFLOP/s of
    ours (as the pipeline builds it, and with ``row-block=0``: whole columns of rows per
    parallel tile, the form before 2026-12-05 17:00) and of torch's matmul against the
    measured FMA peak."""
    rng = np.random.default_rng(1)
    peak = _fma_peak(args.threads)
    print(f"\nPrefill projections, {args.rows} rows (dynamic, as in the model) x [K, N] f32, "
          f"{args.threads} threads, "
          f"median of {args.runs}; FMA peak (fma_peak.c, {args.threads} threads) "
          f"{peak:.1f} GFLOP/s")
    print("| K x N | ours GFLOP/s | % of FMA peak | ours, `row-block=0` | % of FMA peak | "
          "torch GFLOP/s | % of FMA peak |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    whole_columns = runtime.PIPELINE.replace("asserts=report", "asserts=report row-block=0")
    for (k, n), _ in SHAPES:
        x = rng.standard_normal((args.rows, k), dtype=np.float32)
        w = rng.standard_normal((k, n), dtype=np.float32)
        text = _gemv_module(k, n, args.rows)
        fns = []
        for label, pipeline in (("", runtime.PIPELINE), (" row-block=0", whole_columns)):
            lib = runtime.compile_library(text, label=f"gemm {args.rows}x{k}x{n}{label}",
                                          pipeline=pipeline)
            fn = runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "gemv",
                                          runtime.signature(text, "gemv"))
            (ours,) = fn(x, w)
            if not np.allclose(ours, x @ w, rtol=1e-3, atol=1e-2):
                raise SystemExit(f"gemm {k}x{n}{label}: the compiled result differs from "
                                 "numpy's")
            fns.append(fn)
        flops = 2.0 * args.rows * k * n
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        rates = []
        for fn in fns:
            time.sleep(PAUSE)
            rates.append(flops / statistics.median(fn.time_call(x, w, repeat=args.runs)))
        time.sleep(PAUSE)
        rates.append(flops / _passes(functools.partial(torch.matmul, tx, tw), args.runs))
        print(f"| {k} x {n} | " + " | ".join(f"{r / 1e9:.1f} | {r / 1e9 / peak:.0%}"
                                              for r in rates) + " |")


def _passes(fn, runs):
    times = []
    for _ in range(runs + 1):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=30, help="copies of one layer's weights")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rows", type=int, default=2048,
                    help="prompt rows of the prefill projections (0: skip them)")
    args = ap.parse_args(argv)

    import torch

    from snapkv import runtime

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    weights = {shape: rng.standard_normal((count * args.layers, *shape), dtype=np.float32)
               for shape, count in SHAPES}
    total = sum(w.nbytes for w in weights.values())
    vectors = {shape: rng.standard_normal((1, shape[0]), dtype=np.float32) for shape in weights}

    flat = torch.from_numpy(np.concatenate([w.ravel() for w in weights.values()]))
    read = total / _passes(flat.sum, args.runs)

    def variant(options):
        return runtime.PIPELINE.replace("asserts=report", f"asserts=report {options}")

    forms = {"parts": runtime.PIPELINE, "columns": variant("reduction-parts=0"),
             "guided": variant("static-trip-count=0")}
    functions = {form: {} for form in forms}
    for form, pipeline in forms.items():
        for (k, n), w in weights.items():
            text = _copies_module(k, n, w.shape[0])
            lib = runtime.compile_library(text, label=f"gemv {k}x{n} x{w.shape[0]} ({form})",
                                          pipeline=pipeline)
            fn = runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "gemv_all",
                                          runtime.signature(text, "gemv_all"))
            (ours,) = fn(vectors[(k, n)], w)
            if not np.allclose(ours, vectors[(k, n)] @ w, rtol=1e-4, atol=1e-3):
                raise SystemExit(f"gemv {k}x{n} ({form}): the compiled result differs "
                                 "from numpy's")
            functions[form][(k, n)] = fn

    def ours_pass(form):
        for shape, fn in functions[form].items():
            fn(vectors[shape], weights[shape])

    tw = {shape: [torch.from_numpy(m) for m in w] for shape, w in weights.items()}
    tx = {shape: torch.from_numpy(x) for shape, x in vectors.items()}

    def torch_pass():
        for shape, ws in tw.items():
            x = tx[shape]
            for w in ws:
                x @ w

    # Alternated: each round times every row once, so a slow minute of the machine
    # falls on all of them.
    passes = {form: functools.partial(ours_pass, form) for form in forms}
    passes["torch"] = torch_pass
    times = {name: [] for name in passes}
    for fn in passes.values():
        fn()  # warm-up
    for _ in range(args.runs):
        for name, fn in passes.items():
            # The other runtime's idle threads stop spinning first (libomp's
            # KMP_BLOCKTIME is 200 ms): otherwise the first pass after torch's
            # shares the cores with them.
            time.sleep(PAUSE)
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    rates = {name: total / statistics.median(t) for name, t in times.items()}
    print(f"{args.layers} copies of SmolLM2's decode projections, {total / 1e6:.0f} MB of f32 "
          f"weights, {args.threads} threads, median of {args.runs} alternated passes")
    print("| kernel | GB/s of weights | share of the read bandwidth |")
    print("|---|---:|---:|")
    for name, rate in (("torch.sum (read bandwidth)", read),
                       ("ours: reduction in 8 parts (the pipeline's default)", rates["parts"]),
                       ("ours: column blocks (`reduction-parts=0`)", rates["columns"]),
                       ("ours: 8 parts, guided schedule (`static-trip-count=0`)",
                        rates["guided"]),
                       ("torch x @ W", rates["torch"])):
        print(f"| {name} | {rate / 1e9:.1f} | {rate / read:.0%} |")
    if args.rows:
        prefill_projections(args, runtime, torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
