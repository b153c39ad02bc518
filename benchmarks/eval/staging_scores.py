"""Two-level chunked prefill on the real model in PyTorch: which staging score keeps the key?

A prototype before compiling a scoring: the prompts of `snapkv eval --task T` (same seed,
indices, token ids) through :func:`snapkv.frontend.reference_decode.snapkv_generate` (HF's
eager forward for the model, :func:`snapkv.reference.select` for every selection, float64)
with, per prompt, one full prefill shared by ``full`` and the one-shot selection, and one
chunked prefill per staged method. Methods (window 32, ``gqa mean``, kernel 15, C = L *
budget, chunks of ``--chunk`` tokens, M = factor x C):

* ``full``: the whole cache; ``oneshot``: SnapKV's selection of the whole prompt;
* ``chunked``: every chunk compacted to C by its own last window (no staging);
* ``m{F}c-{scoring}``: every chunk but the last staged to M = F x C rows ranked by
  ``scoring`` (``sum``, ``norm_sum``, ``keydiff``; ``keydiff-k1`` unpooled), the last chunk's
  selection to C by the prompt's window.

For each it prints right/n with the Wilson interval and ``held``: the mean share of the asked
needle's token positions that the final caches hold (over layers and kv heads). Accuracy
only: timings are not recorded. ::

    nice -n 10 python3 benchmarks/eval/staging_scores.py --length 4000 --samples 6 \\
        --chunk 1000 --methods full,oneshot,m2c-sum,m2c-keydiff,m4c-sum,m4c-keydiff \\
        --json /tmp/staging.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from snapkv import models, reference  # noqa: E402
from snapkv.evaluation.results import wilson  # noqa: E402
from snapkv.evaluation.tasks import TextTask  # noqa: E402

WINDOW, KERNEL, GQA = 32, 15, "mean"


def parse_method(name):
    """``(staging factor, scoring, kernel of the staging)`` of a staged method name."""
    factor, _, scoring = name.partition("-")
    if not (factor.startswith("m") and factor.endswith("c") and factor[1:-1].isdigit()):
        raise SystemExit(f"staging_scores.py: unknown method {name!r}")
    kernel = KERNEL
    if scoring.endswith("-k1"):
        scoring, kernel = scoring[:-3], 1
    if scoring not in reference.SCORINGS:
        raise SystemExit(f"staging_scores.py: unknown scoring {scoring!r} in {name!r}")
    return int(factor[1:-1]), scoring, kernel


def held_positions(out, bounds):
    """Per layer ``[Hkv, S]`` prompt positions of the final caches, from every chunk's
    selection (rows of the concatenation of the kept rows and the next chunk)."""
    held = []
    for layer in range(len(out["indices"])):
        positions = np.arange(bounds[0][1])[None]
        for step, (start, stop) in enumerate(bounds[1:]):
            chosen = out["chunk_selections"][step][layer].indices[0]
            positions = np.take_along_axis(np.broadcast_to(positions, (len(chosen),
                                                                       positions.shape[1])),
                                           chosen, axis=1)
            chunk = np.broadcast_to(np.arange(start, stop), (len(chosen), stop - start))
            positions = np.concatenate([positions, chunk], axis=1)
        held.append(np.take_along_axis(positions, out["indices"][layer][0], axis=1))
    return held


def run(model, sample, method, capacity, chunk, prefilled):
    import torch

    from snapkv.frontend import reference_decode as rd

    ids = torch.from_numpy(sample.ids)[None]
    if method == "full":
        logits, keys, values, _ = prefilled
        tokens, _, _ = rd.greedy_decode(model, logits[0, -1], sample.length,
                                        [k.clone() for k in keys], [v.clone() for v in values],
                                        sample.steps, expanded=False)
        return tokens, None
    common = dict(window=WINDOW, capacity=capacity, kernel=KERNEL, pooling="avg", gqa=GQA)
    if method == "oneshot":
        out = rd.snapkv_generate(model, ids, sample.steps, prefilled=prefilled, **common)
        return out["tokens"], [i[0] for i in out["indices"]]
    if method == "chunked":
        out = rd.snapkv_generate(model, ids, sample.steps, chunk=chunk, **common)
    else:
        factor, scoring, kernel = parse_method(method)
        # The staging's kernel: every select of a chunk but the last uses `kernel` (its
        # scoring's pooling); the last chunk's select ranks by SnapKV's votes with KERNEL.
        out = staged_generate(model, ids, sample.steps, chunk, factor * capacity, scoring,
                              kernel, common)
    return out["tokens"], held_positions(out, reference.chunk_bounds(sample.length, chunk,
                                                                     WINDOW))


def staged_generate(model, ids, steps, chunk, staging, scoring, kernel, common):
    """snapkv_generate with staging; a staging kernel other than the final selection's is
    passed by wrapping the reference's per-chunk compaction."""
    from snapkv.frontend import reference_decode as rd

    if kernel == common["kernel"]:
        return rd.snapkv_generate(model, ids, steps, chunk=chunk, staging=staging,
                                  staging_scoring=scoring, **common)
    original = rd._compact

    def compact(queries, keys, values, window, capacity, _kernel, *rest):
        return original(queries, keys, values, window, capacity, kernel, *rest)

    rd._compact = compact
    try:
        return rd.snapkv_generate(model, ids, steps, chunk=chunk, staging=staging,
                                  staging_scoring=scoring, **common)
    finally:
        rd._compact = original


