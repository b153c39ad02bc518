#!/usr/bin/env python3
"""``snapkv.attention`` compiled two ways, on SmolLM2-135M's shapes, in one run.

Each shape is one compiled function holding one ``snapkv.attention`` (9 query heads, 3 kv
heads, D = 64, the lengths dynamic as in the model): a prefill (Lq = Lk, causal) and a
decode step (one query row per head over the keys, its position as the offset), lowered by
``snapkv-opt --snapkv-cpu-pipeline`` (the op tiled through its TilingInterface and each tile
decomposed). The two variants compared:

* by default, f32 against bf16 queries, keys, values and result (as the bf16 model passes
  them) from this checkout's ``snapkv-opt``;
* with ``--base-opt PATH``, another build's ``snapkv-opt`` (``base``, e.g. an older commit's)
  against this checkout's (``this``), both in ``--dtype``.

The two are called alternately (``--runs`` rounds after one warm-up call each, every other
round in the opposite order, a pause before each call so that no OpenMP thread still
spins), and the table gives the median of each and the ratio second / first, after checking
that the two agree. Timings are measurements, never pass/fail; on a shared machine they are
contended (say so with ``--note``).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

PAUSE = 0.2  # seconds before each timed call
HEADS, KV_HEADS, DIM = 9, 3, 64


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


def _compile(text: str, opt: str | None):
    """`text` through the CPU pipeline of `opt` (None: this checkout's snapkv-opt)."""
    from snapkv import runtime
    saved = os.environ.get("SNAPKV_OPT")
    if opt:
        os.environ["SNAPKV_OPT"] = opt
    try:
        lib = runtime.compile_library(text, label="attention")
    finally:
        if opt:
            if saved is None:
                del os.environ["SNAPKV_OPT"]
            else:
                os.environ["SNAPKV_OPT"] = saved
    return runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "attn",
                                    runtime.signature(text, "attn"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefill", type=int, nargs="*", default=[2048, 4096],
                        help="prompt lengths (Lq = Lk)")
    parser.add_argument("--decode", type=int, nargs="*", default=[4096],
                        help="key counts of a decode step")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--base-opt", default=None,
                        help="another build's snapkv-opt to compare this checkout's against")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="bf16",
                        help="element type of both variants with --base-opt")
    parser.add_argument("--note", default="", help="conditions printed under the table")
    args = parser.parse_args()
    if args.base_opt and not Path(args.base_opt).is_file():
        parser.error(f"--base-opt: no such file: {args.base_opt}")
    # (label, element type, snapkv-opt)
    variants = ([("base", args.dtype, args.base_opt), ("this", args.dtype, None)]
                if args.base_opt else [("f32", "f32", None), ("bf16", "bf16", None)])
    rng = np.random.default_rng(0)
    cases = [("prefill", n) for n in args.prefill] + [("decode", n) for n in args.decode]
    fns = {decode: [_compile(_module(decode, dtype), opt) for _, dtype, opt in variants]
           for decode in {kind == "decode" for kind, _ in cases}}
    (a, _, _), (b, _, _) = variants
    print(f"snapkv.attention, {HEADS} query / {KV_HEADS} kv heads, D = {DIM}"
          f"{', ' + args.dtype if args.base_opt else ''}; median of {args.runs} alternated "
          f"calls (ms)")
    print(f"{'case':<16} {a:>10} {b:>10} {b + '/' + a:>14}")
    for kind, n in cases:
        decode = kind == "decode"
        q = rng.standard_normal((1, HEADS, 1 if decode else n, DIM), dtype=np.float32)
        k, v = (rng.standard_normal((1, KV_HEADS, n, DIM), dtype=np.float32) for _ in "kv")
        position = (np.array([n - 1], dtype=np.int64),) if decode else ()
        calls = [tuple(_typed(x, dtype) for x in (q, k, v)) + position
                 for _, dtype, _ in variants]
        outs = [_f32(fn(*call)[0], dtype)  # warm-up
                for fn, call, (_, dtype, _) in zip(fns[decode], calls, variants)]
        # bf16 results are rounded to 8 bits of mantissa.
        bf16 = any(dtype == "bf16" for _, dtype, _ in variants)
        np.testing.assert_allclose(outs[1], outs[0], rtol=0, atol=3e-2 if bf16 else 1e-5)
        times = [[], []]
        for round_ in range(args.runs):
            # ABBA: neither variant always runs first.
            for i in (0, 1) if round_ % 2 == 0 else (1, 0):
                time.sleep(PAUSE)
                start = time.perf_counter()
                fns[decode][i](*calls[i])
                times[i].append((time.perf_counter() - start) * 1e3)
        ta, tb = (statistics.median(t) for t in times)
        label = f"{kind} {n}" if not decode else f"decode 1x{n}"
        print(f"{label:<16} {ta:>10.2f} {tb:>10.2f} {tb / ta:>13.2f}x")
    if args.note:
        print(args.note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
