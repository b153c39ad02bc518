#!/usr/bin/env python3
"""``--dtype bf16`` on a real model: greedy tokens against HF transformers in bf16, and the
time of a prefill and a decode step against f32.

Accuracy (one table per run): for each passkey prompt (``examples/passkey-4000.txt``,
``examples/passkey-2000.txt`` and the deterministic passkey prompts of ``snapkv.tasks.text`` at
``--lengths``), ``--steps`` greedy tokens of

* HF transformers (SDPA attention, ``from_pretrained(..., dtype=torch.bfloat16)``: the
  checkpoint's tensors rounded to bf16 as our binding rounds them) and of HF in float32;
* our compiled model exported with ``--dtype bf16`` and with f32 (``snapkv.hf.load``, full
  cache),

and per prompt: how many of the tokens ours (bf16) shares with HF (bf16) before the first
difference, the same for f32 against f32, and whether each run's text holds the pass key.

Timing (``--timing``; contended machines: read the ratios, measured in one run, alternated):
prefill seconds and the median decode step (``--decode-steps`` after one warm-up step) of our
f32 and bf16 models on the prompts of ``--timing-lengths``, repeated ``--repeats`` times, f32
and bf16 alternating; and where the time goes: the seconds each compiled function (``@embed``,
``@prefill_layer`` / ``@decode_layer`` summed over the layers, ``@head``) took in the timed
calls, as the runner calls them one by one.

    python3 benchmarks/cpu/bench_dtype.py                      # accuracy table
    python3 benchmarks/cpu/bench_dtype.py --timing --no-accuracy --timing-lengths 1024,4000

Needs torch and transformers (HF's side) and the SmolLM2 checkpoint (``make deps``). Prints
tables; never pass/fail.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

FILES = ("passkey-4000.txt", "passkey-2000.txt")


def prompts(model_dir: Path, lengths) -> list:
    """(label, ids, answer or None) of each prompt."""
    from snapkv import tokenizer as tok
    from snapkv.tasks import text

    out = []
    for name in FILES:
        body = (ROOT / "examples" / name).read_text()
        # The pass key is the digits the filler never has: the needle sentence says it.
        answer = next((w.strip(".") for w in body.split() if w.strip(".").isdigit()), None)
        out.append((f"examples/{name}", tok.encode(model_dir, body), answer))
    loaded = tok.load(model_dir)
    for length in lengths:
        sample = text.generate("passkey", length, 0, 0, loaded)
        out.append((f"passkey L={length} (tasks.text, seed 0)", sample.ids, sample.answer))
    return out


def hf_greedy(model, ids, steps: int) -> list:
    import torch

    with torch.no_grad():
        out = model.generate(torch.as_tensor(ids[None]), max_new_tokens=steps + 1,
                             min_new_tokens=steps + 1, do_sample=False)
    return [int(t) for t in out[0, len(ids):]]


def common_prefix(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def accuracy(model_dir: Path, cases, steps: int) -> str:
    import torch
    from transformers import AutoModelForCausalLM

    from snapkv import hf
    from snapkv import tokenizer as tok

    runs = {}
    for dtype, torch_dtype in (("bf16", torch.bfloat16), ("f32", torch.float32)):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype,
                                                     attn_implementation="sdpa").eval()
        runs[f"hf-{dtype}"] = [hf_greedy(model, ids, steps) for _, ids, _ in cases]
        del model
        ours = hf.load(model_dir, options=hf.ExportOptions(dtype=dtype))
        runs[f"ours-{dtype}"] = [ours.generate(ids[None], steps)["tokens"]
                                 for _, ids, _ in cases]
        del ours
    lines = [f"greedy tokens ({steps + 1} per run) of {model_dir.name}: ours vs HF "
             f"transformers (SDPA) in the same dtype",
             f"{'prompt':<38} {'L':>5}  {'bf16 same':>9}  {'f32 same':>8}  "
             f"{'ours bf16 vs ours f32':>21}  pass key in: hf-bf16 ours-bf16 hf-f32 ours-f32"]
    def found(run, i, answer):
        if answer is None:
            return "-"
        return "yes" if answer in tok.decode(model_dir, runs[run][i]) else "no"

    for i, (label, ids, answer) in enumerate(cases):
        lines.append(
            f"{label:<38} {len(ids):>5}  "
            f"{common_prefix(runs['ours-bf16'][i], runs['hf-bf16'][i]):>5}/{steps + 1:<3}  "
            f"{common_prefix(runs['ours-f32'][i], runs['hf-f32'][i]):>4}/{steps + 1:<3}  "
            f"{common_prefix(runs['ours-bf16'][i], runs['ours-f32'][i]):>17}/{steps + 1:<3}  "
            f"{found('hf-bf16', i, answer):>20} {found('ours-bf16', i, answer):>9} "
            f"{found('hf-f32', i, answer):>6} {found('ours-f32', i, answer):>8}")
        for run in ("hf-bf16", "ours-bf16"):
            lines.append(f"    {run:<9} {tok.decode(model_dir, runs[run][i])!r}")
    lines.append("same: tokens in common before the first difference")
    return "\n".join(lines)


def timing(model_dir: Path, cases, decode_steps: int, repeats: int) -> str:
    import numpy as np

    from snapkv import hf

    models = {dtype: hf.load(model_dir, options=hf.ExportOptions(dtype=dtype))
              for dtype in ("f32", "bf16")}
    spent = {dtype: {} for dtype in models}
    for dtype, model in models.items():
        # The compiled functions the runner calls for @prefill and @decode (one dict shared
        # by both entry points), each wrapped to add up its seconds per phase.
        functions = model._prefill._functions
        for name, function in list(functions.items()):
            functions[name] = _timed(function, name, spent[dtype])
    times = {}
    for _ in range(repeats):
        for label, ids, _ in cases:
            for dtype, model in models.items():
                start = time.perf_counter()
                logits, caches = model.prefill(ids[None])
                prefill = time.perf_counter() - start
                token = int(np.argmax(logits[0, -1]))
                caches = model.cache(caches, decode_steps + 1)
                steps = []
                for g in range(decode_steps + 1):
                    start = time.perf_counter()
                    logits, caches = model.decode(token, len(ids) + g, caches)
                    steps.append(time.perf_counter() - start)
                    token = int(np.argmax(logits[0, -1]))
                entry = times.setdefault((label, dtype), dict(prefill=[], decode=[],
                                                              cache=0, tokens=len(ids)))
                entry["prefill"].append(prefill)
                entry["decode"] += steps[1:]
                entry["cache"] = int(sum(c.nbytes for c in caches))
    lines = [f"our compiled {model_dir.name}, full cache, {os.cpu_count()} cores, "
             f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; {repeats} "
             f"alternated repetitions of a prefill and {decode_steps} decode steps",
             f"{'prompt':<24} {'L':>5} {'':<6} {'prefill f32':>11} {'bf16':>7} {'ratio':>6}  "
             f"{'decode f32':>10} {'bf16':>7} {'ratio':>6}  {'cache f32 B':>12} {'bf16 B':>11}"]
    for label, _, _ in cases:
        a, b = times[(label, "f32")], times[(label, "bf16")]
        for how, pick in (("median", statistics.median), ("min", min)):
            pa, pb = pick(a["prefill"]), pick(b["prefill"])
            da, db = pick(a["decode"]) * 1e3, pick(b["decode"]) * 1e3
            lines.append(f"{label:<24} {a['tokens']:>5} {how:<6} {pa:>10.2f}s {pb:>6.2f}s "
                         f"{pb / pa:>5.2f}x  {da:>8.1f}ms {db:>5.1f}ms {db / da:>5.2f}x  "
                         f"{a['cache']:>12,} {b['cache']:>11,}")
    lines.append("ratio: bf16 time / f32 time (> 1: bf16 slower); min: the fastest call, the "
                 "least disturbed by other load")
    names = sorted({n for d in spent.values() for n in d})
    lines += ["", "seconds in each compiled function, all timed calls together (prefill and "
                  "decode steps; warm-up steps included)",
              f"{'function':<16} {'f32 s':>9} {'bf16 s':>9} {'ratio':>6}"]
    for name in names:
        a, b = spent["f32"].get(name, 0.0), spent["bf16"].get(name, 0.0)
        lines.append(f"{name:<16} {a:>9.2f} {b:>9.2f} {b / a if a else float('nan'):>5.2f}x")
    return "\n".join(lines)


def _timed(function, name, spent):
    def call(*arrays):
        start = time.perf_counter()
        try:
            return function(*arrays)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start
    return call


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="a known model name (snapkv models) or a checkpoint directory")
    ap.add_argument("--lengths", default="512,1024", help="tasks.text passkey prompt lengths")
    ap.add_argument("--steps", type=int, default=16, help="greedy decode steps (accuracy)")
    ap.add_argument("--no-accuracy", action="store_true")
    ap.add_argument("--timing", action="store_true")
    ap.add_argument("--timing-lengths", default="1024,4000",
                    help="tasks.text passkey prompt lengths timed")
    ap.add_argument("--decode-steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    from snapkv import models

    try:
        model_dir = models.resolve(args.model, log=lambda m: print(m, file=sys.stderr))
        lengths = [int(x) for x in args.lengths.split(",") if x]
        timed = [int(x) for x in args.timing_lengths.split(",") if x]
    except (ValueError, OSError) as error:
        ap.error(str(error))
    if not args.no_accuracy:
        print(accuracy(model_dir, prompts(model_dir, lengths), args.steps), flush=True)
    if args.timing:
        from snapkv import tokenizer as tok
        from snapkv.tasks import text

        loaded = tok.load(model_dir)
        cases = [(f"passkey L={n}", text.generate("passkey", n, 0, 0, loaded).ids, None)
                 for n in timed]
        print(timing(model_dir, cases, args.decode_steps, args.repeats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
