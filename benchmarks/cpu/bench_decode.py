#!/usr/bin/env python3
"""CPU benchmark of one decode step of the tiny model vs the physical length of its KV cache.

Rows (all compiled ahead of time by ``snapkv.runtime``: ``snapkv-opt
--snapkv-cpu-pipeline`` -> ``snapkv-translate`` -> ``clang -O2 -march=native``, called with ctypes):

* **full**: the unmodified ``test/Models/tiny_llama_dynamic.mlir``, caches of Hkv = 2 heads and
  physical length T = 8192;
* **expand** / **mean**: the module rewritten by ``snapkv-opt
  --snapkv-compress-kv-cache="window=32 capacity=1024 gqa=<mode>"``, caches of physical length
  1024 with the head count its ``@decode`` signature says (Hq = 4 for expand, Hkv = 2 for mean).
  If snapkv-opt does not know the pass (or the rewrite fails), the row is skipped with a message;
* **control**: the unmodified module again at T = 1024 (what the short cache costs without the
  rewrite); ``--no-control`` drops it.

Every row decodes one token at logical position 8192 from random caches (fixed numpy seed):
the point is decode-step time against physical cache length, not a real prefill. Two times per
row, medians of ``--runs`` (default 20) after ``--warmup`` (default 3):

* **call**: the ``_mlir_ciface_decode`` call alone (its returned buffers are freed, not copied);
* **runner**: ``CompiledModel.decode`` as ``generate()`` drives it (caches from
  ``CompiledModel.cache``: written in place, see docs/model-ir.md).

Ratios are full-row time / row time, from the same run. Prints a markdown table and machine
info; timings are measurements, never pass/fail.
"""

import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from snapkv import runtime, tools  # noqa: E402
from snapkv.tools import ToolError  # noqa: E402

FIXTURE = REPO / "test" / "Models" / "tiny_llama_dynamic.mlir"
PASS = "snapkv-compress-kv-cache"


