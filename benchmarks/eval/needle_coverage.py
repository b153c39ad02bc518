"""Where the needle is lost: per layer, the share of the asked needle's tokens that each
method's compiled select keeps, averaged over heads and prompts (docs/eval.md, SmolLM2).

    python3 benchmarks/eval/needle_coverage.py --model smollm2-135m-instruct --task passkey \\
        --length 2048 --budget 1/4 --samples 4 --methods snapkv,snapkv-k7,snapkv-gqa-mean

Runs the eval's compiled pieces (one shared prefill per prompt, each method's select) and
prints one row per layer; no decoding.
"""

from __future__ import annotations

import argparse
from fractions import Fraction

import numpy as np

from snapkv import models
from snapkv.evaluation.methods import METHODS, capacity_of
from snapkv.evaluation.pipeline import Pipeline
from snapkv.evaluation.tasks import TextTask


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--task", default="passkey", choices=("passkey", "needle", "multikey"))
    p.add_argument("--length", type=int, default=2048)
    p.add_argument("--budget", default="1/4")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default="snapkv,snapkv-k7,snapkv-gqa-mean")
    args = p.parse_args()
    directory = models.resolve(args.model)
    pipeline = Pipeline(directory, TextTask.default_window)
    task = TextTask(args.task, directory)
    methods = [METHODS[name] for name in args.methods.split(",")]
    capacity = capacity_of(args.length, Fraction(args.budget))
    shares = {m.name: [] for m in methods}
    for index in range(args.samples):
        sample = task.sample(args.length, args.seed, index)
        pipeline.need_rows(methods)
        _, caches, queries = pipeline.prefill(sample.ids)
        for method in methods:
            _, kept = pipeline.compact(method, capacity, args.seed, caches, queries)
            shares[method.name].append([np.mean([np.isin(sample.positions, row).mean()
                                                 for row in layer[0]]) for layer in kept])
    print(f"{args.task}, L={args.length}, C={capacity} ({args.budget}), {args.samples} "
          f"prompts: share of the asked needle's tokens kept, mean over heads and prompts")
    print("layer  " + "  ".join(f"{m.name:>16}" for m in methods))
    table = {name: np.mean(np.array(rows), axis=0) for name, rows in shares.items()}
    for layer in range(len(next(iter(table.values())))):
        print(f"{layer:>5}  " + "  ".join(f"{table[m.name][layer]:>16.0%}" for m in methods))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
