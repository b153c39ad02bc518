#!/usr/bin/env python3
"""The whole model through IREE on the GPU machine: correctness, then timing.

Runs the modules ``build_model.sh`` compiled (``snapkv compile MODEL --device cuda``, SnapKV
and the full-cache original) with ``iree.runtime`` only (no MLIR tool), the weights bound
from the checkpoint, for each model set (:data:`SETS`): ``retrieval`` (models/retrieval-llama
on retrieval prompts, ``multitoken``, seed 1234) and ``smollm2-random`` (SmolLM2-135M's
architecture, its weights drawn from a seed by :func:`write_random_checkpoint` on both
machines, on random ids):

1. **correctness**, per check length: the full-cache module's greedy tokens must equal HF
   transformers' (the same checkpoint in f32, SDPA, ``DynamicCache``, on ``--torch-device``)
   and the CPU pipeline's recorded by ``--expect`` (``<prefix>expected.json``); the SnapKV
   module's must equal the CPU pipeline's SnapKV tokens (HF has no SnapKV); both report the
   largest logit difference, the cache rows and (retrieval) whether the answer came out. A
   token that differs where the reference's two best logits are within 1e-3 is NEAR-TIE, else
   FAIL;
2. **timing**, per timing length: prefill and the decode step (median; the caches stay on the
   device between steps, ``snapkv.iree_device.timed_generate``) of IREE full and SnapKV,
   against HF SDPA eager and, if it compiles, ``torch.compile`` of the same model (its first
   call, the compilation, reported separately); lengths past ``--budget`` are skipped.

``--device local-task`` runs the ``iree-cpu-*`` modules on IREE's llvm-cpu, with torch on the
CPU: the stand-in that runs this script end to end without a GPU. Prints the table and
writes ``model_check.json`` and ``model_report.md`` to ``--out`` (also when SIGINT, the time
limit of run_device.sh, stops it).

``--expect`` (where snapkv-opt and clang are: the build machine) records the CPU pipeline's
tokens and logits for the check prompts; ``--write-random-checkpoint`` writes the random one.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import inspect
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from snapkv import iree_device  # noqa: E402
from snapkv.tasks import retrieval  # noqa: E402

SEED, VARIANT = 1234, "multitoken"
TIE = 1e-3          # two best logits closer than this: a differing token is NEAR-TIE
TOP = 64            # logits per row expected.json keeps for a large vocabulary
VARIANTS = ("full", "snapkv")
# SmolLM2-135M's architecture (30 layers, hidden 576, 9 query / 3 kv heads of 64, vocabulary
# 49152) with weights drawn from a seed: its f32 weights (540 MB) do not travel to the GPU
# machine, so both sides write the same checkpoint (write_random_checkpoint).
SMOLLM2_CONFIG = REPO / "benchmarks" / "gpu" / "smollm2-135m-config.json"
RANDOM_SEED = 0


@dataclasses.dataclass(frozen=True)
class ModelSet:
    """A model the device run checks and times: its modules are ``{prefix}cuda-*.vmfb`` (and
    ``{prefix}iree-cpu-*.vmfb``) in MODELS, its recorded tokens ``{prefix}expected.json``."""
    name: str
    prefix: str

    def module(self, models: Path, device: str, variant: str) -> Path:
        target = "cuda" if device == "cuda" else "iree-cpu"
        return models / f"{self.prefix}{target}-{variant}.vmfb"

    def checkpoint(self, scratch: Path) -> Path:
        """The checkpoint directory (the random one is written under `scratch` first)."""
        if self.name == "retrieval":
            return REPO / "models" / "retrieval-llama"
        out = scratch / "smollm2-random"
        write_random_checkpoint(SMOLLM2_CONFIG, out, RANDOM_SEED)
        return out

    def prompt(self, length: int, vocab: int):
        """(ids, the expected answer or None)."""
        if self.name == "retrieval":
            sample = retrieval.generate(length, SEED, VARIANT)
            return sample.ids, [int(t) for t in sample.answer]
        return np.random.default_rng([SEED, length]).integers(0, vocab, length), None


SETS = {s.name: s for s in (ModelSet("retrieval", ""), ModelSet("smollm2-random", "smollm2-"))}


def write_random_checkpoint(config: Path, out: Path, seed: int):
    """A checkpoint of `config`'s architecture whose every tensor is drawn with numpy from
    (`seed`, the tensor's name): the same bytes wherever it is written (no torch RNG). Norm
    weights are 1, every other tensor normal with the config's initializer_range. Tensor names
    and shapes come from transformers' model of the config (on the meta device)."""
    import zlib

    import torch
    import transformers

    marker = out / "snapkv-random.json"
    if marker.is_file() and json.loads(marker.read_text()) == {"seed": seed}:
        return
    settings = json.loads(config.read_text())
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**settings))
    tensors = {name: tuple(t.shape) for name, t in model.state_dict().items()
               if not (name == "lm_head.weight" and settings.get("tie_word_embeddings"))}
    std = settings.get("initializer_range", 0.02)
    out.mkdir(parents=True, exist_ok=True)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in sorted(tensors.items()):
        size = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset,
                                                                            offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for name, shape in sorted(tensors.items()):
            if name.endswith("norm.weight"):
                array = np.ones(shape, np.float32)
            else:
                rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
                array = (rng.standard_normal(shape, dtype=np.float32) * np.float32(std))
            f.write(np.ascontiguousarray(array, "<f4").tobytes())
    (out / "config.json").write_text(json.dumps(settings, indent=1) + "\n")
    marker.write_text(json.dumps({"seed": seed}))


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

