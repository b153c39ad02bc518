#!/usr/bin/env python3
"""The whole model through IREE on the GPU machine: correctness, then timing.

Runs the modules ``build_model.sh`` compiled (``snapkv compile models/retrieval-llama --device
cuda``, SnapKV and the full-cache original) with ``iree.runtime`` only (no MLIR tool), the
weights bound from the checkpoint, on retrieval prompts (``snapkv.tasks.retrieval``, the
``multitoken`` variant, seed 1234):

1. **correctness**, per check length: the full-cache module's greedy tokens must equal HF
   transformers' (the same checkpoint in f32, SDPA, ``DynamicCache``, on ``--torch-device``)
   and the CPU pipeline's recorded by ``--expect`` (``expected.json``); the SnapKV module's
   must equal the CPU pipeline's SnapKV tokens (HF has no SnapKV); both report the largest
   logit difference, the cache rows and whether the answer came out. A token that differs
   where the reference's two best logits are within 1e-3 is NEAR-TIE, else FAIL;
2. **timing**, per timing length: prefill and the decode step (median; the caches stay on the
   device between steps, ``snapkv.iree_device.timed_generate``) of IREE full and SnapKV,
   against HF SDPA eager and, if it compiles, ``torch.compile`` of the same model (its first
   call, the compilation, reported separately).

``--device local-task`` runs the ``iree-cpu-*`` modules on IREE's llvm-cpu, with torch on the
CPU: the stand-in that runs this script end to end without a GPU. Prints the tables and
writes ``model_check.json`` and ``model_report.md`` to ``--out``.

``--expect`` (where snapkv-opt and clang are: the build machine) records the CPU pipeline's
tokens and logits for the check prompts in ``MODELS/expected.json``.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from snapkv import iree_device  # noqa: E402
from snapkv.tasks import retrieval  # noqa: E402

SEED, VARIANT = 1234, "multitoken"
TIE = 1e-3          # two best logits closer than this: a differing token is NEAR-TIE
VARIANTS = ("full", "snapkv")


def prompt(length: int) -> retrieval.Sample:
    return retrieval.generate(length, SEED, VARIANT)


def module_path(models: Path, device: str, variant: str) -> Path:
    prefix = "cuda" if device == "cuda" else "iree-cpu"
    return models / f"{prefix}-{variant}.vmfb"


# ---------------------------------------------------------------------------------------------
# HF transformers (the version on the GPU machine may differ from ours: the cache argument
# is `cache` in transformers 5.24, `past_key_values` before)

class HFModel:
    def __init__(self, checkpoint: Path, device: str):
        import torch
        import transformers

        self.torch, self.device = torch, device
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            checkpoint, dtype=torch.float32, attn_implementation="sdpa").to(device).eval()
        names = inspect.signature(self.model.forward).parameters
        self.cache_arg = "cache" if "cache" in names else "past_key_values"
        self.forward = self.model

    def compiled(self) -> "HFModel":
        """The same model under torch.compile (compiled at its first calls)."""
        other = copy.copy(self)
        other.forward = self.torch.compile(self.model)
        return other

    def new_cache(self):
        from transformers import DynamicCache
        try:
            return DynamicCache(config=self.model.config)
        except TypeError:
            return DynamicCache()

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def step(self, ids, cache):
        with self.torch.no_grad():
            out = self.forward(input_ids=ids, use_cache=True, **{self.cache_arg: cache})
        return out.logits[0, -1].float()

    def generate(self, ids, steps: int) -> dict:
        """Greedy decoding with timings (wall clock, synchronised): like timed_generate."""
        torch = self.torch
        cache = self.new_cache()
        ids = torch.tensor(np.asarray(ids)[None], device=self.device)
        self.sync()
        start = time.perf_counter()
        row = self.step(ids, cache)
        token = int(torch.argmax(row))
        self.sync()
        prefill = time.perf_counter() - start
        rows, tokens, decode = [row.cpu().numpy()], [token], []
        for _ in range(steps):
            start = time.perf_counter()
            row = self.step(torch.tensor([[tokens[-1]]], device=self.device), cache)
            token = int(torch.argmax(row))
            self.sync()
            decode.append(time.perf_counter() - start)
            rows.append(row.cpu().numpy())
            tokens.append(token)
        return {"tokens": tokens, "logits": np.stack(rows), "prefill_seconds": prefill,
                "decode_seconds": decode}


# ---------------------------------------------------------------------------------------------
# Correctness

def compare(tokens, logits, ref_tokens, ref_logits) -> dict:
    """PASS when the tokens are equal; NEAR-TIE when they part where the reference's two
    best logits are within TIE; else FAIL."""
    out = {"logits_max_abs_diff": float(np.abs(np.asarray(logits) - ref_logits).max())}
    if list(tokens) == list(ref_tokens):
        return {"status": "PASS", **out}
    first = next(i for i, (a, b) in enumerate(zip(tokens, ref_tokens)) if a != b)
    best = np.sort(np.asarray(ref_logits[first]))[-2:]
    near = float(best[1] - best[0]) < TIE
    return {"status": "NEAR-TIE" if near else "FAIL", "first_difference": first, **out}


def check(rows, models, hf, expected, steps):
    """Appends one row per (check length, variant) to `rows` as it goes."""
    for length_text, want in expected["prompts"].items():
        length = int(length_text)
        sample = prompt(length)
        reference = hf.generate(sample.ids, steps)
        for variant in VARIANTS:
            got = models[variant].generate(sample.ids, steps)
            cpu = want[variant]
            row = {"length": length, "variant": variant, "tokens": got["tokens"],
                   "physical_lengths": got["physical_lengths"],
                   "answer": [int(t) for t in sample.answer],
                   "answered": got["tokens"][:len(sample.answer)] == list(sample.answer),
                   "vs_cpu_pipeline": compare(got["tokens"], got["logits"], cpu["tokens"],
                                              np.asarray(cpu["logits"], np.float32))}
            if variant == "full":
                row["vs_hf"] = compare(got["tokens"], got["logits"], reference["tokens"],
                                       reference["logits"])
                row["hf_tokens"] = reference["tokens"]
            rows.append(row)
            status = [row["vs_cpu_pipeline"]["status"]] + \
                ([row["vs_hf"]["status"]] if "vs_hf" in row else [])
            print(f"  L={length:5d} {variant:6s} tokens {got['tokens']} rows "
                  f"{got['physical_lengths'][0]}..{got['physical_lengths'][-1]} answered "
                  f"{row['answered']}: vs CPU pipeline {status[0]} "
                  f"(max |dlogit| {row['vs_cpu_pipeline']['logits_max_abs_diff']:.2e})"
                  + (f", vs HF {status[1]} (max |dlogit| "
                     f"{row['vs_hf']['logits_max_abs_diff']:.2e})" if len(status) > 1 else ""),
                  flush=True)


# ---------------------------------------------------------------------------------------------
# Timing

def _median_ms(values) -> float:
    return round(statistics.median(values) * 1e3, 3)


def time_iree(model, ids, steps, repeats) -> dict:
    runs = [iree_device.timed_generate(model, ids, steps) for _ in range(repeats + 1)][1:]
    return {"prefill_ms": _median_ms([r["prefill_seconds"] for r in runs]),
            "decode_ms": _median_ms([s for r in runs for s in r["decode_seconds"]]),
            "cache_rows": runs[0]["physical_lengths"][0]}


def time_hf(hf, ids, steps, repeats) -> dict:
    # Three decode steps in the warm-up: torch.compile recompiles for a dynamic cache length
    # at the second one.
    first = time.perf_counter()
    hf.generate(ids, 3)
    first = time.perf_counter() - first
    runs = [hf.generate(ids, steps) for _ in range(repeats)]
    return {"prefill_ms": _median_ms([r["prefill_seconds"] for r in runs]),
            "decode_ms": _median_ms([s for r in runs for s in r["decode_seconds"]]),
            "first_call_s": round(first, 2)}


def timing(rows, models, hf, lengths, steps, repeats, compiled, deadline):
    """Appends one row per length to `rows` as it goes (a stop keeps what was measured)."""
    for length in lengths:
        if time.monotonic() > deadline:
            print(f"  L={length}: skipped (past --budget)")
            rows.append({"length": length, "skipped": "past --budget"})
            continue
        ids = prompt(length).ids
        row = {"length": length}
        for variant in VARIANTS:
            row[f"iree_{variant}"] = time_iree(models[variant], ids, steps, repeats)
        row["hf_sdpa"] = time_hf(hf, ids, steps, repeats)
        rows.append(row)
        if compiled is not None and time.monotonic() < deadline:
            try:
                row["torch_compile"] = time_hf(compiled, ids, steps, repeats)
            except Exception as error:  # report it, keep the other columns
                row["torch_compile"] = {"error": f"{type(error).__name__}: "
                                                 f"{str(error).splitlines()[0][:200]}"}
        print("  " + json.dumps(row), flush=True)


def table(rows) -> str:
    columns = [("iree_full", "IREE full"), ("iree_snapkv", "IREE SnapKV"),
               ("hf_sdpa", "HF SDPA"), ("torch_compile", "torch.compile")]
    lines = ["| L | " + " | ".join(f"{name} prefill ms | {name} decode ms/step"
                                   for _, name in columns) + " |",
             "|---:|" + "---:|" * (2 * len(columns))]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['length']} | " + " | ".join(["skipped"] * 2 * len(columns))
                         + " |")
            continue
        cells = []
        for key, _ in columns:
            cell = row.get(key)
            if cell is None or "error" in cell:
                cells += ["-", "-"]
            else:
                cells += [f"{cell['prefill_ms']:.2f}", f"{cell['decode_ms']:.3f}"]
        lines.append(f"| {row['length']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------

def expect(models_dir: Path, checkpoint: Path, lengths, steps):
    """Here, with snapkv-opt: the CPU pipeline's tokens and logits for the check prompts."""
    from snapkv import hf

    manifest = iree_device.read_manifest(module_path(models_dir, "local-task", "snapkv"))
    fields = {f for f in hf.Compaction.__dataclass_fields__}
    compaction = hf.Compaction(**{k: v for k, v in manifest["compaction"].items()
                                  if k in fields})
    pipelines = {"full": hf.load(checkpoint), "snapkv": hf.load(checkpoint, compaction)}
    prompts = {}
    for length in lengths:
        ids = prompt(length).ids
        prompts[str(length)] = {}
        for variant, model in pipelines.items():
            out = model.generate(ids, steps)
            prompts[str(length)][variant] = {
                "tokens": out["tokens"], "physical_lengths": out["physical_lengths"],
                "logits": np.asarray(out["logits"], np.float32).round(6).tolist()}
            print(f"  L={length} {variant}: {out['tokens']}")
    doc = {"seed": SEED, "variant": VARIANT, "steps": steps, "compaction": manifest["compaction"],
           "prompts": prompts}
    (models_dir / "expected.json").write_text(json.dumps(doc) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=REPO / "build" / "gpu-model",
                        help="what build_model.sh wrote")
    parser.add_argument("--checkpoint", type=Path, default=REPO / "models" / "retrieval-llama")
    parser.add_argument("--device", choices=("cuda", "local-task"), default="cuda",
                        help="IREE driver: cuda, or local-task (llvm-cpu, the stand-in)")
    parser.add_argument("--torch-device", help="default: cuda with --device cuda, else cpu")
    parser.add_argument("--workers", type=int, help="local-task worker threads")
    parser.add_argument("--steps", type=int, default=8, help="greedy steps checked")
    parser.add_argument("--timing-lengths", default="1024,4096")
    parser.add_argument("--timing-steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true", help="no torch.compile column")
    parser.add_argument("--budget", type=float, default=150,
                        help="seconds after which later timing lengths are skipped")
    parser.add_argument("--out", type=Path, help="where model_check.json and "
                                                 "model_report.md go")
    parser.add_argument("--expect", metavar="LENGTHS",
                        help="(build machine) record the CPU pipeline's tokens for these "
                             "check lengths in MODELS/expected.json, then stop")
    args = parser.parse_args(argv)
    start = time.monotonic()
    if args.expect:
        expect(args.models, args.checkpoint, [int(x) for x in args.expect.split(",")],
               args.steps)
        return 0
    import iree.runtime.version
    import torch

    torch_device = args.torch_device or ("cuda" if args.device == "cuda" else "cpu")
    expected = json.loads((args.models / "expected.json").read_text())
    env = {"python": platform.python_version(), "numpy": np.__version__,
           "torch": torch.__version__, "iree_runtime": iree.runtime.version.VERSION,
           "driver": args.device, "torch_device": torch_device,
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    import transformers
    env["transformers"] = transformers.__version__
    print("== environment\n  " + json.dumps(env), flush=True)
    models = {}
    for variant in VARIANTS:
        path = module_path(args.models, args.device, variant)
        try:
            models[variant] = iree_device.load(path, checkpoint=args.checkpoint,
                                               driver=args.device, workers=args.workers)
        except (RuntimeError, ValueError, iree_device.DeviceModelError) as error:
            # IREE's driver or the module did not start (no libcuda.so, a PTX JIT error).
            print(f"cannot load {path} on {args.device}: {str(error).splitlines()[0]}")
            return 3
        manifest = models[variant].manifest
        compaction = manifest["compaction"] and {k: manifest["compaction"][k] for k in
                                                 ("window", "capacity", "kernel", "gqa")}
        print(f"  {path.name}: {manifest['device']} {manifest['arch'] or ''} "
              f"{len(manifest['executables'])} executables, compaction {compaction}",
              flush=True)
    if torch_device == "cuda" and not torch.cuda.is_available():
        print("torch sees no CUDA device (--torch-device cpu to compare on the CPU)")
        return 3
    hf = HFModel(args.checkpoint, torch_device)
    print(f"== correctness ({expected['steps']} greedy steps, {VARIANT} prompts, seed {SEED})",
          flush=True)
    checks, rows, stopped = [], [], False
    try:
        check(checks, models, hf, expected, expected["steps"])
        compiled = None if args.no_compile else hf.compiled()
        lengths = [int(x) for x in args.timing_lengths.split(",") if x]
        print(f"== timing (median of {args.repeats} runs; decode: {args.timing_steps} steps "
              f"each)", flush=True)
        timing(rows, models, hf, lengths, args.timing_steps, args.repeats, compiled,
               start + args.budget)
    except KeyboardInterrupt:  # run_device.sh's time limit (SIGINT): report what was done
        stopped = True
        print("== stopped by SIGINT (the time limit): what was measured so far", flush=True)
    failed = [c for c in checks if "FAIL" in (c["vs_cpu_pipeline"]["status"],
                                             c.get("vs_hf", {}).get("status"))]
    report = table(rows)
    print(report)
    summary = {"environment": env, "checks": checks, "timing": rows, "failed": len(failed),
               "stopped": stopped, "seconds": round(time.monotonic() - start, 1)}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "model_check.json").write_text(json.dumps(summary, indent=1) + "\n")
        (args.out / "model_report.md").write_text(
            f"# IREE model check ({args.device})\n\n```\n{json.dumps(env)}\n```\n\n"
            f"{len(checks) - len(failed)}/{len(checks)} checks without FAIL\n\n{report}\n")
    print(f"== {len(checks) - len(failed)}/{len(checks)} checks without FAIL, "
          f"{summary['seconds']} s")
    return 1 if failed else 130 if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