def share_work(rd):
    """Two savings that change no result: the LM head only for the last row (every caller
    here reads ``logits[0, -1]``), and the first chunk's prefill computed once per prompt for
    all the chunked methods (it does not depend on the staging)."""
    forward = rd._forward_capturing
    rd._forward_capturing = lambda model, cache, **kwargs: forward(model, cache,
                                                                  logits_to_keep=1, **kwargs)
    prefill, memo = rd.prefill, {}

    def shared_prefill(model, ids):
        key = ids.numpy().tobytes()
        if key not in memo:
            memo.clear()
            memo[key] = prefill(model, ids)
        logits, keys, values, queries = memo[key]
        return logits, list(keys), list(values), list(queries)

    rd.prefill = shared_prefill


def arguments(doc, methods):
    """The options both prototypes take (`methods`: the default of ``--methods``)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--task", default="passkey", choices=("passkey", "needle", "multikey"))
    p.add_argument("--length", type=int, default=4000)
    p.add_argument("--budget", type=float, default=1 / 8, help="C = length * budget")
    p.add_argument("--chunk", type=int, default=1000)
    p.add_argument("--samples", type=int, default=6)
    p.add_argument("--first", type=int, default=0, help="first prompt index")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default=methods)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="every prompt's rows (rewritten after each)")
    return p


def load(args):
    """``(model, task)``: the checkpoint in HF's eager float32 forward, and its text task."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    directory = models.resolve(args.model)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    return model, TextTask(args.task, directory)


def summary(title, methods, rows):
    """Per method: right/n with the Wilson interval and the mean ``held``."""
    print(f"\n{title}")
    for method in methods:
        mine = [r for r in rows if r["method"] == method]
        right = sum(r["correct"] for r in mine)
        low, high = wilson(right, len(mine))
        held = [r["held"] for r in mine if r["held"] is not None]
        print(f"{method:28s} {right}/{len(mine)} [{100 * low:.0f}-{100 * high:.0f}]"
              + (f"  held {np.mean(held):.2f}" if held else ""))


def main(argv=None) -> int:
    p = arguments(__doc__, "full,oneshot,m2c-sum,m2c-keydiff,m4c-sum,m4c-keydiff")
    args = p.parse_args(argv)

    import torch

    from snapkv.frontend import reference_decode as rd

    model, task = load(args)
    share_work(rd)
    capacity = int(args.length * args.budget)
    methods = args.methods.split(",")
    for method in methods:
        if method not in ("full", "oneshot", "chunked"):
            parse_method(method)
    rows = []
    for index in range(args.first, args.first + args.samples):
        sample = task.sample(args.length, args.seed, index)
        prefilled = rd.prefill(model, torch.from_numpy(sample.ids)[None]) \
            if {"full", "oneshot"} & set(methods) else None
        for method in methods:
            start = time.perf_counter()
            tokens, held = run(model, sample, method, capacity, args.chunk, prefilled)
            share = None if held is None else float(np.mean(
                [np.isin(sample.positions, row).mean() for layer in held for row in layer]))
            rows.append(dict(index=index, method=method, answer=sample.answer,
                             said=sample.said(tokens), correct=bool(sample.judge(tokens)),
                             held=share, seconds=round(time.perf_counter() - start, 1)))
            print(json.dumps(rows[-1]), flush=True)
            if args.json:
                args.json.write_text(json.dumps(dict(
                    task=args.task, length=args.length, capacity=capacity, chunk=args.chunk,
                    window=WINDOW, kernel=KERNEL, gqa=GQA, rows=rows), indent=1))
    summary(f"{args.task}, L = {args.length}, C = {capacity}, chunk {args.chunk}, "
            f"prompts {args.first}..{args.first + args.samples - 1}", methods, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
