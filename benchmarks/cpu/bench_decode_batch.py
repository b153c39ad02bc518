#!/usr/bin/env python3
"""Decode throughput at one cache budget: the full cache vs SnapKV, one batched
``@decode_batch`` call per step vs one ``@decode`` call per sequence (docs/serving.md).

The sequences are those of ``bench_serve.py``'s 16 passkey prompts of 1K-4K tokens (the
lengths cycled), admitted first come, first served while their reservations (rows kept
after prefill plus ``--max-tokens - 1``) fit in ``--cache-budget``; their caches are
synthetic (random rows of the sizes prefill leaves: decode time does not depend on the
values), so no prefill runs and only decode steps are timed, the two modes alternated.
Prints the sequences at once and, per mode, the median step time and the aggregate decode
tokens/s (sequences / step time).

Batched steps take at most ``--decode-batch`` sequences; fewer take the smallest exported
step that fits (as the engine: the powers of two below N, and N).

    python benchmarks/cpu/bench_decode_batch.py          # SmolLM2, 256 MiB, C = 256, N = 8
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))


def run(args, label, compaction):
    from snapkv import hf, models
    from snapkv.runtime import KVCache
    from snapkv.serving.loading import decode_batch_sizes

    # The steps the engine exports: a step of k sequences takes the smallest that fits.
    model = hf.load(models.path(args.model), compaction,
                    options=hf.ExportOptions(batch=decode_batch_sizes(args.decode_batch)))
    lengths = [args.lengths[i % len(args.lengths)] for i in range(args.prompts)]
    kept = [L if compaction is None else min(L, compaction.capacity) for L in lengths]
    sig = model.batch_signature
    layers = len(model.batch_in_place["buffers"]) // 2
    heads, dim = sig.inputs[2 + 2 * layers].shape[-1], sig.inputs[2].shape[-1]
    row = layers * 2 * heads * dim * sig.inputs[2].dtype.itemsize
    used, running = 0, []
    for i, k in enumerate(kept):  # first come, first served until the budget is full
        need = row * (k + args.max_tokens - 1)
        if used + need > args.cache_budget * 2**20:
            break
        used, running = used + need, running + [i]
    rng = np.random.default_rng(0)
    caches = {i: [(rng.standard_normal((1, heads, kept[i], dim)) * 0.1).astype(np.float32)
                  for _ in range(2 * layers)] for i in running}
    spare = args.steps + 4
    pool = model.pool()
    for i in running:
        model.add_to_pool(pool, i, caches[i], spare=spare)
    single = {i: KVCache(caches[i], spare=spare) for i in running}
    times = {"batched": [], "per-sequence": []}
    for step in range(args.steps):
        order = ("batched", "per-sequence") if step % 2 == 0 else ("per-sequence", "batched")
        for mode in order:
            start = time.perf_counter()
            if mode == "batched":
                model.decode_batch([7] * len(running), [lengths[i] + step for i in running],
                                   pool, running)
            else:
                for i in running:
                    model.decode(7, lengths[i] + step, single[i])
            times[mode].append(time.perf_counter() - start)
    for mode, spent in times.items():
        median = float(np.median(spent))
        print(f"| {label} | {len(running)} | {used / 2**20:.0f} | {mode} | {median * 1e3:.0f} | "
              f"{len(running) / median:.1f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1024, 2048, 3072, 4096])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--cache-budget", type=float, default=256.0, metavar="MB")
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--capacity", type=int, default=256)
    parser.add_argument("--decode-batch", type=int, default=8, metavar="N")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    from snapkv import hf

    print("| cache | sequences at once | K/V reserved (MiB) | decode | step (ms, median) | "
          "decode tokens/s |")
    print("|---|---:|---:|---|---:|---:|")
    run(args, "full", None)
    run(args, f"SnapKV C={args.capacity}",
        hf.Compaction(window=args.window, capacity=args.capacity))
    return 0


if __name__ == "__main__":
    sys.exit(main())
