#!/usr/bin/env python3
"""CPU benchmark of Ada-KV's shared budget: compiled ``snapkv.select_adaptive`` vs compiled
``snapkv.select`` (each head keeping C) vs a PyTorch eager Ada-KV selection, on the shape of
``bench_select.py`` with ``gqa mean`` (the cache heads are the kv heads, as in kvpress):
Hq=32, Hkv=8, D=128, W=32, C=1024, kernel 5, avg pooling, f32, floor 20 % of C - W
(kvpress's ``alpha_safeguard``), B=1, L in ``--lengths``.

* compiled: ``snapkv-opt --snapkv-cpu-pipeline`` -> ``snapkv-translate`` -> ``clang -O3
  -march=native``, called in process (``snapkv.runtime``), bare calls timed;
* PyTorch eager (``torch.set_num_threads(--threads)``): the same votes (full causal softmax
  of the window's queries, the query heads of a kv head averaged, avg pooling), the floor
  (``topk`` per head, raised to +inf), one ``topk`` over the layer's flattened scores, then
  each head's positions sorted and its rows gathered into a packed ``[T, D]`` buffer.

The compiled adaptive select's indices are checked against ``snapkv.reference
.select_adaptive`` (exactly) at the shortest length, and against PyTorch's as kept sets per
head at every length. Medians of ``--runs`` interleaved rounds (one call of each per round).
Prints a markdown table; timings are measurements, never pass/fail.
"""

import argparse
import datetime
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_select as bs  # noqa: E402  (inputs, AotFunction, interleaved, machine_info)

FLOOR = int(0.2 * (bs.C - bs.W))
ADAPTIVE_FN, UNIFORM_FN = "snapkv_select_adaptive", "snapkv_select_mean"


def functions(length):
    """The two compiled functions' MLIR: the uniform select and the adaptive one."""
    tq, tk = bs._tt((1, bs.HQ, bs.W, bs.D)), bs._tt((1, bs.HKV, length, bs.D))
    rows, idx = bs._tt((1, bs.HKV, bs.C, bs.D)), bs._tt((1, bs.HKV, bs.C), "i64")
    packed, flat = bs._tt((1, bs.HKV * bs.C, bs.D)), bs._tt((1, bs.HKV * bs.C), "i64")
    offsets = bs._tt((1, bs.HKV + 1), "i64")
    clauses = f"window {bs.W} capacity {bs.C} kernel {bs.KERNEL} gqa mean"
    uniform = f"""\
  func.func @{UNIFORM_FN}(%q: {tq}, %k: {tk}, %v: {tk}) -> ({rows}, {rows}, {idx}) {{
    %ko, %vo, %i = snapkv.select %q, %k, %v {clauses}
        : ({tq}, {tk}, {tk}) -> ({rows}, {rows}, {idx})
    return %ko, %vo, %i : {rows}, {rows}, {idx}
  }}"""
    adaptive = f"""\
  func.func @{ADAPTIVE_FN}(%q: {tq}, %k: {tk}, %v: {tk})
      -> ({packed}, {packed}, {flat}, {offsets}) {{
    %ko, %vo, %i, %o = snapkv.select_adaptive %q, %k, %v window {bs.W} capacity {bs.C}
        floor {FLOOR} kernel {bs.KERNEL} gqa mean
        : ({tq}, {tk}, {tk}) -> ({packed}, {packed}, {flat}, {offsets})
    return %ko, %vo, %i, %o : {packed}, {packed}, {flat}, {offsets}
  }}"""
    return uniform, adaptive


