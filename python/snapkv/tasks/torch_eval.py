"""PyTorch check of the retrieval task: accuracy of full, SnapKV and StreamingLLM caches.

For each prompt (:func:`snapkv.tasks.retrieval.samples`) one full-attention prefill
(:func:`snapkv.frontend.reference_decode.prefill`) is shared by the cache policies; then the
answer is decoded greedily, one token at its logical position ``L + g`` per step:

* ``full``: every prompt position is cached;
* ``snapkv``: per layer and per head the positions :func:`snapkv.reference.select` keeps
  (window ``WINDOW``, ``gqa`` expand, ``pooling`` avg, kernel 5, ``C = L * budget``), decoded
  by :func:`snapkv.frontend.reference_decode.snapkv_generate`;
* ``streaming``: StreamingLLM -- the first ``SINKS`` = 4 positions (attention sinks) and the
  most recent ``C - 4``, the same for every head.

A prompt counts as correct when all answer tokens are. ::

    python -m snapkv.tasks.torch_eval --lengths 512 1024 --samples 20 --seed 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from . import retrieval

METHODS = ("full", "snapkv", "streaming")
WINDOW = 16
SINKS = 4


def streaming_positions(length, capacity, sinks=SINKS):
    """StreamingLLM's kept positions: ``sinks`` first and ``capacity - sinks`` most recent
    (everything when ``length <= capacity``)."""
    if capacity <= sinks:
        raise ValueError(f"capacity ({capacity}) must exceed the {sinks} attention sinks")
    if length <= capacity:
        return np.arange(length)
    return np.concatenate([np.arange(sinks), np.arange(length - (capacity - sinks), length)])


def prefill(model, sample):
    """The full-attention prefill of ``sample`` (logits, keys, values, queries per layer) that
    :func:`answer` can share between cache policies."""
    import torch

    from ..frontend import reference_decode as rd

    return rd.prefill(model, torch.from_numpy(sample.ids)[None])


def answer(model, sample, method, capacity=None, prefilled=None):
    """Greedy answer tokens (``len(sample.answer)`` of them) under a cache policy, and the kept
    prompt positions (per layer ``[heads, S]``; ``None`` for ``full``)."""
    import torch

    from ..frontend import reference_decode as rd

    length, steps = sample.length, len(sample.answer) - 1
    ids = torch.from_numpy(sample.ids)[None]
    prefilled = prefill(model, sample) if prefilled is None else prefilled
    logits, keys, values, _ = prefilled
    if method == "snapkv":
        out = rd.snapkv_generate(model, ids, steps, WINDOW, capacity, kernel=5, pooling="avg",
                                 gqa="expand", order="position", prefilled=prefilled)
        return out["tokens"], [i[0] for i in out["indices"]]
    if method == "full":
        kept = None
        cache_k = [k.clone() for k in keys]
        cache_v = [v.clone() for v in values]
    elif method == "streaming":
        index = torch.from_numpy(streaming_positions(length, capacity))
        kept = [np.broadcast_to(index.numpy(), (k.shape[1], len(index))) for k in keys]
        cache_k = [k[:, :, index].clone() for k in keys]
        cache_v = [v[:, :, index].clone() for v in values]
    else:
        raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
    tokens, _, _ = rd.greedy_decode(model, logits[0, -1], length, cache_k, cache_v, steps,
                                    expanded=False)
    return tokens, kept


def evaluate(model, lengths, budget, samples, seed, methods=METHODS,
             variant=retrieval.DEFAULT_VARIANT, log=None):
    """``[{"method", "length", "budget", "capacity", "accuracy", "n", "needle_kept"}]``.

    ``needle_kept``: the fraction of (prompt, layer, head) whose kept positions include every
    answer token's position (``None`` for ``full``)."""
    results = []
    for length in lengths:
        capacity = int(length * budget)
        hits = {m: 0 for m in methods}
        kept_all = {m: [] for m in methods}
        start = time.time()
        batch = retrieval.samples(samples, length, seed, variant)
        for sample in batch:
            prefilled = prefill(model, sample)
            for method in methods:
                tokens, kept = answer(model, sample, method, capacity, prefilled)
                hits[method] += int(tokens == sample.answer.tolist())
                if kept is not None:
                    kept_all[method].extend(
                        bool(np.isin(sample.value_positions, row).all())
                        for layer in kept for row in layer)
        for method in methods:
            kept = kept_all[method]
            results.append(dict(method=method, length=length, budget=budget,
                                capacity=length if method == "full" else capacity,
                                accuracy=hits[method] / samples, n=samples, seed=seed,
                                variant=variant,
                                needle_kept=float(np.mean(kept)) if kept else None))
        if log:
            log(f"L={length}: " + ", ".join(f"{m} {hits[m]}/{samples}" for m in methods)
                + f" ({time.time() - start:.0f} s)")
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint directory "
                        "(default: models/retrieval-llama)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--budget", type=float, default=1 / 8, help="C / L (default 1/8)")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variant", default=retrieval.DEFAULT_VARIANT,
                        choices=sorted(retrieval.VARIANTS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="write the results here ('-': stdout)")
    args = parser.parse_args(argv)
    import torch

    from . import checkpoint

    torch.set_num_threads(args.threads)
    model = checkpoint.load(args.model) if args.model else checkpoint.load()
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    results = evaluate(model, args.lengths, args.budget, args.samples, args.seed,
                       args.methods, args.variant, log)
    print(f"{'length':>6} {'capacity':>8} " + " ".join(f"{m:>10}" for m in args.methods))
    for length in args.lengths:
        row = [r for r in results if r["length"] == length]
        cap = next(r["capacity"] for r in row if r["method"] != "full") if len(row) > 1 \
            else length
        print(f"{length:>6} {cap:>8} " + " ".join(f"{r['accuracy']:>10.1%}" for r in row))
    if args.json:
        text = json.dumps({"results": results}, indent=1) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            with open(args.json, "w") as f:
                f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
