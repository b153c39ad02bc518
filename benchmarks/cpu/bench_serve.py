#!/usr/bin/env python3
"""Serving many passkey prompts at one cache budget: the full cache vs SnapKV (C = L/8) in
:class:`snapkv.Engine` (continuous batching, admission by ``--cache-budget``, batched
decode), against HF transformers' padded batch ``generate`` at the same budget.

Prompts: ``--prompts`` (default 16) passkey prompts (:mod:`snapkv.tasks.text`) of the
lengths ``--lengths`` (default 1024,2048,3072,4096, cycled), tokenised by the model's own
tokenizer; each generates ``--max-tokens`` tokens (default 32) greedily.

Rows, each run in its own subprocess (so that its peak RSS is its own), in the order
``--order`` (alternate with ``--repeat`` to see the noise):

* **full**: the engine with the full cache (``--full-cache``), f32;
* **snapkv**: the engine with SnapKV at ``C = --capacity`` (default: the mean prompt length
  / 8), ``W = --window``, pooling kernel 15, ``gqa mean`` (the CLI's defaults), f32;
* **snapkv-bf16**: the same in bf16 (weights, activations and K/V: ``--dtype bf16``, the
  fastest precision measured for decode; a cache row is half the bytes);
* **hf**: ``transformers`` ``model.generate`` on left-padded batches, as many prompts per batch
  as their padded full cache (``B x (longest + max_tokens)`` rows) fits in the budget, in
  prompt order; f32, PyTorch eager mode with HF's attention implementation
  ``--hf-attention`` (default ``sdpa``, HF's own default), greedy;
* **hf-bf16**: the same in bf16;
* **openvino** (not in the default rows: it needs the venv ``benchmarks/anchors/setup-openvino.sh``
  makes, ``$SNAPKV_OPENVINO_VENV`` to point elsewhere): OpenVINO GenAI's
  ``ContinuousBatchingPipeline`` with cache eviction at ``max_cache_size`` = C (whole 32-token
  blocks) and a KV cache of ``--cache-budget`` held to f16
  (``benchmarks/anchors/openvino_serve.py``): every prompt added at once, the pipeline stepped
  until all finish; sequences at once = the most it scheduled in one step, peak K/V = the
  pool it allocates, decode tokens/s not measured (-).

The engine rows decode every running sequence in one compiled call a step (``@decode_batch``
for up to ``--decode-batch`` sequences; fewer take the smallest exported step that fits).

Columns: sequences run at once (peak), aggregate tokens/s (generated tokens / wall time,
prefill included), decode tokens/s (decode-step tokens / decode time; HF: the tokens
after each batch's first / the time after its prefill),
compiled decode calls and decode tokens (``--decode-batch N`` sequences per call), time
to first token (median and max over the prompts, from the start of the run: queueing
included), peak K/V bytes held, peak RSS, passkeys found, and whether each sequence's tokens
equal its single-sequence run (``--check``; engine rows). Every number is measured; none is
a pass/fail threshold. On a shared machine the times are contended: say so when recording.

    python benchmarks/cpu/bench_serve.py                                   # SmolLM2, 16 prompts
    python benchmarks/cpu/bench_serve.py --prompts 4 --lengths 256,512 --max-tokens 8 \\
        --cache-budget 64 --rows snapkv,full                               # a quick look
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

ROWS = ("full", "snapkv", "snapkv-bf16", "hf", "hf-bf16", "openvino")
ANCHOR_DIR = REPO / "benchmarks" / "anchors"


def prompts(args, tokenizer_dir):
    from snapkv import tokenizer
    from snapkv.tasks import text

    tok = tokenizer.load(tokenizer_dir)
    lengths = [args.lengths[i % len(args.lengths)] for i in range(args.prompts)]
    return [text.generate("passkey", L, args.seed, i, tok) for i, L in enumerate(lengths)]


def checkpoint_dir(model: str) -> Path:
    from snapkv import models

    return Path(models.resolve(model, log=lambda m: print(m, file=sys.stderr)))


def run_engine(args, row, samples):
    from snapkv import hf
    from snapkv.serving import SamplingParams, load_engine
    from snapkv.tasks import text

    compaction = None if row == "full" else hf.Compaction(window=args.window,
                                                          capacity=args.capacity)
    engine = load_engine(checkpoint_dir(args.model), compaction,
                         cache_budget_mb=args.cache_budget, max_queue=len(samples),
                         per_request=False, decode_batch=args.decode_batch,
                         dtype="bf16" if row.endswith("-bf16") else None)
    params = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True)
    engine.reset_stats()
    done = engine.generate([s.ids for s in samples], params)
    stats = engine.stats.to_json()
    ttft = [d.ttft_s for d in done]
    same = None
    if args.check:
        same = sum(d.tokens == engine.model.generate(np.asarray(s.ids)[None],
                                                     args.max_tokens - 1)["tokens"]
                   for s, d in zip(samples, done))
    return dict(row=row, sequences=len(done), peak_concurrent=stats["peak_concurrent_sequences"],
                tokens=stats["generated_tokens"], wall_s=stats["wall_s"],
                tokens_per_s=stats["tokens_per_s"],
                decode_tokens_per_s=stats["decode_tokens_per_s"],
                decode_calls=stats["decode_calls"], decode_tokens=stats["decode_tokens"],
                ttft_median_s=float(np.median(ttft)), ttft_max_s=float(max(ttft)),
                peak_cache_bytes=stats["peak_cache_bytes"], peak_rss_bytes=stats["peak_rss_bytes"],
                found=sum(text.correct(s, d.text or "") for s, d in zip(samples, done)),
                same_as_single=same, label=f"{engine.served.label}, decode steps of "
                                           f"{engine.model.batch_sizes or 1} sequences")


def run_hf(args, row, samples):
    import resource

    import torch
    import transformers

    class FirstToken(transformers.LogitsProcessor):
        """Notes when the first token's logits exist (prefill done)."""
        at = None

        def __call__(self, input_ids, scores):
            if self.at is None:
                self.at = time.perf_counter()
            return scores

    from snapkv.tasks import text

    directory = checkpoint_dir(args.model)
    tok = transformers.AutoTokenizer.from_pretrained(str(directory))
    dtype = torch.bfloat16 if row.endswith("-bf16") else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(directory), dtype=dtype, attn_implementation=args.hf_attention)
    model.eval()
    config = model.config
    heads = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    row_bytes = 2 * config.num_hidden_layers * heads * head_dim * dtype.itemsize
    budget = args.cache_budget * 2 ** 20
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    batches, current = [], []
    for sample in samples:
        trial = current + [sample]
        rows = max(s.length for s in trial) + args.max_tokens
        if current and len(trial) * rows * row_bytes > budget:
            batches.append(current)
            current = [sample]
        else:
            current = trial
    batches.append(current)
    start = time.perf_counter()
    ttft, outputs, peak_cache, tokens = [], [], 0, 0
    decode_tokens, decode_s = 0, 0.0  # after each batch's first token
    with torch.inference_mode():
        for batch in batches:
            longest = max(s.length for s in batch)
            ids = torch.full((len(batch), longest), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), longest), dtype=torch.long)
            for i, s in enumerate(batch):  # left padding
                ids[i, longest - s.length:] = torch.as_tensor(s.ids)
                mask[i, longest - s.length:] = 1
            first = FirstToken()
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=args.max_tokens, min_new_tokens=args.max_tokens,
                                 pad_token_id=pad,
                                 logits_processor=transformers.LogitsProcessorList(
                                     [first]))
            decode_s += time.perf_counter() - first.at
            decode_tokens += (out.shape[1] - longest - 1) * len(batch)
            ttft += [first.at - start] * len(batch)
            peak_cache = max(peak_cache, len(batch) * (longest + args.max_tokens) * row_bytes)
            for i in range(len(batch)):
                new = out[i, longest:].tolist()
                tokens += len(new)
                outputs.append(tok.decode(new, skip_special_tokens=True))
    wall = time.perf_counter() - start
    return dict(row=row, sequences=len(samples), peak_concurrent=max(len(b) for b in batches),
                tokens=tokens, wall_s=wall, tokens_per_s=tokens / wall,
                decode_tokens_per_s=decode_tokens / decode_s if decode_s > 0 else None,
                ttft_median_s=float(np.median(ttft)), ttft_max_s=float(max(ttft)),
                peak_cache_bytes=peak_cache,
                peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                found=sum(text.correct(s, o) for s, o in zip(samples, outputs)),
                same_as_single=None, label=f"transformers {transformers.__version__} generate "
                                           f"({model.config._attn_implementation}, {dtype}), "
                                           f"torch {torch.__version__}, {torch.get_num_threads()} "
                                           f"threads")


