#!/usr/bin/env python3
"""f32, bf16 and Q8_0 weights (``--weights as-stored``, with f32 and with bf16 activations and
caches, and with int8 activations, ``--activations i8``) of one checkpoint, alternated in one
process: prefill at each of ``--lengths`` and decode steps at the last one's depth, the models
taking turns (prefill in alternating order per length, decode every step), CPU seconds of the
process (``time.process_time``) next to wall seconds. CPU seconds are what to read on a shared
machine (run it with ``OMP_NUM_THREADS=1``: waiting OpenMP threads spin on the CPU).

``--model``: a checkpoint converted from a GGUF file whose projections are Q8_0 (``snapkv
import-gguf FILE.q8_0.gguf``); prompts are the passkey prompts of ``bench_model.py``.
Prints one JSON object. Timings are measurements, never pass/fail.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))


def main(argv=None) -> int:
    import bench_model

    from snapkv import hf
    from snapkv.frontend import quantized

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint converted from a Q8_0 GGUF")
    ap.add_argument("--lengths", default="1000,4000", help="prompt lengths (tokens)")
    ap.add_argument("--steps", type=int, default=12, help="timed decode steps (median)")
    ap.add_argument("--rows", default="f32,bf16,q8_0,q8_0-bf16",
                    help="models, comma-separated, of f32, bf16, q8_0, q8_0-bf16, q8_0-i8, "
                         "q8_0-bf16-i8 (the last two: int8 activations)")
    args = ap.parse_args(argv)
    model_dir = Path(args.model)
    said = []
    if quantized.as_stored(hf.Checkpoint(model_dir), log=said.append) is None:
        raise SystemExit(said[-1])
    bf16 = hf.ExportOptions(dtype="bf16")
    choices = {"f32": lambda: hf.load(model_dir),
               "bf16": lambda: hf.load(model_dir, options=bf16),
               "q8_0": lambda: hf.load(model_dir, weights="as-stored"),
               "q8_0-bf16": lambda: hf.load(model_dir, weights="as-stored", options=bf16),
               "q8_0-i8": lambda: hf.load(model_dir, weights="as-stored", activations="i8"),
               "q8_0-bf16-i8": lambda: hf.load(model_dir, weights="as-stored", options=bf16,
                                               activations="i8")}
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in choices]
    if unknown or not rows:
        ap.error(f"--rows: unknown {', '.join(unknown) or '(none given)'}; the choices: "
                 f"{', '.join(choices)}")
    models = {name: choices[name]() for name in rows}
    order = list(models)
    lengths = [int(x) for x in args.lengths.split(",") if x]
    prefill = {name: {} for name in models}
    state = {}
    for turn, length in enumerate(lengths):
        ids = bench_model._prompt(model_dir, length)
        for name in order if turn % 2 == 0 else order[::-1]:
            cpu, wall = time.process_time(), time.perf_counter()
            logits, caches = models[name].prefill(ids[None])
            prefill[name][length] = (time.process_time() - cpu, time.perf_counter() - wall)
            state[name] = [int(np.argmax(logits[0, -1])),
                           models[name].cache(caches, args.steps + 2)]
    decode = {name: [] for name in models}
    tokens = {name: [state[name][0]] for name in models}  # greedy, from the last prompt
    for step in range(args.steps + 1):  # step 0 warms up
        for name in order if step % 2 else order[::-1]:
            token, caches = state[name]
            cpu, wall = time.process_time(), time.perf_counter()
            logits, caches = models[name].decode(token, len(ids) + step, caches)
            if step:
                decode[name].append((time.process_time() - cpu, time.perf_counter() - wall))
            state[name] = [int(np.argmax(logits[0, -1])), caches]
            tokens[name].append(state[name][0])
    result = {name: dict(prefill_cpu_s={n: v[0] for n, v in prefill[name].items()},
                         prefill_wall_s={n: v[1] for n, v in prefill[name].items()},
                         decode_cpu_ms=float(np.median([c for c, _ in decode[name]]) * 1e3),
                         decode_wall_ms=float(np.median([w for _, w in decode[name]]) * 1e3),
                         depth=len(ids), tokens=tokens[name])
              for name in models}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