def cpu_model():
    try:
        match = re.search(r"^model name\s*:\s*(.*)$", Path("/proc/cpuinfo").read_text(), re.M)
        if match:
            return match.group(1).strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def rewrite(opt, text_path, window, capacity, gqa):
    """Text of the rewritten module, or (None, reason)."""
    option = f"--{PASS}=window={window} capacity={capacity} gqa={gqa}"
    try:
        done = subprocess.run([str(opt), option, str(text_path)], capture_output=True,
                              text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"{opt} could not run: {error}"
    if done.returncode != 0:
        err = done.stderr.strip()
        if re.search(r"Unknown command line argument|no such pass|unknown pass", err, re.I):
            return None, (f"{opt.name} does not know --{PASS} (not built yet?); "
                          f"skipping the gqa={gqa} row")
        return None, f"--{PASS} gqa={gqa} failed (exit {done.returncode}):\n{err[-2000:]}"
    if done.stderr.strip():  # warning remarks: the rewrite may have left functions unchanged
        print(f"note: --{PASS} gqa={gqa} said:\n{done.stderr.strip()[-2000:]}", file=sys.stderr)
    return done.stdout, None


def caches_for(model, length, rng):
    arrays = []
    for i, ttype in enumerate(model.cache_types):
        _, heads, _, dim = ttype.shape
        if heads is None or dim is None:
            raise ValueError(f"decode cache argument {i} has a dynamic head count or head dim: "
                             f"{ttype}")
        arrays.append(rng.standard_normal((1, heads, length, dim)).astype(np.float32))
    return arrays


def measure(model, caches, position, token, runs, warmup):
    call = model.time_decode(token, position, caches, repeat=warmup + runs)[warmup:]
    # The runner as generate() drives it: caches with room for the steps (written in place
    # when the module allows it, else copied out of each call).
    caches = model.cache(caches, warmup + runs)
    for _ in range(warmup):
        _, caches = model.decode(token, position, caches)
    full = []
    for _ in range(runs):
        start = time.perf_counter()
        _, caches = model.decode(token, position, caches)
        full.append(time.perf_counter() - start)
    return statistics.median(call), statistics.median(full)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full-length", type=int, default=8192, help="physical T of the full row")
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--capacity", type=int, default=1024,
                    help="rewrite capacity = physical T of the compacted rows")
    ap.add_argument("--position", type=int, default=None,
                    help="logical position fed to every row (default: --full-length)")
    ap.add_argument("--gqa", default="expand,mean", help="comma-separated rewrite modes")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--token", type=int, default=1)
    ap.add_argument("--no-control", action="store_true",
                    help="skip the unmodified module at T = capacity")
    ap.add_argument("--snapkv-opt", type=Path, default=None)
    ap.add_argument("--cache-dir", type=Path, default=None, help="compiled-library cache")
    ap.add_argument("-q", "--quiet", action="store_true", help="no compile progress")
    args = ap.parse_args()
    if args.snapkv_opt:
        os.environ["SNAPKV_OPT"] = str(args.snapkv_opt)
    opt = tools.snapkv_opt()
    position = args.full_length if args.position is None else args.position
    verbose = not args.quiet
    text = FIXTURE.read_text()

    def compiled(label, module_text):
        if verbose:
            print(f"[{label}]", file=sys.stderr)
        return runtime.CompiledModel(module_text, cache_dir=args.cache_dir, verbose=verbose)

    try:
        original = compiled("full", text)
    except ToolError as error:
        sys.exit(f"cannot compile {FIXTURE}: {error}")
    rows = [("full (original module)", original, args.full_length)]
    if not args.no_control:
        rows.append(("control: original module, short cache", original, args.capacity))
    skipped = []
    for gqa in [g for g in args.gqa.split(",") if g]:
        rewritten, reason = rewrite(opt, FIXTURE, args.window, args.capacity, gqa)
        if rewritten is None:
            print(reason, file=sys.stderr)
            skipped.append(f"gqa={gqa}: {reason.splitlines()[0]}")
            continue
        try:
            rows.append((f"compacted gqa={gqa}", compiled(f"gqa={gqa}", rewritten),
                         args.capacity))
        except (ToolError, ValueError) as error:
            print(f"gqa={gqa}: cannot compile the rewritten module: {error}", file=sys.stderr)
            skipped.append(f"gqa={gqa}: rewritten module did not compile")

    results = []
    for label, model, length in rows:
        caches = caches_for(model, length, np.random.default_rng(args.seed))
        if verbose:
            print(f"timing {label}: caches {[c.shape for c in caches][:1]} x {len(caches)}, "
                  f"position {position}", file=sys.stderr)
        call, full = measure(model, caches, position, args.token, args.runs, args.warmup)
        heads = caches[0].shape[1]
        results.append((label, heads, length, sum(c.nbytes for c in caches), call, full))

    base_call, base_full, base_bytes = results[0][4], results[0][5], results[0][3]
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    print("### Decode step vs physical cache length (tiny Llama, CPU)\n")
    print(f"Decode-step time against PHYSICAL cache length: every row decodes one token at "
          f"logical position {position} from random caches (numpy seed {args.seed}), not from a "
          f"prefill. Median of {args.runs} runs after {args.warmup} warm-up. *call*: the "
          f"compiled `_mlir_ciface_decode` alone; *runner*: `CompiledModel.decode` on caches "
          f"it writes in place. Ratios: full-row time / row time (same run). K/V is "
          f"the persistent cache passed in (2 layers x K and V, f32).\n")
    print("| row | cache heads | physical T | K/V MiB (vs full) | call ms | call speed-up "
          "| runner ms | runner speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, heads, length, nbytes, call, full in results:
        print(f"| {label} | {heads} | {length} | {nbytes / 2**20:.2f} ({nbytes / base_bytes:.3f}) "
              f"| {call * 1e3:.3f} | {base_call / call:.2f}x | {full * 1e3:.3f} "
              f"| {base_full / full:.2f}x |")
    if skipped:
        print("\nSkipped rows:\n" + "\n".join(f"* {note}" for note in skipped))
    print(f"\nMachine: {cpu_model()}, {os.cpu_count()} logical CPUs, {platform.system()} "
          f"{platform.release()}; Python {platform.python_version()}, numpy {np.__version__}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (at the end); "
          f"date {date}.")
    print(f"Compiled with `{opt} --snapkv-cpu-pipeline`, `{tools.mlir_translate()}`, "
          f"`{tools.clang()} {' '.join(runtime.DEFAULT_CFLAGS)}`; rewrite options "
          f"window={args.window} capacity={args.capacity}.")
    names = ("GLIBC_TUNABLES", "MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_",
             "MALLOC_TRIM_THRESHOLD_")
    env = {k: os.environ[k] for k in names if k in os.environ}
    if env:
        print("Environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))


if __name__ == "__main__":
    main()