def run_openvino(args, samples):
    import tempfile

    from snapkv import tokenizer
    from snapkv.tasks import text

    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "snapkv"
    venv = Path(os.environ.get("SNAPKV_OPENVINO_VENV") or root / "openvino-venv")
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python} is missing: run benchmarks/anchors/setup-openvino.sh")
    directory = checkpoint_dir(args.model)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as requests:
        json.dump(dict(ids=[[int(i) for i in s.ids] for s in samples],
                       max_tokens=args.max_tokens, capacity=args.capacity,
                       cache_budget_mb=args.cache_budget, threads=os.cpu_count()), requests)
        requests.flush()
        done = subprocess.run([str(python), str(ANCHOR_DIR / "openvino_serve.py"), "--model",
                               str(directory), "--requests", requests.name],
                              capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"openvino_serve.py failed:\n{done.stderr[-3000:]}")
    ov = json.loads(done.stdout.strip().splitlines()[-1])
    tokens = sum(len(t) for t in ov["tokens"])
    found = sum(text.correct(s, tokenizer.decode(directory, t))
                for s, t in zip(samples, ov["tokens"]))
    return dict(row="openvino", sequences=len(samples), peak_concurrent=ov["peak_scheduled"],
                tokens=tokens, wall_s=ov["wall_s"], tokens_per_s=tokens / ov["wall_s"],
                decode_tokens_per_s=None, ttft_median_s=float(np.median(ov["ttft_s"])),
                ttft_max_s=float(max(ov["ttft_s"])),
                peak_cache_bytes=ov["kv_bytes"],  # the pool it allocates
                peak_rss_bytes=ov["peak_rss_bytes"], found=found, same_as_single=None,
                label=ov["label"])