def torch_adaptive(q, k, v):
    """Ada-KV's selection in PyTorch eager: (packed keys, packed values, per-head positions)."""
    import torch
    import torch.nn.functional as F

    _, hq, window, dim = q.shape
    hkv, length = k.shape[1], k.shape[2]
    group, prefix, keep = hq // hkv, length - window, bs.C - window
    keys = k.repeat_interleave(group, dim=1)
    logits = torch.matmul(q, keys.transpose(-1, -2)) / dim ** 0.5         # [1, Hq, W, L]
    future = (torch.arange(length)[None, :]
              > (prefix + torch.arange(window))[:, None])
    probs = torch.softmax(logits.masked_fill(future, float("-inf")), dim=-1)
    votes = probs[..., :prefix].sum(-2).view(1, hkv, group, prefix).mean(2)
    pooled = F.avg_pool1d(votes, bs.KERNEL, 1, bs.KERNEL // 2, count_include_pad=True)
    best = pooled.topk(FLOOR, dim=-1).indices
    raised = pooled.scatter(-1, best, float("inf")).view(1, hkv * prefix)
    chosen = raised.topk(hkv * keep, dim=-1).indices[0]
    heads = chosen // prefix
    window_rows = torch.arange(prefix, length)
    positions = [torch.cat([torch.sort(chosen[heads == h] - h * prefix).values, window_rows])
                 for h in range(hkv)]
    packed_k = torch.cat([k[0, h, p] for h, p in enumerate(positions)])
    packed_v = torch.cat([v[0, h, p] for h, p in enumerate(positions)])
    return packed_k, packed_v, positions


def measure(length, check_reference, args):
    """(L, median seconds per implementation, rows per kv head, check note)."""
    import torch

    from snapkv import reference

    q, k, v = bs.inputs(length)
    uniform_text, adaptive_text = functions(length)
    uniform = bs.AotFunction(uniform_text, UNIFORM_FN, args.cache_dir)
    adaptive = bs.AotFunction(adaptive_text, ADAPTIVE_FN, args.cache_dir)
    keys, values, idx, offsets = adaptive(q, k, v)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    with torch.inference_mode():
        _, _, positions = torch_adaptive(tq, tk, tv)
    bounds = offsets[0]
    ours = [idx[0, a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    same_sets = sum(set(a.tolist()) == set(p.tolist()) for a, p in zip(ours, positions))
    note = f"kept sets equal to PyTorch's in {same_sets}/{bs.HKV} heads"
    if check_reference:
        ref = reference.select_adaptive(q, k, v, bs.W, bs.C, FLOOR, bs.KERNEL, "avg", "mean")
        exact = (np.array_equal(ref.indices, idx) and np.array_equal(ref.offsets, offsets)
                 and ref.keys.tobytes() == keys.tobytes())
        note += f"; reference {'identical' if exact else 'DIFFERS'}"
    fns = {
        "uniform": lambda: uniform.function.time_call(q, k, v)[0],
        "adaptive": lambda: adaptive.function.time_call(q, k, v)[0],
        "torch": lambda: torch_adaptive(tq, tk, tv),
    }
    with torch.inference_mode():
        times = bs.interleaved(fns, args.runs)
    print(f"  L={length} done", flush=True)
    return length, times, np.diff(bounds).tolist(), note


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="4096,16384,65536")
    ap.add_argument("--runs", type=int, default=7, help="timed rounds (>= 5)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--cache-dir", help="where the compiled .so files are kept")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    rows = [measure(length, n == 0, args)
            for n, length in enumerate(int(x) for x in args.lengths.split(","))]

    mach = bs.machine_info()
    print(f"\nAda-KV selection, Hq={bs.HQ} Hkv={bs.HKV} D={bs.D} W={bs.W} C={bs.C} gqa mean "
          f"floor {FLOOR}, f32, B=1, {args.threads} threads; {mach.get('cpu', '?')}; "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; medians of "
          f"{args.runs}\n")
    print("| L | compiled select (uniform C) ms | compiled select_adaptive ms | "
          "PyTorch eager Ada-KV ms | adaptive vs uniform | adaptive vs PyTorch | "
          "rows per kv head | check |")
    print("|---:|---:|---:|---:|---:|---:|---|---|")
    for length, t, counts, note in rows:
        print(f"| {length} | {t['uniform'] * 1e3:.1f} | {t['adaptive'] * 1e3:.1f} | "
              f"{t['torch'] * 1e3:.1f} | {t['uniform'] / t['adaptive']:.2f}x | "
              f"{t['torch'] / t['adaptive']:.2f}x | {counts} | {note} |")


if __name__ == "__main__":
    main()
