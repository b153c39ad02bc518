#!/usr/bin/env python3
"""A real model's decode step over a ragged cache (``budget=adaptive``) against the uniform
one at the same bytes.

SmolLM2-135M-Instruct (``--model``) compiled by ``snapkv.hf.load`` with ``gqa mean``, W = 32:

* **uniform C**: ``budget=uniform``: every one of the Hkv = 3 cache heads holds C rows
  (``[1, 3, C, 64]`` per layer, ``runtime.KVCache``);
* **ragged, even**: ``budget=adaptive``: the same 3 x C rows per layer packed ``[1, 3C, 64]``
  with each head's start and length (``runtime.RaggedKVCache``), every head C rows: what the
  ragged layout costs by itself (per-head loop, ``snapkv.ragged_attention``);
* **ragged, skewed**: the same 3 x C rows split C/4, C, 7C/4 (Ada-KV's heads differ by more
  than that on SmolLM2, docs/eval.md): what an uneven split costs;
* **full L**: the original model over all L rows, for scale.

Each row decodes one token at logical position L from random caches (fixed numpy seed): the
step's cost depends on the cache's shape, not its content. Rows are taken in turn within each
of ``--runs`` rounds (a slow minute of a shared machine spreads over all of them); per row the
median of the rounds, in ms, and the ratio to the uniform row of the same C from the same run.
Timings are measurements, never pass/fail.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))


def ragged_arrays(model, rng, counts):
    """Per layer (keys, values, offsets) of random rows, head c holding counts[c]."""
    layers = []
    dim = model.decode_signature.args[2].shape[-1]
    offsets = np.concatenate([[0], np.cumsum(counts)])[None].astype(np.int64)
    for _ in range(model.num_caches // 2):
        k, v = (rng.standard_normal((1, int(offsets[0, -1]), dim)).astype(np.float32)
                for _ in range(2))
        layers += [k, v, offsets]
    return layers


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--length", type=int, default=4096, help="logical position L")
    ap.add_argument("--capacities", default="256,1024")
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args(argv)

    from snapkv import hf, models

    model_dir = models.resolve(args.model)
    capacities = [int(x) for x in args.capacities.split(",")]
    full = hf.load(model_dir)
    rng = np.random.default_rng(0)
    rows = {}  # name -> (model, cache)
    arrays = [rng.standard_normal((1, t.shape[1], args.length, t.shape[3])).astype(np.float32)
              for t in full.cache_types]
    rows[f"full, L = {args.length:,}"] = (full, full.cache(arrays, args.runs + 1))
    for capacity in capacities:
        uniform = hf.load(model_dir, hf.Compaction(window=32, capacity=capacity, gqa="mean"))
        ragged = hf.load(model_dir, hf.Compaction(window=32, capacity=capacity, gqa="mean",
                                                  budget="adaptive"))
        heads = uniform.cache_types[0].shape[1]
        arrays = [rng.standard_normal((1, heads, capacity, t.shape[3])).astype(np.float32)
                  for t in uniform.cache_types]
        rows[f"uniform C = {capacity}"] = (uniform, uniform.cache(arrays, args.runs + 1))
        even = [capacity] * heads
        skewed = [capacity // 4, capacity, heads * capacity - capacity // 4 - capacity]
        for label, counts in (("even", even), ("skewed", skewed)):
            cache = ragged.cache(ragged_arrays(ragged, rng, counts), args.runs + 1)
            assert cache.nbytes == rows[f"uniform C = {capacity}"][1].nbytes
            rows[f"ragged C = {capacity}, {label} ({'/'.join(map(str, counts))})"] = \
                (ragged, cache)
    times = {name: [] for name in rows}
    for _ in range(args.runs + 1):  # the first round warms up
        for name, (model, cache) in rows.items():
            start = time.perf_counter()
            model.decode(1, args.length, cache)
            times[name].append(time.perf_counter() - start)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{os.environ.get('OMP_NUM_THREADS', 'all')} OpenMP threads; {date}; model "
          f"{model_dir.name}; logical position {args.length:,}; median of {args.runs} rounds\n")
    print("| row | K/V bytes held | ms per decode step | vs uniform, same C |")
    print("|---|---:|---:|---:|")
    for name, (_, cache) in rows.items():
        ms = statistics.median(times[name][1:]) * 1e3
        base = next((statistics.median(times[n][1:]) * 1e3 for n in rows
                     if n.startswith("uniform") and name.startswith(("uniform", "ragged"))
                     and n.split("C = ")[1] == name.split("C = ")[1].split(",")[0]), None)
        ratio = f"{ms / base:.2f}x" if base else ""
        print(f"| {name} | {cache.nbytes:,} | {ms:.1f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
