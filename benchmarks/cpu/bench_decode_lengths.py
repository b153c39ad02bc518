#!/usr/bin/env python3
"""A real model's decode step against the prompt length: flat for the compacted cache, linear
only in the attention for the full one.

SmolLM2-135M-Instruct (``--model``, any name ``snapkv models`` lists or a checkpoint directory)
compiled by ``snapkv.hf.load`` three ways:

* **full, in place**: the exported module; caches of T = L rows that each step extends in
  place (``snapkv-append-in-place``, ``runtime.KVCache``);
* **full, copying**: the same module with ``in_place=False``: each step returns new caches of
  T + 1 rows (the compiled code allocates and copies them, the runner copies them out), what
  every step cost before the in-place decode;
* **SnapKV C**: rewritten with ``gqa mean``, W = 32, capacity ``--capacity`` (default 512):
  caches of C rows whatever L is, decoded in place at logical position L.

Each row decodes one token at logical position L from random caches of its physical length
(fixed numpy seed): the step's cost depends on the cache's shape, not its content. The lengths
are taken in turn within each of ``--runs`` rounds (so that a slow minute of a shared machine
spreads over all rows); per row and length the median of the rounds, in ms. A step over a
cache of T rows reads every weight once (about 540 MB of f32) plus the cache
(30 layers x K and V x 3 heads x T x 64 x 4 bytes: 46 KB per row). Timings are measurements,
never pass/fail.
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--lengths", default="1024,2048,4096,8000")
    ap.add_argument("--capacity", type=int, default=512)
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args(argv)

    from snapkv import hf, models

    model_dir = models.resolve(args.model)
    lengths = [int(x) for x in args.lengths.split(",")]
    rows = {
        "full, in place": (hf.load(model_dir), None),
        "full, copying (in_place=False)": (hf.load(model_dir, in_place=False), None),
        f"SnapKV C = {args.capacity} (gqa mean), in place": (
            hf.load(model_dir, hf.Compaction(window=32, capacity=args.capacity, gqa="mean")),
            args.capacity),
    }
    rng = np.random.default_rng(0)
    caches = {}
    for name, (model, capacity) in rows.items():
        for length in lengths:
            held = capacity or length
            arrays = [rng.standard_normal((1, t.shape[1], held, t.shape[3])).astype(np.float32)
                      for t in model.cache_types]
            # In place: room for every round's row. Copying: the same T rows each time.
            caches[name, length] = model.cache(arrays, args.runs + 1)
    times = {key: [] for key in caches}
    for _ in range(args.runs + 1):  # the first round warms up
        for (name, length), cache in caches.items():
            model = rows[name][0]
            start = time.perf_counter()
            model.decode(1, length, cache)
            times[name, length].append(time.perf_counter() - start)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{os.environ.get('OMP_NUM_THREADS', 'all')} OpenMP threads; {date}; model "
          f"{model_dir.name}; median of {args.runs} rounds (ms per decode step)\n")
    print("| row | " + " | ".join(f"L = {n:,}" for n in lengths) + " |")
    print("|---|" + "---:|" * len(lengths))
    for name in rows:
        cells = [statistics.median(times[name, n][1:]) * 1e3 for n in lengths]
        print(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
