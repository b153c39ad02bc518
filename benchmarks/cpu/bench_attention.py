#!/usr/bin/env python3
"""``snapkv.attention`` lowered two ways, on SmolLM2-135M's shapes, in one run.

Each shape is one compiled function holding one ``snapkv.attention`` (9 query heads, 3 kv
heads, D = 64, f32 or, with ``--dtype bf16``, bf16 queries, keys and values as the bf16
model passes them; the lengths dynamic as in the model): a prefill (Lq = Lk, causal) and a
decode step (one query row per head over the keys, its position as the offset). Two
libraries per shape from ``snapkv-opt --snapkv-cpu-pipeline``:

* ``builder``: the pipeline's default;
* ``tiled``: ``attention-interface=true``, the op tiled through its TilingInterface and
  each tile decomposed (``AggregatedOpInterface``).

The two are called alternately (``--runs`` rounds after one warm-up call each, every other
round in the opposite order, a pause before each call so that no OpenMP thread still
spins), and the table gives the median of each and the ratio tiled / builder. Timings are
measurements, never pass/fail; on a shared machine they are contended (say so with
``--note``).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

PAUSE = 0.2  # seconds before each timed call
HEADS, KV_HEADS, DIM = 9, 3, 64
MODES = {"builder": "", "tiled": " attention-interface=true"}


def _module(decode: bool, dtype: str) -> str:
    q = f"tensor<1x{HEADS}x{'1' if decode else '?'}x{DIM}x{dtype}>"
    kv = f"tensor<1x{KV_HEADS}x?x{DIM}x{dtype}>"
    arg, convert, use = "", "", ""
    if decode:
        arg = ", %p: tensor<1xi64>"
        convert = ("  %c0 = arith.constant 0 : index\n"
                   "  %p0 = tensor.extract %p[%c0] : tensor<1xi64>\n"
                   "  %off = arith.index_cast %p0 : i64 to index\n")
        use = " offset %off"
    return (f"module {{\nfunc.func @attn(%q: {q}, %k: {kv}, %v: {kv}{arg}) -> {q} {{\n"
            f"{convert}  %o = snapkv.attention %q, %k, %v{use} outs(%q : {q}) : {q}, {kv}, "
            f"{kv} -> {q}\n  return %o : {q}\n}}\n}}\n")


def _typed(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` (f32) in `dtype`: bf16 as its bits (uint16)."""
    from snapkv.dtypes import f32_to_bf16
    return x if dtype == "f32" else f32_to_bf16(x)


def _f32(x: np.ndarray, dtype: str) -> np.ndarray:
    from snapkv.dtypes import bf16_to_f32
    return x if dtype == "f32" else bf16_to_f32(x)


def _compile(text: str, extra: str):
    from snapkv import runtime
    pipeline = runtime.PIPELINE.replace("asserts=report", "asserts=report" + extra)
    lib = runtime.compile_library(text, label="attention", pipeline=pipeline)
    return runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "attn",
                                    runtime.signature(text, "attn"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefill", type=int, nargs="*", default=[2048, 4096],
                        help="prompt lengths (Lq = Lk)")
    parser.add_argument("--decode", type=int, nargs="*", default=[4096],
                        help="key counts of a decode step")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                        help="element type of the queries, keys, values and result")
    parser.add_argument("--note", default="", help="conditions printed under the table")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cases = [("prefill", n) for n in args.prefill] + [("decode", n) for n in args.decode]
    fns = {decode: {mode: _compile(_module(decode, args.dtype), extra)
                    for mode, extra in MODES.items()}
           for decode in {kind == "decode" for kind, _ in cases}}
    print(f"snapkv.attention, {HEADS} query / {KV_HEADS} kv heads, D = {DIM}, {args.dtype}; "
          f"median of "
          f"{args.runs} alternated calls (ms)")
    print(f"{'case':<16} {'builder':>10} {'tiled':>10} {'tiled/builder':>14}")
    for kind, n in cases:
        decode = kind == "decode"
        q = _typed(rng.standard_normal((1, HEADS, 1 if decode else n, DIM), dtype=np.float32),
                   args.dtype)
        k, v = (_typed(rng.standard_normal((1, KV_HEADS, n, DIM), dtype=np.float32), args.dtype)
                for _ in "kv")
        call = (q, k, v) + ((np.array([n - 1], dtype=np.int64),) if decode else ())
        times = {mode: [] for mode in MODES}
        outs = {mode: fns[decode][mode](*call)[0] for mode in MODES}  # warm-up
        # bf16: the two forms round their f32 results to bf16 (8 bits of mantissa).
        np.testing.assert_allclose(_f32(outs["tiled"], args.dtype),
                                   _f32(outs["builder"], args.dtype), rtol=0,
                                   atol=1e-5 if args.dtype == "f32" else 2e-2)
        for round_ in range(args.runs):
            # ABBA: neither library always runs first.
            for mode in list(MODES)[::1 if round_ % 2 == 0 else -1]:
                time.sleep(PAUSE)
                start = time.perf_counter()
                fns[decode][mode](*call)
                times[mode].append((time.perf_counter() - start) * 1e3)
        b, t = (statistics.median(times[m]) for m in MODES)
        label = f"{kind} {n}" if not decode else f"decode 1x{n}"
        print(f"{label:<16} {b:>10.2f} {t:>10.2f} {t / b:>13.2f}x")
    if args.note:
        print(args.note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
