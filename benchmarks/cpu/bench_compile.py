#!/usr/bin/env python3
"""Compile time and code size of models, and what SnapKV's compacted cache does to them.

Models (``--models``, comma-separated):

* ``tiny-bundled``: ``test/Models/tiny_llama_dynamic.mlir`` as it is (both layers in one
  function, weights inlined as constants);
* ``tiny``: the same configuration (vocab 256, hidden 64, 2 layers, 4/2 heads, head_dim 16)
  as a ``save_pretrained`` checkpoint through ``snapkv.hf`` (one function per layer kind,
  weights as arguments);
* ``smollm2``: SmolLM2-135M's shapes (30 layers, hidden 576, intermediate 1536, 9/3 heads,
  head_dim 64, vocab 49152, tied embeddings);
* ``llama8b-2l``: two layers of Llama-3-8B's shapes (hidden 4096, intermediate 14336, 32/8
  heads, head_dim 128, rope_theta 500000) with a small vocabulary (``--vocab``, 1024): 1.75 GB
  of f32 weights.

The checkpoints hold random weights (``torch.manual_seed(0)``), written once by
``save_pretrained`` under ``~/.cache/snapkv/bench-checkpoints`` and exported once (the export
cache; its first time is printed, not part of the table).

**Compile** (median of ``--runs``, each into an empty library cache): the rewrite
(``snapkv-compress-kv-cache``, window ``--window``, capacity L/8) and the compile of the
rewritten module by the runner (``snapkv-opt --snapkv-cpu-pipeline``, ``snapkv-translate``
(to LLVM bitcode, split into one part per core), ``clang`` (the parts at the same time and the
link), ``--cflags``; per-layer modules compile their layer functions once, the entry
points run from Python). Wall seconds per step and in total, CPU seconds in total (the tools'
own: a loaded machine shows as wall > CPU), and the sizes of the lowered MLIR (bytecode), the
LLVM bitcode and the shared object.

**Run** (``--length`` L, default 4096; capacity C = L/8; ``--steps`` decode steps): prefill of
the original module and of the rewritten one, once each (``--prefill-runs`` for a median); the
``snapkv.select`` of one layer alone, compiled with the same flags at the model's shapes,
times the number of layers, as a share of the rewritten prefill; the median decode step with
the full cache (L + g rows) and with the compacted one (C + g rows) and their ratio.
``--no-run`` times the compiles only; ``--no-prefill`` times the decode steps from random
caches of L and C rows (and the selection alone) without running prefill.

Prints markdown tables and the conditions (CPU, load average before and after). Timings are
measurements, never pass/fail.
"""

import argparse
import datetime
import json
import os
import platform
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from checkpoints import checkpoint, configs  # noqa: E402

from snapkv import hf, runtime, tools  # noqa: E402

FIXTURE = REPO / "test" / "Models" / "tiny_llama_dynamic.mlir"
STEPS = ("rewrite", "snapkv-opt", "snapkv-translate", "clang")


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compile_once(text, compaction, cflags, weights):
    """One rewrite + compile into an empty cache: (row of times and sizes, model)."""
    cpu0, start = children_cpu(), time.perf_counter()
    rewritten = hf.rewrite(text, compaction)
    row = {"rewrite": time.perf_counter() - start}
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as cache:
        model = runtime.CompiledModel(rewritten, cache_dir=cache, cflags=cflags,
                                      weights=weights)
        stats = model.library.stats
        row["so_bytes"] = model.library.path.stat().st_size
        # The library stays loaded (ctypes) after its file is gone.
    row["total"] = time.perf_counter() - start
    row["cpu"] = children_cpu() - cpu0
    for step in STEPS[1:]:
        row[step] = stats[step]["wall"]
    row["lowered_bytes"] = stats["snapkv-opt"]["bytes"]
    row["bitcode_bytes"] = stats["snapkv-translate"]["bytes"]
    row["split"] = model.split
    return row, model


def median_row(rows):
    out = {}
    for key in rows[0]:
        values = [r[key] for r in rows]
        out[key] = statistics.median(values) if isinstance(values[0], (int, float)) \
            and not isinstance(values[0], bool) else values[0]
    return out


