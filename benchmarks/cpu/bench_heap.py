#!/usr/bin/env python3
"""A compiled model's heap cache on and off: prefill and decode times, page faults, memory.

SmolLM2-135M-Instruct (``--model``) with the full cache, compiled by ``snapkv.hf.load`` in each
``--dtypes``. Each row is one fresh process (what glibc does with a freed block depends on
what the process freed before) with ``$SNAPKV_HEAP_CACHE_MB`` at its default (the library
keeps the large blocks it frees, ``python/snapkv/runtime/heap.c``) or ``0`` (every block
goes back to malloc: the behaviour before the cache). A process prefills ``--length``
random token ids (fixed seed: the cost does not depend on what they are) twice, then decodes
``--steps`` tokens at depth ``--length``. The rows alternate (cache on, off; per dtype) in
each of ``--runs`` rounds; per row the median over rounds of: the second prefill's seconds
CPU seconds (user and system: the kernel's page faults and zeroing are system time, and CPU
time is less disturbed than wall time by other processes on a shared machine) and minor page
faults, the median decode step (the first step left out) and its faults, the
bytes the library keeps after prefill, the resident memory after the second prefill and the
peak (``ru_maxrss``, model loading included). Measurements, never pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

PYTHON = Path(__file__).resolve().parents[2] / "python"
sys.path.insert(0, str(PYTHON))


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _usage() -> tuple:
    """Minor faults, user and system CPU seconds of this process (every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt, usage.ru_utime, usage.ru_stime


def _faults() -> int:
    return _usage()[0]


def worker(model_name: str, dtype: str, length: int, steps: int) -> dict:
    import numpy as np

    from snapkv import hf, models

    model = hf.load(models.resolve(model_name), options=hf.ExportOptions(dtype=dtype))
    ids = np.random.default_rng(0).integers(0, 49152, size=(1, length), dtype=np.int64)
    out = dict(limit_mb=model.heap.cache_limit >> 20)
    for run in ("first", "second"):
        before, start = _usage(), time.perf_counter()
        logits, caches = model.prefill(ids)
        out[f"{run}_prefill_s"] = time.perf_counter() - start
        after = _usage()
        out[f"{run}_prefill_faults"] = after[0] - before[0]
        out[f"{run}_prefill_user_s"] = after[1] - before[1]
        out[f"{run}_prefill_sys_s"] = after[2] - before[2]
    out["rss_after_prefill_mb"] = _rss_mb()
    out["kept_mb"] = model.last_prefill["kept_heap_bytes"] / 2 ** 20
    out["heap_peak_mb"] = model.last_prefill["peak_heap_bytes"] / 2 ** 20
    caches = model.cache(caches, steps)
    token, times, before = int(np.argmax(logits[0, -1])), [], _faults()
    for g in range(steps):
        start = time.perf_counter()
        logits, caches = model.decode(token, length + g, caches)
        times.append(time.perf_counter() - start)
        token = int(np.argmax(logits[0, -1]))
    out["decode_ms"] = 1000 * statistics.median(times[1:])
    out["decode_faults"] = (_faults() - before) / steps
    out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


COLUMNS = [("second_prefill_s", "prefill (s)", "{:.2f}"),
           ("second_prefill_user_s", "user CPU (s)", "{:.2f}"),
           ("second_prefill_sys_s", "system CPU (s)", "{:.2f}"),
           ("second_prefill_faults", "prefill minor faults", "{:,.0f}"),
           ("decode_ms", "decode (ms)", "{:.1f}"),
           ("decode_faults", "faults per step", "{:.1f}"),
           ("kept_mb", "kept (MB)", "{:.0f}"),
           ("heap_peak_mb", "heap peak (MB)", "{:.0f}"),
           ("rss_after_prefill_mb", "RSS after prefill (MB)", "{:.0f}"),
           ("maxrss_mb", "peak RSS (MB)", "{:.0f}")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--length", type=int, default=4000)
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--worker", nargs=2, metavar=("DTYPE", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        dtype, path = args.worker
        Path(path).write_text(json.dumps(worker(args.model, dtype, args.length, args.steps)))
        return 0

    rows = [(dtype, cache) for dtype in args.dtypes.split(",") for cache in ("on", "off")]
    results = {row: [] for row in rows}
    out = Path(f"/tmp/bench_heap.{os.getpid()}.json")
    for run in range(args.runs):
        for dtype, cache in rows:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(PYTHON), os.environ.get("PYTHONPATH", "")]))
            if cache == "off":
                env["SNAPKV_HEAP_CACHE_MB"] = "0"
            else:
                env.pop("SNAPKV_HEAP_CACHE_MB", None)
            print(f"round {run + 1}/{args.runs}: {dtype}, heap cache {cache} ...",
                  file=sys.stderr, flush=True)
            subprocess.run([sys.executable, __file__, "--model", args.model, "--length",
                            str(args.length), "--steps", str(args.steps), "--worker", dtype,
                            str(out)], env=env, check=True)
            results[(dtype, cache)].append(json.loads(out.read_text()))
    out.unlink(missing_ok=True)
    print(f"{args.model}, full cache, {args.length:,} tokens, medians of {args.runs} "
          f"alternated rounds; load average {os.getloadavg()[0]:.1f} at the end\n")
    print("| dtype, heap cache | " + " | ".join(title for _, title, _ in COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for (dtype, cache), runs in results.items():
        cells = [fmt.format(statistics.median(r[key] for r in runs)) for key, _, fmt in COLUMNS]
        print(f"| {dtype}, {cache} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
