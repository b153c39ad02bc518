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
prefill seconds and the median decode step (``--decode-steps`` after one warm-up step), wall
and this process's CPU time, of our f32 model and a bf16 model per ``--microkernels`` (the
CPU pipeline's bf16 microkernel: ``auto``, AVX512_BF16's ``vdpbf16ps`` where the CPU has it;
``none``, the fallback that widens each operand to f32) on the prompts of
``--timing-lengths``, repeated ``--repeats`` times, the models alternating, and whether each
generated f32's greedy tokens; and where the time goes: the seconds each compiled function
(``@embed``, ``@prefill_layer`` / ``@decode_layer`` summed over the layers, ``@head``) took in
the timed calls, as the runner calls them one by one. On a loaded machine run it with
``OMP_NUM_THREADS=1`` and read the CPU times.

    python3 benchmarks/cpu/bench_dtype.py                      # accuracy table
    python3 benchmarks/cpu/bench_dtype.py --timing --no-accuracy --timing-lengths 1024,4000
    OMP_NUM_THREADS=1 python3 benchmarks/cpu/bench_dtype.py --timing --no-accuracy \
        --timing-lengths 1024 --repeats 3 --microkernels auto,none

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


def _load(model_dir: Path, dtype: str, microkernel: str):
    """Our compiled model in `dtype`, its bf16 contractions lowered with `microkernel`
    (``avx512bf16``/``none``: ``snapkv-cpu-pipeline{cpu-features=+/-avx512bf16}``;
    ``auto``: the runtime's default, the host's features)."""
    import numpy as np

    from snapkv import hf
    from snapkv.runtime import build

    defaults = build.compile_library.__kwdefaults__
    saved = defaults["pipeline"]
    if microkernel != "auto":
        sign = "+" if microkernel == "avx512bf16" else "-"
        defaults["pipeline"] = saved.replace(
            "snapkv-cpu-pipeline{", f"snapkv-cpu-pipeline{{cpu-features={sign}avx512bf16 ")
    try:
        model = hf.load(model_dir, options=hf.ExportOptions(dtype=dtype))
        # Compiled now (prefill and decode), under this pipeline.
        ids = np.arange(1, 9)[None]
        logits, caches = model.prefill(ids)
        model.decode(int(np.argmax(logits[0, -1])), ids.shape[1], model.cache(caches, 1))
        return model
    finally:
        defaults["pipeline"] = saved


def timing(model_dir: Path, cases, decode_steps: int, repeats: int,
           microkernels=("auto",)) -> str:
    import numpy as np

    variants = {"f32": ("f32", "auto")}
    for kernel in microkernels:
        variants["bf16" if kernel == "auto" else f"bf16 {kernel}"] = ("bf16", kernel)
    models = {label: _load(model_dir, *how) for label, how in variants.items()}
    spent = {label: {} for label in models}
    for label, model in models.items():
        # The compiled functions the runner calls for @prefill and @decode (one dict shared
        # by both entry points), each wrapped to add up its seconds per phase.
        functions = model._prefill._functions
        for name, function in list(functions.items()):
            functions[name] = _timed(function, name, spent[label])
    times = {}
    for _ in range(repeats):
        for case, ids, _ in cases:
            for label, model in models.items():
                start, cpu = time.perf_counter(), time.process_time()
                logits, caches = model.prefill(ids[None])
                prefill = (time.perf_counter() - start, time.process_time() - cpu)
                token = int(np.argmax(logits[0, -1]))
                caches = model.cache(caches, decode_steps + 1)
                steps, tokens = [], [token]
                for g in range(decode_steps + 1):
                    start, cpu = time.perf_counter(), time.process_time()
                    logits, caches = model.decode(token, len(ids) + g, caches)
                    steps.append((time.perf_counter() - start, time.process_time() - cpu))
                    token = int(np.argmax(logits[0, -1]))
                    tokens.append(token)
                entry = times.setdefault((case, label), dict(prefill=[], decode=[],
                                                             cache=0, tokens=len(ids)))
                entry["prefill"].append(prefill)
                entry["decode"] += steps[1:]
                entry["cache"] = int(sum(c.nbytes for c in caches))
                entry["generated"] = tokens
    lines = [f"our compiled {model_dir.name}, full cache, {os.cpu_count()} cores, "
             f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; {repeats} "
             f"alternated repetitions of a prefill and {decode_steps} decode steps; "
             "wall and CPU (this process's) seconds; ratio: time / f32's (> 1: slower)",
             f"{'prompt':<20} {'L':>5} {'model':<10} {'':<6} {'prefill':>8} {'CPU':>7} "
             f"{'ratio':>6}  {'decode':>8} {'CPU':>8} {'ratio':>6}  {'cache B':>12}  "
             "tokens as f32's"]
    for case, _, _ in cases:
        base = times[(case, "f32")]
        for label in models:
            entry = times[(case, label)]
            for how, pick in (("median", statistics.median), ("min", min)):
                pw = pick(p[0] for p in entry["prefill"])
                pc = pick(p[1] for p in entry["prefill"])
                dw = pick(d[0] for d in entry["decode"]) * 1e3
                dc = pick(d[1] for d in entry["decode"]) * 1e3
                bpc = pick(p[1] for p in base["prefill"])
                bdc = pick(d[1] for d in base["decode"]) * 1e3
                lines.append(f"{case:<20} {entry['tokens']:>5} {label:<10} {how:<6} "
                             f"{pw:>7.2f}s {pc:>6.2f}s {pc / bpc:>5.2f}x  {dw:>6.1f}ms "
                             f"{dc:>6.1f}ms {dc / bdc:>5.2f}x  {entry['cache']:>12,}  "
                             f"{entry['generated'] == base['generated']}")
    lines.append("ratio: CPU time / f32's CPU time; min: the fastest call, the least "
                 "disturbed by other load")
    names = sorted({n for d in spent.values() for n in d})
    lines += ["", "seconds in each compiled function, all timed calls together (prefill and "
                  "decode steps; warm-up steps included)",
              f"{'function':<16} " + " ".join(f"{label + ' s':>12}" for label in models)]
    for name in names:
        lines.append(f"{name:<16} " + " ".join(f"{spent[label].get(name, 0.0):>12.2f}"
                                              for label in models))
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
    ap.add_argument("--microkernels", default="auto",
                    help="bf16 models timed, one per microkernel of snapkv-cpu-pipeline "
                         "(auto: AVX512_BF16's vdpbf16ps where the CPU has it; none: the "
                         "fallback that widens to f32), comma-separated")
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
        kernels = [k for k in args.microkernels.split(",") if k]
        if not kernels or not set(kernels) <= {"auto", "avx512bf16", "none"}:
            ap.error("--microkernels: a comma-separated list of auto, avx512bf16, none")
        print(timing(model_dir, cases, args.decode_steps, args.repeats, kernels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
