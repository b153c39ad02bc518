"""Why does two-level chunked prefill lose answers that one-shot SnapKV keeps? An attribution.

PyTorch prototype on the real model (HF's eager forward in float32, the numpy reference's
scores in float64), the prompts of ``snapkv eval --task T`` (same seed, indices, token ids).
Per prompt, one full prefill gives the full cache's logits and one-shot SnapKV's final rows
(window 32, ``gqa mean``, kernel 15, C = L x budget); every method then feeds the prompt in
chunks of ``--chunk`` tokens (the first chunk's prefill shared), staging every chunk but the
last to M = ``--factor`` x C rows, and selects C rows after the last chunk. A method is a
``+``-joined list:

* the staging score first: ``sum`` (accumulated attention of all the chunk's queries),
  ``keydiff`` (key distinctness), ``recent`` (the first 4 and the most recent rows) or
  ``nodrop`` (M unbounded: the sanity check, which must give the full cache's prefill
  logits and one-shot's tokens);
* ``oracle``: every staging keeps the rows one-shot SnapKV finally keeps (the score fills
  the rest of M); ``forced``: the final selection keeps exactly one-shot's rows (so the final
  cache holds one-shot's positions, and differs only in the K/V and hidden states computed
  over the staged caches);
* ``sinksN``: the first N positions are always staged; ``tailN``: the previous chunk's last
  N positions are always staged;
* ``layersA-B``: only layers A..B drop rows when staging (the others stage every row);
  ``stepJ``: only the J-th staging (0 = after the first chunk) drops rows; ``blockN``: the
  score summed over blocks of N rows (from row 0), so that whole blocks are staged.

It prints, per prompt and method, the answer, whether it is right, the mean share of the asked
needle's positions the final caches hold (``held``), the share of one-shot's final rows they
hold (``oneshot_rows``), the share of the prompt's first 32 positions (the task's
instruction) they hold (``first_rows``) and the largest difference of the prefill's last
logits row from the full cache's (``logit_diff``). Accuracy only: timings are not recorded. ::

    nice -n 10 python3 benchmarks/eval/chunk_attribution.py --length 4000 --chunk 1000 \\
        --samples 6 --methods nodrop,keydiff,keydiff+oracle,keydiff+oracle+forced \\
        --json /tmp/attribution.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from staging_scores import arguments, load, summary  # noqa: E402

from snapkv import reference  # noqa: E402

WINDOW, KERNEL, GQA, SINKS = 32, 15, "mean", 4
HEAD = 32  # first_rows: the share of the prompt's first HEAD positions (its instruction) held
SCORES = ("sum", "keydiff", "recent", "nodrop")


def parse(method):
    """A method name as a dict of its parts (see the module's docstring)."""
    score, *flags = method.split("+")
    if score not in SCORES:
        raise SystemExit(f"chunk_attribution.py: unknown staging score {score!r} in {method!r}")
    spec = dict(score=score, oracle=False, forced=False, sinks=0, tail=0, layers=None,
                step=None, block=1)
    for flag in flags:
        if flag in ("oracle", "forced"):
            spec[flag] = True
        elif m := re.fullmatch(r"sinks(\d+)", flag):
            spec["sinks"] = int(m[1])
        elif m := re.fullmatch(r"tail(\d+)", flag):
            spec["tail"] = int(m[1])
        elif m := re.fullmatch(r"layers(\d+)-(\d+)", flag):
            spec["layers"] = (int(m[1]), int(m[2]))
        elif m := re.fullmatch(r"step(\d+)", flag):
            spec["step"] = int(m[1])
        elif m := re.fullmatch(r"block(\d+)", flag):
            spec["block"] = int(m[1])
        else:
            raise SystemExit(f"chunk_attribution.py: unknown flag {flag!r} in {method!r}")
    if spec["forced"] and not spec["oracle"]:
        raise SystemExit(f"chunk_attribution.py: {method!r}: forced needs oracle (the staging "
                         "must keep one-shot's rows for the final cache to hold them)")
    return spec


def staged_rows(pooled, must, length, capacity):
    """Rows of one head's concatenation (``length`` rows) to stage: the last WINDOW, every
    prefix row in ``must`` and the best of the rest by ``pooled`` up to ``capacity``, in
    row order (with ``must`` empty: exactly the reference select's indices)."""
    prefix = length - WINDOW
    must = np.flatnonzero(must[:prefix])
    taken = np.zeros(prefix, dtype=bool)
    taken[must] = True
    rest = [j for j in reference.rank(pooled) if not taken[j]][:capacity - WINDOW - must.size]
    return np.concatenate([np.sort(np.concatenate([must, rest]).astype(np.int64)),
                           np.arange(prefix, length)])


def stage(spec, step, layer, q, k, v, positions, start, oneshot, capacity):
    """One layer's staged rows per kv head, ``[Hkv, M']`` rows of its concatenation."""
    heads, length = positions.shape
    drops = length > capacity and (spec["layers"] is None or
                                   spec["layers"][0] <= layer <= spec["layers"][1]) and \
        (spec["step"] is None or spec["step"] == step)
    if not drops:
        return np.broadcast_to(np.arange(length), (heads, length))
    every = spec["score"] == "sum"
    sel = reference.select(q[:, :, 0 if every else q.shape[2] - WINDOW:].numpy(), k.numpy(),
                           v.numpy(), WINDOW, capacity, KERNEL, "avg", GQA,
                           scoring=spec["score"], sinks=SINKS)
    # Whole blocks of positions from 0 (the last kept one may be cut: M - W need not be a
    # multiple of the block here, unlike the op's `block`).
    pooled = reference.block_sums(sel.pooled, spec["block"])
    rows = []
    for h in range(heads):
        must = positions[h] < spec["sinks"]
        if spec["tail"]:
            must |= (positions[h] >= start - spec["tail"]) & (positions[h] < start)
        if spec["oracle"]:
            must |= np.isin(positions[h], oneshot[layer][h])
        rows.append(staged_rows(pooled[0, h], must, length, capacity))
    return np.stack(rows)


def gather(x, rows):
    import torch

    index = torch.from_numpy(np.ascontiguousarray(rows))[None, :, :, None]
    return torch.take_along_dim(x, index.expand(-1, -1, -1, x.shape[-1]), dim=2)


def chunked(model, ids, spec, bounds, capacity, staging, oneshot, memo):
    """Two-level chunked prefill with the method's staging, then the final selection.
    ``memo`` maps the staged rows so far to the state after the next chunk (a method that
    staged the same rows reuses it; it starts with the first chunk's prefill under ()).
    Returns ``(prefill's last logits row, caches, final positions per layer [Hkv, C])``."""
    from snapkv.frontend import reference_decode as rd

    logits, keys, values, queries = memo[()]
    heads = keys[0].shape[1]
    positions = [np.broadcast_to(np.arange(bounds[0][1]), (heads, bounds[0][1]))] * len(keys)
    limit = 1 << 62 if spec["score"] == "nodrop" else staging
    path = ()
    for step, (start, stop) in enumerate(bounds[1:]):
        rows = [stage(spec, step, layer, q, k, v, p, start, oneshot, limit)
                for layer, (q, k, v, p) in enumerate(zip(queries, keys, values, positions))]
        path += (b"".join(np.ascontiguousarray(r).tobytes() for r in rows),)
        positions = [np.concatenate([np.take_along_axis(p, r, axis=1),
                                     np.broadcast_to(np.arange(start, stop),
                                                     (heads, stop - start))], axis=1)
                     for p, r in zip(positions, rows)]
        if path not in memo:
            memo[path] = rd.extend(model, ids[:, start:stop], start,
                                   [gather(k, r) for k, r in zip(keys, rows)],
                                   [gather(v, r) for v, r in zip(values, rows)])
        logits, keys, values, queries = memo[path]
    final, held = [], []
    for layer, (q, k, v, p) in enumerate(zip(queries, keys, values, positions)):
        if spec["forced"]:
            rows = np.stack([np.flatnonzero(np.isin(p[h], oneshot[layer][h]))
                             for h in range(heads)])
            assert rows.shape[1] == min(capacity, bounds[-1][1]), rows.shape
        else:
            rows = reference.select(q[:, :, q.shape[2] - WINDOW:].numpy(), k.numpy(),
                                    v.numpy(), WINDOW, capacity, KERNEL, "avg",
                                    GQA).indices[0]
        final.append((gather(k, rows), gather(v, rows)))
        held.append(np.take_along_axis(p, rows, axis=1))
    return logits[0, -1], final, held


def main(argv=None) -> int:
    p = arguments(__doc__, "nodrop,keydiff,keydiff+oracle,keydiff+oracle+forced")
    p.add_argument("--factor", type=int, default=4, help="M = factor * C")
    p.add_argument("--no-baselines", action="store_true",
                   help="skip the full prefill (no full/oneshot rows, oracle or logit_diff)")
    args = p.parse_args(argv)
    methods = args.methods.split(",")
    specs = {m: parse(m) for m in methods}
    if args.no_baselines and any(s["oracle"] for s in specs.values()):
        raise SystemExit("chunk_attribution.py: oracle needs one-shot's rows: drop "
                         "--no-baselines")

    import torch

    from snapkv.frontend import reference_decode as rd

    model, task = load(args)
    capacity = int(args.length * args.budget)
    staging = args.factor * capacity
    rows = []

    def record(index, sample, method, tokens, held, logit_diff, oneshot):
        # held / oneshot: per layer [Hkv, S] prompt positions; means over layers and heads.
        share = None if held is None else float(np.mean(
            [np.isin(sample.positions, row).mean() for layer in held for row in layer]))
        same = None if held is None or oneshot is None else float(np.mean(
            [np.isin(o, h).mean() for hs, os in zip(held, oneshot) for h, o in zip(hs, os)]))
        start = None if held is None else float(np.mean(
            [np.isin(np.arange(HEAD), row).mean() for layer in held for row in layer]))
        rows.append(dict(index=index, method=method, answer=sample.answer,
                         said=sample.said(tokens), correct=bool(sample.judge(tokens)),
                         held=share, oneshot_rows=same, first_rows=start,
                         logit_diff=logit_diff))
        print(json.dumps(rows[-1]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(dict(
                task=args.task, length=args.length, capacity=capacity, chunk=args.chunk,
                staging=staging, window=WINDOW, kernel=KERNEL, gqa=GQA, rows=rows), indent=1))

    with torch.no_grad():
        for index in range(args.first, args.first + args.samples):
            sample = task.sample(args.length, args.seed, index)
            ids = torch.from_numpy(sample.ids)[None]
            length = ids.shape[1]
            bounds = reference.chunk_bounds(length, args.chunk, WINDOW)
            full_row = oneshot = None
            if not args.no_baselines:
                logits, keys, values, queries = rd.prefill(model, ids)
                full_row = logits[0, -1]
                tokens, _, _ = rd.greedy_decode(model, full_row, length, [k.clone() for k in keys],
                                                [v.clone() for v in values], sample.steps,
                                                expanded=False)
                record(index, sample, "full", tokens, None, None, None)
                sels = [reference.select(q[:, :, length - WINDOW:].numpy(), k.numpy(), v.numpy(),
                                         WINDOW, capacity, KERNEL, "avg", GQA)
                        for q, k, v in zip(queries, keys, values)]
                oneshot = [s.indices[0] for s in sels]
                tokens, _, _ = rd.greedy_decode(
                    model, full_row, length, [torch.from_numpy(s.keys.copy()) for s in sels],
                    [torch.from_numpy(s.values.copy()) for s in sels], sample.steps,
                    expanded=False)
                record(index, sample, "oneshot", tokens, oneshot, 0.0, oneshot)
                del logits, keys, values, queries
            memo = {(): rd.prefill(model, ids[:, :bounds[0][1]])}
            for method in methods:
                row, caches, held = chunked(model, ids, specs[method], bounds, capacity,
                                            staging, oneshot, memo)
                tokens, _, _ = rd.greedy_decode(model, row, length, [k for k, _ in caches],
                                                [v for _, v in caches], sample.steps,
                                                expanded=False)
                diff = None if full_row is None else float((row - full_row).abs().max())
                record(index, sample, method, tokens, held, diff, oneshot)
    summary(f"{args.task}, L = {args.length}, C = {capacity}, M = {staging}, chunk {args.chunk}, "
            f"prompts {args.first}..{args.first + args.samples - 1}",
            ([] if args.no_baselines else ["full", "oneshot"]) + methods, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