def select_module(q_shape, kv_shape, window, capacity, dtype="f32"):
    b, hq, _, d = q_shape
    _, hkv, length, _ = kv_shape
    out = (b, hq, min(length, capacity), d)

    def tt(shape, elem=dtype):
        return "tensor<" + "x".join(map(str, shape)) + f"x{elem}>"

    return f"""module {{
  func.func @snapkv_select(%q: {tt(q_shape)}, %k: {tt(kv_shape)}, %v: {tt(kv_shape)})
      -> ({tt(out)}, {tt(out)}, {tt(out[:3], 'i64')}) {{
    %ko, %vo, %idx = snapkv.select %q, %k, %v window {window} capacity {capacity}
        : ({tt(q_shape)}, {tt(kv_shape)}, {tt(kv_shape)})
        -> ({tt(out)}, {tt(out)}, {tt(out[:3], 'i64')})
    return %ko, %vo, %idx : {tt(out)}, {tt(out)}, {tt(out[:3], 'i64')}
  }}
}}
"""


def time_select(spec, length, window, capacity, cflags, runs):
    """Median seconds of one snapkv.select at the model's shapes (f32, random inputs)."""
    import ctypes

    hq, hkv, d = spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"]
    text = select_module((1, hq, window, d), (1, hkv, length, d), window, capacity)
    library = runtime.compile_library(text, cflags=cflags, label="snapkv.select")
    function = runtime.CompiledFunction(ctypes.CDLL(str(library.path)), "snapkv_select",
                                        runtime.signature(text, "snapkv_select"))
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, hq, window, d), dtype=np.float32)
    k = rng.standard_normal((1, hkv, length, d), dtype=np.float32)
    v = rng.standard_normal((1, hkv, length, d), dtype=np.float32)
    return statistics.median(function.time_call(q, k, v, repeat=runs + 1)[1:])


def time_model(model, ids, steps):
    """Prefill seconds, the decode steps' seconds, the physical rows after prefill."""
    start = time.perf_counter()
    logits, caches = model.prefill(ids)
    prefill = time.perf_counter() - start
    rows = caches[0].shape[2]
    token, length, decode = int(np.argmax(logits[0, -1])), ids.shape[1], []
    for g in range(steps):
        start = time.perf_counter()
        logits, caches = model.decode(token, length + g, caches)
        decode.append(time.perf_counter() - start)
        token = int(np.argmax(logits[0, 0]))
    return prefill, decode, rows


def time_decode_only(model, length, rows, steps, vocab):
    """`steps` decode steps from random caches of `rows` rows at logical position `length`
    (no prefill: what a decode step costs against the cache it reads)."""
    rng = np.random.default_rng(1)
    caches = [rng.standard_normal((t.shape[0], t.shape[1], rows, t.shape[3]), dtype=t.dtype)
              for t in model.cache_types]
    times, token = [], int(rng.integers(0, vocab))
    for g in range(steps):
        start = time.perf_counter()
        logits, caches = model.decode(token, length + g, caches)
        times.append(time.perf_counter() - start)
        token = int(np.argmax(logits[0, 0]))
    return times


def cpu_model():
    match = re.search(r"^model name\s*:\s*(.*)$", Path("/proc/cpuinfo").read_text(), re.M)
    return match.group(1).strip() if match else platform.processor()