def child(args):
    samples = prompts(args, checkpoint_dir(args.model))
    if args.child == "openvino":
        result = run_openvino(args, samples)
    elif args.child.startswith("hf"):
        result = run_hf(args, args.child, samples)
    else:
        result = run_engine(args, args.child, samples)
    result["lengths"] = [s.length for s in samples]
    print(json.dumps(result))
    return 0


def table(results, args):
    lines = ["| row | sequences at once | tokens/s (aggregate) | decode tokens/s | decode "
             "calls / tokens | TTFT median / max (s) | peak K/V (MiB) | peak RSS (MiB) | "
             "passkeys found | same as single run |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        rate = "-" if r["decode_tokens_per_s"] is None else f"{r['decode_tokens_per_s']:.1f}"
        same = "-" if r["same_as_single"] is None else f"{r['same_as_single']}/{r['sequences']}"
        calls = f"{r['decode_calls']} / {r['decode_tokens']}" if "decode_calls" in r else "-"
        lines.append(f"| {r['row']} | {r['peak_concurrent']} | {r['tokens_per_s']:.1f} | {rate} | "
                     f"{calls} | "
                     f"{r['ttft_median_s']:.2f} / {r['ttft_max_s']:.2f} | "
                     f"{r['peak_cache_bytes'] / 2**20:.1f} | {r['peak_rss_bytes'] / 2**20:.0f} | "
                     f"{r['found']}/{r['sequences']} | {same} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct",
                        help="a known model or a checkpoint directory with a tokenizer")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1024, 2048, 3072, 4096])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--cache-budget", type=float, default=256.0, metavar="MB",
                        help="MiB of K/V for every row (SmolLM2's full cache of a 4K-token "
                             "prompt holds about 190)")
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--decode-batch", type=int, default=8, metavar="N",
                        help="engine rows: sequences per compiled decode call at most (fewer "
                             "take the smallest exported step that fits; 0: one call per "
                             "sequence)")
    parser.add_argument("--capacity", type=int,
                        help="SnapKV's C (default: the mean prompt length / 8)")
    parser.add_argument("--hf-attention", choices=("sdpa", "eager"), default="sdpa",
                        help="HF rows: the attention implementation (default sdpa, HF's)")
    parser.add_argument("--rows", default=",".join(ROWS[:-1]),
                        help=f"rows to run, in order ({', '.join(ROWS)})")
    parser.add_argument("--repeat", type=int, default=1, help="run the rows this many times, "
                                                              "alternating")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true",
                        help="compare every engine sequence with its single-sequence run")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", choices=ROWS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.capacity is None:
        args.capacity = max(args.window + 1,
                            int(np.mean([args.lengths[i % len(args.lengths)]
                                         for i in range(args.prompts)])) // 8)
    if args.child:
        return child(args)
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    results = []
    passthrough = ["--model", args.model, "--prompts", str(args.prompts), "--lengths",
                   ",".join(map(str, args.lengths)), "--max-tokens", str(args.max_tokens),
                   "--cache-budget", str(args.cache_budget), "--window", str(args.window),
                   "--capacity", str(args.capacity), "--seed", str(args.seed),
                   "--decode-batch", str(args.decode_batch),
                   "--hf-attention", args.hf_attention] + \
        (["--check"] if args.check else [])
    for _ in range(args.repeat):
        for row in rows:
            print(f"running {row} ...", file=sys.stderr, flush=True)
            done = subprocess.run([sys.executable, __file__, *passthrough, "--child", row],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                print(f"{row} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
                return 1
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    lengths = results[0]["lengths"]
    print(f"bench_serve: {args.model}, {args.prompts} passkey prompts of {min(lengths)}-"
          f"{max(lengths)} tokens, {args.max_tokens} tokens each, cache budget "
          f"{args.cache_budget:g} MiB; SnapKV W={args.window} C={args.capacity}; decode "
          f"batch {args.decode_batch}")
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print()
    print(table(results, args))
    print()
    for r in results:
        print(f"* {r['row']}: {r['label']}; wall {r['wall_s']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