def record(logits) -> dict:
    """Logits rows as expected.json keeps them: all of them for a small vocabulary, else each
    row's TOP largest (indices and values), which is what compare() needs."""
    logits = np.asarray(logits, np.float32)
    if logits.shape[1] <= 4096:
        return {"all": logits.round(6).tolist()}
    top = np.argsort(-logits, axis=1, kind="stable")[:, :TOP]
    return {"top_indices": top.tolist(),
            "top_values": np.take_along_axis(logits, top, 1).round(6).tolist()}


def aligned(logits, ref):
    """(ours, the reference's) on the logits `ref` holds: an array, or what record() kept."""
    logits = np.asarray(logits, np.float32)
    if isinstance(ref, dict) and "top_indices" in ref:
        top = np.asarray(ref["top_indices"])
        return np.take_along_axis(logits, top, 1), np.asarray(ref["top_values"], np.float32)
    return logits, np.asarray(ref["all"] if isinstance(ref, dict) else ref, np.float32)


def compare(tokens, logits, ref_tokens, ref_logits) -> dict:
    """PASS when the tokens are equal; NEAR-TIE when they part where the reference's two
    best logits are within TIE; else FAIL. `ref_logits`: an array or what record() kept."""
    ours, theirs = aligned(logits, ref_logits)
    out = {"logits_max_abs_diff": float(np.abs(ours - theirs).max())}
    if list(tokens) == list(ref_tokens):
        return {"status": "PASS", **out}
    first = next(i for i, (a, b) in enumerate(zip(tokens, ref_tokens)) if a != b)
    best = np.sort(theirs[first])[-2:]
    near = float(best[1] - best[0]) < TIE
    return {"status": "NEAR-TIE" if near else "FAIL", "first_difference": first, **out}


