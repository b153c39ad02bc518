#!/usr/bin/env python3
"""Time to the first token, as a user meets it: ``snapkv generate`` against HF transformers.

Runs the user's command, ``snapkv generate MODEL --prompt-file FILE --gqa mean --capacity C
--steps 1 --json``, ``--runs`` times (the first run compiles both modules unless they are
cached; every run's prefill is timed after its compile), and reads the prefill seconds of the
full and the compacted model from its JSON. Then, in this process, the same text through HF
transformers' ``generate(max_new_tokens=1)`` with eager and with SDPA attention (median of
``--runs``), tokenised as ``snapkv generate`` tokenises it. Prints one table with the ratios
against HF eager and checks that every row's first token is the same.

    python3 benchmarks/cpu/first_token.py                       # examples/passkey-4000.txt
    python3 benchmarks/cpu/first_token.py --prompt-file examples/passkey-8000.txt --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))


def ours(model: str, prompt: Path, capacity: int, runs: int) -> list[dict]:
    command = [sys.executable, "-c", "import sys; from snapkv.cli import main; sys.exit(main())",
               "generate", model, "--prompt-file", str(prompt),
               "--gqa", "mean", "--capacity", str(capacity), "--steps", "1", "--json", "-q"]
    results = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"snapkv generate failed ({done.returncode}):\n{done.stderr}")
        result = json.loads(done.stdout)
        result["wall_s"] = wall
        results.append(result)
    return results


def hf(model_dir: Path, text: str, attention: str, runs: int) -> tuple[float, int, int]:
    """Median seconds of HF's generate(max_new_tokens=1), its first token, the prompt length."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ids = torch.as_tensor([AutoTokenizer.from_pretrained(model_dir)(text).input_ids])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation=attention).eval()
    times, token = [], None
    for _ in range(runs):
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=1, do_sample=False)
        times.append(time.perf_counter() - start)
        token = int(out[0, -1])
    return statistics.median(times), token, ids.shape[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="a known model name (snapkv models) or a checkpoint directory")
    ap.add_argument("--prompt-file", type=Path, default=ROOT / "examples" / "passkey-4000.txt")
    ap.add_argument("--capacity", type=int, default=0,
                    help="SnapKV budget (default: an eighth of the prompt)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if not args.prompt_file.is_file():
        ap.error(f"--prompt-file: no file at {args.prompt_file}")

    import torch

    from snapkv import models

    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    try:
        model_dir = models.resolve(args.model)
    except models.ModelError as error:
        ap.error(f"--model: {error}")
    if not model_dir.is_dir():
        ap.error(f"--model: no checkpoint directory or known model called {args.model}")
    text = args.prompt_file.read_text()
    rows = {}
    for attention in ("eager", "sdpa"):
        seconds, token, length = hf(model_dir, text, attention, args.runs)
        rows[f"HF {attention}"] = dict(seconds=seconds, token=token)
    capacity = args.capacity or max(length // 8, 33)
    runs = ours(args.model, args.prompt_file, capacity, args.runs)
    if runs[0]["prompt"]["length"] != length:
        raise SystemExit(f"snapkv generate read {runs[0]['prompt']['length']} tokens, HF "
                         f"{length}: the two tokenisations differ")
    for key, label in (("full", "ours, full cache"),
                       ("compacted", f"ours, SnapKV C = {capacity} (gqa mean)")):
        rows[label] = dict(seconds=statistics.median(r["seconds"][f"prefill_{key}"]
                                                     for r in runs),
                           token=runs[0]["tokens"][key][0])
    base = rows["HF eager"]["seconds"]
    tokens = {row["token"] for row in rows.values()}
    print(f"Time to the first token, {args.model}, {args.prompt_file.name} ({length} tokens), "
          f"{args.threads} threads, median of {args.runs}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| row | first token (s) | vs HF eager |\n|---|---:|---:|")
    for label, row in rows.items():
        print(f"| {label} | {row['seconds']:.2f} | {base / row['seconds']:.2f}x |")
    compile_s = runs[0]["seconds"]
    cached = compile_s["compiled_from_cache"]
    walls = ", ".join(f"{r['wall_s']:.1f}" for r in runs)
    print(f"\n`snapkv generate` wall time per run (s): {walls}; first run's compile: full "
          f"{compile_s['compile_full']:.1f} s, compacted {compile_s['compile_compacted']:.1f} s "
          f"(from cache: full {cached['full']}, compacted {cached['compacted']})")
    print("first token: " + ("the same in every row" if len(tokens) == 1
                             else f"DIFFERS: {dict((k, r['token']) for k, r in rows.items())}"))
    if args.json:
        args.json.write_text(json.dumps(dict(rows=rows, length=length, capacity=capacity,
                                             runs=runs), indent=1))
    return 0 if len(tokens) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
