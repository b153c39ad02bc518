#!/usr/bin/env python3
"""OpenVINO GenAI's KV-cache eviction (``CacheEvictionConfig``, the CPU engine that ships
SnapKV-style eviction inside continuous batching) on the prompts of our evaluation: the anchor
that issue 47's "at C = L/16 and L/32 passkey at least OpenVINO's rate" is measured against.
Run it with the interpreter of the venv ``setup-openvino.sh`` makes, on a prompts file that
``benchmarks/kvpress/prompts.py`` writes (the same token ids ``snapkv eval`` answers):

    python3 benchmarks/kvpress/prompts.py --model smollm2-135m-instruct --task passkey \\
        --lengths 2048 --samples 10 --out /tmp/passkey-2048.json        # main environment
    D=$(python3 -c 'from snapkv import models; print(models.path("smollm2-135m-instruct"))')
    ~/.cache/snapkv/openvino-venv/bin/python benchmarks/anchors/openvino_eviction.py \\
        --model "$D" \\
        --prompts /tmp/passkey-2048.json --budgets 1/4,1/8,1/16,1/32 --json /tmp/ov-evict.json

For each budget C = floor(L * F) a ``ContinuousBatchingPipeline`` on the fp32 IR (exported
once by ``openvino_run.py``'s exporter) runs with ``use_cache_eviction`` and
``CacheEvictionConfig(start_size, recent_size, max_cache_size=C rounded down to whole
32-token blocks, aggregation_mode, snapkv_window_size)``; "full" runs without eviction. Each
prompt's token ids are the request (no re-tokenisation), decoded greedily for its
``max_new_tokens`` and scored like ``benchmarks/kvpress/run.py`` (the answer as a word in the
continuation). OpenVINO scores blocks of 32 tokens shared by a layer's kv heads, summed over
every prompt query (plus a last-``snapkv_window_size``-rows window) and, in decode, further
accumulated; its start and recent blocks are always kept, so the smallest budget it accepts
is start + recent + one block. Prints one row per budget with a 95 % Wilson interval; --json
writes the rows and every prompt's continuation.
"""

import argparse
import json
import os
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kvpress"))
from openvino_run import export  # noqa: E402
from run import contains_word, wilson  # noqa: E402  (kvpress's runner scores the same way)

BLOCK = 32


def pipeline(genai, ir: Path, capacity, args):
    scheduler = genai.SchedulerConfig()
    scheduler.enable_prefix_caching = False
    scheduler.dynamic_split_fuse = True
    scheduler.max_num_batched_tokens = 1 << 16   # one prompt's prefill in one step
    scheduler.cache_size = 1
    if capacity is not None:
        scheduler.use_cache_eviction = True
        scheduler.cache_eviction_config = genai.CacheEvictionConfig(
            args.start, args.recent, capacity, getattr(genai.AggregationMode, args.aggregation),
            apply_rotation=False, snapkv_window_size=args.snapkv_window)
    properties = {"INFERENCE_NUM_THREADS": args.threads}
    if args.precision == "f32":
        properties["INFERENCE_PRECISION_HINT"] = "f32"
    return genai.ContinuousBatchingPipeline(str(ir), scheduler, "CPU", properties)


def answer(genai, ov, pipe, prompt, tokenizer) -> dict:
    config = genai.GenerationConfig()
    config.max_new_tokens = int(prompt["max_new_tokens"])
    config.do_sample = False
    ids = ov.Tensor(__import__("numpy").asarray([prompt["ids"]], dtype="int64"))
    start = time.perf_counter()
    result = pipe.generate([ids], [config])[0]
    seconds = time.perf_counter() - start
    tokens = list(result.m_generation_ids[0])
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    return dict(id=prompt["id"], length=len(prompt["ids"]), continuation=text,
                correct=contains_word(text, prompt["answer"]), seconds=seconds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, type=Path, help="HF checkpoint directory")
    ap.add_argument("--prompts", required=True, type=Path,
                    help="the file benchmarks/kvpress/prompts.py writes")
    ap.add_argument("--budgets", default="1/4,1/8,1/16,1/32",
                    help="fractions F of each prompt's length: max_cache_size = floor(L*F) "
                         "rounded down to 32-token blocks; 'full' is always run")
    ap.add_argument("--start", type=int, default=32, help="start_size (tokens, whole blocks)")
    ap.add_argument("--recent", type=int, default=32, help="recent_size (tokens, whole blocks)")
    ap.add_argument("--aggregation", choices=("SUM", "NORM_SUM"), default="NORM_SUM")
    ap.add_argument("--snapkv-window", type=int, default=8, help="snapkv_window_size")
    ap.add_argument("--precision", choices=("default", "f32"), default="f32",
                    help="f32 (our precision) or the plugin's default (bf16 where the CPU has it)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--limit", type=int, help="only the first N prompts")
    ap.add_argument("--json", type=Path, help="write the rows and continuations here")
    args = ap.parse_args(argv)
    for size, name in ((args.start, "--start"), (args.recent, "--recent")):
        if size <= 0 or size % BLOCK:
            ap.error(f"{name} must be a positive multiple of {BLOCK}, got {size}")
    try:
        budgets = [Fraction(b) for b in args.budgets.split(",") if b.strip()]
    except ValueError as error:
        ap.error(f"--budgets: {error}")
    if any(not 0 < b < 1 for b in budgets):
        ap.error(f"--budgets must be fractions in (0, 1), got {args.budgets}")
    prompts = json.loads(args.prompts.read_text())[:args.limit]

    import openvino as ov
    import openvino_genai as genai
    from transformers import AutoTokenizer

    ir = export(args.model, "fp32")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    rows, details = [], []
    for budget in [None, *budgets]:
        # One pipeline per (budget, prompt length): max_cache_size is a token count.
        by_length = {}
        for prompt in prompts:
            by_length.setdefault(len(prompt["ids"]), []).append(prompt)
        for length, group in sorted(by_length.items()):
            capacity = None if budget is None else int(length * budget) // BLOCK * BLOCK
            label = "full" if budget is None else f"{budget.numerator}/{budget.denominator}"
            if capacity is not None and capacity <= args.start + args.recent:
                print(f"skip {label} at L={length}: max_cache_size {capacity} leaves no block "
                      f"between start {args.start} and recent {args.recent}", file=sys.stderr)
                continue
            pipe = pipeline(genai, ir, capacity, args)
            results = [answer(genai, ov, pipe, p, tokenizer) for p in group]
            del pipe
            k = sum(r["correct"] for r in results)
            low, high = wilson(k, len(results))
            rows.append(dict(method="openvino-eviction" if capacity else "full", budget=label,
                             length=length, max_cache_size=capacity or length, n=len(results),
                             correct=k, accuracy=k / len(results), interval=[low, high],
                             seconds=statistics.median(r["seconds"] for r in results)))
            details += [dict(r, budget=label) for r in results]
            print(f"{label:>5} L={length:>5} C={capacity or length:>5}: {k}/{len(results)} "
                  f"[{low:.2f}, {high:.2f}]", flush=True)
    if args.json:
        args.json.write_text(json.dumps(dict(
            openvino_genai=genai.__version__, start_size=args.start, recent_size=args.recent,
            aggregation=args.aggregation, snapkv_window_size=args.snapkv_window,
            precision=args.precision, threads=args.threads, rows=rows, prompts=details),
            indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