def check(rows, mset, models, hf, expected, steps):
    """Appends one row per (check length, variant) to `rows` as it goes."""
    vocab = models["full"].vocab_size
    for length_text, want in expected["prompts"].items():
        length = int(length_text)
        ids, answer = mset.prompt(length, vocab)
        reference = hf.generate(ids, steps)
        for variant in VARIANTS:
            got = models[variant].generate(ids, steps)
            cpu = want[variant]
            row = {"model": mset.name, "length": length, "variant": variant,
                   "tokens": got["tokens"], "physical_lengths": got["physical_lengths"],
                   "answer": answer,
                   "answered": None if answer is None else got["tokens"][:len(answer)] == answer,
                   "vs_cpu_pipeline": compare(got["tokens"], got["logits"], cpu["tokens"],
                                              cpu["logits"])}
            if variant == "full":
                row["vs_hf"] = compare(got["tokens"], got["logits"], reference["tokens"],
                                       reference["logits"])
                row["hf_tokens"] = reference["tokens"]
            rows.append(row)
            status = [row["vs_cpu_pipeline"]["status"]] + \
                ([row["vs_hf"]["status"]] if "vs_hf" in row else [])
            print(f"  {mset.name} L={length:5d} {variant:6s} tokens {got['tokens']} rows "
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


def timing(rows, mset, models, hf, lengths, steps, repeats, compiled, deadline):
    """Appends one row per length to `rows` as it goes (a stop keeps what was measured)."""
    for length in lengths:
        if time.monotonic() > deadline:
            print(f"  {mset.name} L={length}: skipped (past --budget)")
            rows.append({"model": mset.name, "length": length, "skipped": "past --budget"})
            continue
        ids, _ = mset.prompt(length, models["full"].vocab_size)
        row = {"model": mset.name, "length": length}
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
    lines = ["| model | L | " + " | ".join(f"{name} prefill ms | {name} decode ms/step"
                                           for _, name in columns) + " |",
             "|---|---:|" + "---:|" * (2 * len(columns))]
    for row in rows:
        head = f"| {row['model']} | {row['length']} | "
        if "skipped" in row:
            lines.append(head + " | ".join(["skipped"] * 2 * len(columns)) + " |")
            continue
        cells = []
        for key, _ in columns:
            cell = row.get(key)
            if cell is None or "error" in cell:
                cells += ["-", "-"]
            else:
                cells += [f"{cell['prefill_ms']:.2f}", f"{cell['decode_ms']:.3f}"]
        lines.append(head + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------

def expect(models_dir: Path, mset: ModelSet, lengths, steps, scratch: Path):
    """Here, with snapkv-opt: the CPU pipeline's tokens and logits for the check prompts."""
    from snapkv import hf

    manifest = iree_device.read_manifest(mset.module(models_dir, "local-task", "snapkv"))
    fields = set(hf.Compaction.__dataclass_fields__)
    compaction = hf.Compaction(**{k: v for k, v in manifest["compaction"].items()
                                  if k in fields})
    checkpoint = mset.checkpoint(scratch)
    pipelines = {"full": hf.load(checkpoint), "snapkv": hf.load(checkpoint, compaction)}
    prompts = {}
    for length in lengths:
        ids, _ = mset.prompt(length, manifest["vocab_size"])
        prompts[str(length)] = {}
        for variant, model in pipelines.items():
            out = model.generate(ids, steps)
            prompts[str(length)][variant] = {
                "tokens": out["tokens"], "physical_lengths": out["physical_lengths"],
                "logits": record(out["logits"])}
            print(f"  {mset.name} L={length} {variant}: {out['tokens']}")
    doc = {"model": mset.name, "steps": steps, "compaction": manifest["compaction"],
           "prompts": prompts}
    (models_dir / f"{mset.prefix}expected.json").write_text(json.dumps(doc) + "\n")


def run_set(mset, args, torch_device, deadline, checks, rows) -> Optional[int]:
    """Loads, checks and times one model set, appending to `checks` and `rows`; returns an
    exit status when its modules cannot start."""
    checkpoint = mset.checkpoint(args.scratch)
    models = {}
    for variant in VARIANTS:
        path = mset.module(args.models, args.device, variant)
        try:
            models[variant] = iree_device.load(path, checkpoint=checkpoint,
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
    hf = HFModel(checkpoint, torch_device)
    expected = json.loads((args.models / f"{mset.prefix}expected.json").read_text())
    print(f"== {mset.name}: correctness ({expected['steps']} greedy steps)", flush=True)
    check(checks, mset, models, hf, expected, expected["steps"])
    compiled = None if args.no_compile else hf.compiled()
    lengths = [int(x) for x in args.timing_lengths.split(",") if x]
    print(f"== {mset.name}: timing (median of {args.repeats} runs; decode: "
          f"{args.timing_steps} steps each)", flush=True)
    timing(rows, mset, models, hf, lengths, args.timing_steps, args.repeats, compiled,
           deadline)
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=REPO / "build" / "gpu-model",
                        help="what build_model.sh wrote")
    parser.add_argument("--sets", default=",".join(SETS),
                        help="the models to run, of " + ", ".join(SETS) + " (those whose "
                             "modules are in --models)")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/snapkv-model-check"),
                        help="where the random-weight checkpoint is written")
    parser.add_argument("--device", choices=("cuda", "local-task"), default="cuda",
                        help="IREE driver: cuda, or local-task (llvm-cpu, the stand-in)")
    parser.add_argument("--torch-device", help="default: cuda with --device cuda, else cpu")
    parser.add_argument("--workers", type=int, help="local-task worker threads")
    parser.add_argument("--steps", type=int, default=8, help="greedy steps checked (--expect)")
    parser.add_argument("--timing-lengths", default="1024,4096")
    parser.add_argument("--timing-steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true", help="no torch.compile column")
    parser.add_argument("--budget", type=float, default=210,
                        help="seconds after which later timing lengths are skipped")
    parser.add_argument("--out", type=Path, help="where model_check.json and "
                                                 "model_report.md go")
    parser.add_argument("--write-random-checkpoint", action="store_true",
                        help="(build machine) write the random-weight checkpoint into "
                             "--scratch, then stop")
    parser.add_argument("--expect", metavar="LENGTHS",
                        help="(build machine) record the CPU pipeline's tokens for these "
                             "check lengths in MODELS/<set>expected.json, then stop")
    args = parser.parse_args(argv)
    start = time.monotonic()
    unknown = [name for name in args.sets.split(",") if name not in SETS]
    if unknown:
        parser.error(f"unknown --sets {', '.join(unknown)}; known: {', '.join(SETS)}")
    sets = [SETS[name] for name in args.sets.split(",")
            if SETS[name].module(args.models, args.device, "full").is_file()]
    if args.write_random_checkpoint:
        print(SETS["smollm2-random"].checkpoint(args.scratch))
        return 0
    if args.expect:
        for mset in sets:
            expect(args.models, mset, [int(x) for x in args.expect.split(",")], args.steps,
                   args.scratch)
        return 0
    if not sets:
        print(f"no modules for {args.sets} in {args.models}: run build_model.sh")
        return 2
    import iree.runtime.version
    import torch
    import transformers

    torch_device = args.torch_device or ("cuda" if args.device == "cuda" else "cpu")
    env = {"python": platform.python_version(), "numpy": np.__version__,
           "torch": torch.__version__, "transformers": transformers.__version__,
           "iree_runtime": iree.runtime.version.VERSION, "driver": args.device,
           "torch_device": torch_device,
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    print("== environment\n  " + json.dumps(env), flush=True)
    if torch_device == "cuda" and not torch.cuda.is_available():
        print("torch sees no CUDA device (--torch-device cpu to compare on the CPU)")
        return 3
    checks, rows, stopped, status = [], [], False, None
    try:
        for mset in sets:
            status = run_set(mset, args, torch_device, start + args.budget, checks, rows)
            if status is not None:
                break
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
    return 1 if failed else status if status is not None else 130 if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