def mb(n):
    return f"{n / 1e6:.2f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny-bundled,tiny,smollm2,llama8b-2l")
    parser.add_argument("--runs", type=int, default=3,
                        help="compiles per model (median); 0 writes and exports the "
                             "checkpoints only")
    parser.add_argument("--cflags", default=" ".join(runtime.DEFAULT_CFLAGS))
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--length", type=int, default=4096, help="prompt length L")
    parser.add_argument("--steps", type=int, default=16, help="decode steps")
    parser.add_argument("--prefill-runs", type=int, default=1)
    parser.add_argument("--select-runs", type=int, default=5)
    parser.add_argument("--vocab", type=int, default=1024, help="llama8b-2l's vocabulary")
    parser.add_argument("--no-run", action="store_true", help="compile times only")
    parser.add_argument("--no-prefill", action="store_true",
                        help="decode steps from random caches of L (full) and C (compacted) "
                             "rows, no prefill (and no selection share)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)

    def log(message):
        print(message, file=sys.stderr, flush=True)

    cflags = tuple(args.cflags.split())
    capacity = args.length // 8
    compaction = hf.Compaction(window=args.window, capacity=capacity, kernel=5, gqa="expand")
    specs = configs(args.vocab)
    load_before = os.getloadavg()
    compile_rows, run_rows = {}, {}
    for name in args.models.split(","):
        if name == "tiny-bundled":
            text, weights, spec, meta = FIXTURE.read_text(), None, None, {}
        else:
            cls, spec = specs[name]
            folder = checkpoint(name, cls, spec, log)
            cp = hf.Checkpoint(folder)
            start = time.perf_counter()
            exported = hf.export(cp, log=log)
            log(f"{name}: export {time.perf_counter() - start:.1f} s")
            text, weights, meta = exported.text, cp, exported.meta
        rows = []
        for r in range(args.runs):
            row, model = compile_once(text, compaction, cflags, weights)
            log(f"{name}: compile run {r + 1}: " + ", ".join(
                f"{k} {v:.2f}" for k, v in row.items() if isinstance(v, float)))
            rows.append(row)
        if not rows:  # --runs 0: the checkpoints and exports only
            continue
        compile_rows[name] = median_row(rows)
        compile_rows[name]["module_bytes"] = len(text.encode())
        if args.no_run or spec is None:
            continue
        full = runtime.CompiledModel(text, cflags=cflags, weights=weights,
                                     max_positions=meta.get("max_position_embeddings"))
        ids = np.random.default_rng(0).integers(0, spec["vocab_size"], (1, args.length))
        result = {}
        if args.no_prefill:
            for label, m, rows in (("full", full, args.length), ("compacted", model, capacity)):
                decode = time_decode_only(m, args.length, rows, args.steps, spec["vocab_size"])
                result[label] = dict(prefill=None, decode=statistics.median(decode), rows=rows)
                log(f"{name}: {label}: decode step {result[label]['decode'] * 1e3:.2f} ms "
                    f"({rows} rows)")
        for label, m in (() if args.no_prefill else (("full", full), ("compacted", model))):
            prefills, decode = [], []
            for _ in range(args.prefill_runs):
                prefill, decode, rows_after = time_model(m, ids, args.steps)
                prefills.append(prefill)
            result[label] = dict(prefill=statistics.median(prefills),
                                 decode=statistics.median(decode), rows=rows_after)
            log(f"{name}: {label}: prefill {result[label]['prefill']:.2f} s, decode step "
                f"{result[label]['decode'] * 1e3:.2f} ms ({rows_after} rows after prefill)")
        select = time_select(spec, args.length, args.window, capacity, cflags,
                             args.select_runs)
        result["select"] = select * spec["num_hidden_layers"]
        run_rows[name] = result

    load_after = os.getloadavg()
    print(f"## Compile time ({datetime.date.today()}, {cpu_model()}, {os.cpu_count()} CPUs, "
          f"load average {load_before[0]:.1f} before / {load_after[0]:.1f} after)\n")
    print(f"`clang {' '.join(cflags)}`; rewrite window {args.window} capacity {capacity}; "
          f"median of {args.runs} compiles, each into an empty cache. Seconds (wall); CPU = "
          "the tools' own CPU seconds; sizes in MB.\n")
    print("| model | module | rewrite | snapkv-opt | snapkv-translate | clang | total | CPU "
          "| lowered MLIR | LLVM bitcode | .so |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in compile_rows.items():
        print(f"| {name} | {mb(row['module_bytes'])} | {row['rewrite']:.2f} | "
              f"{row['snapkv-opt']:.2f} | {row['snapkv-translate']:.2f} | {row['clang']:.2f} | "
              f"**{row['total']:.2f}** | {row['cpu']:.2f} | {mb(row['lowered_bytes'])} | "
              f"{mb(row['bitcode_bytes'])} | {mb(row['so_bytes'])} |")
    if run_rows:
        print(f"\n## Prefill L = {args.length} and {args.steps} decode steps "
              f"(C = L/8 = {capacity}, window {args.window})\n")
        print("| model | prefill full (s) | prefill compacted (s) | select x layers (s) "
              "| select share | decode full (ms) | decode compacted (ms) | decode speed-up |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, r in run_rows.items():
            f, c = r["full"], r["compacted"]
            if c["prefill"] is None:
                prefill = "not run | not run", "n/a"
            else:
                prefill = (f"{f['prefill']:.2f} | {c['prefill']:.2f}",
                           f"{100 * r['select'] / c['prefill']:.1f} %")
            print(f"| {name} | {prefill[0]} | {r['select']:.3f} | {prefill[1]} | "
                  f"{f['decode'] * 1e3:.2f} | {c['decode'] * 1e3:.2f} | "
                  f"{f['decode'] / c['decode']:.2f}x |")
    print(f"\nsnapkv-opt: {tools.snapkv_opt()}; clang: {tools.clang()}; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    if args.json:
        args.json.write_text(json.dumps(dict(compile=compile_rows, run=run_rows,
                                             cflags=cflags, load=[load_before, load_after]),
                                        indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
