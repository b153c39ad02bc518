#!/usr/bin/env python3
"""OpenVINO GenAI's continuous batching with cache eviction on bench_serve's prompts: the
anchor row ``openvino`` of ``benchmarks/cpu/bench_serve.py``, which runs this file with the
interpreter of the venv ``setup-openvino.sh`` makes (it needs no other part of the repository
but ``openvino_run.py``'s exporter):

    ~/.cache/snapkv/openvino-venv/bin/python benchmarks/anchors/openvino_serve.py \\
        --model CHECKPOINT_DIR --requests REQUESTS.json

REQUESTS.json: ``{"ids": [[token ids], ...], "max_tokens": N, "capacity": C,
"cache_budget_mb": MB, "threads": T}``. Every request is added to one
``ContinuousBatchingPipeline`` (int8-weight IR, the plugin's default precision: OpenVINO's
fastest row in the anchors) at once and the pipeline is stepped until all finish. The KV cache
is held to f16 (``KV_CACHE_PRECISION``) so that the budget is exact: ``num_kv_blocks`` =
budget / (32 tokens x layers x 2 x kv heads x head dim x 2 bytes). Eviction keeps
``max_cache_size`` = C rounded down to whole 32-token blocks per sequence, 32 start and 32
recent tokens, NORM_SUM, ``snapkv_window_size`` 8 (as ``openvino_eviction.py``). Prints one
JSON object: each request's tokens and time to first token (from the start, queueing
included), the wall time, the most requests scheduled in one step, peak RSS.
"""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from openvino_run import export  # noqa: E402

BLOCK = 32


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, type=Path, help="HF checkpoint directory")
    ap.add_argument("--requests", required=True, type=Path, help="the requests (see above)")
    args = ap.parse_args(argv)
    spec = json.loads(args.requests.read_text())
    config = json.loads((args.model / "config.json").read_text())
    heads = config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    block_bytes = BLOCK * config["num_hidden_layers"] * 2 * heads * head_dim * 2
    blocks = int(spec["cache_budget_mb"] * 2 ** 20 // block_bytes)
    capacity = int(spec["capacity"]) // BLOCK * BLOCK
    if capacity <= 2 * BLOCK:
        raise SystemExit(f"capacity {spec['capacity']} leaves no block between 32 start and "
                         f"32 recent tokens")

    import numpy as np
    import openvino as ov
    import openvino_genai as genai

    scheduler = genai.SchedulerConfig()
    scheduler.enable_prefix_caching = False
    scheduler.dynamic_split_fuse = True
    scheduler.num_kv_blocks = blocks
    scheduler.use_cache_eviction = True
    scheduler.cache_eviction_config = genai.CacheEvictionConfig(
        BLOCK, BLOCK, capacity, genai.AggregationMode.NORM_SUM, apply_rotation=False,
        snapkv_window_size=8)
    properties = {"INFERENCE_NUM_THREADS": int(spec["threads"]), "KV_CACHE_PRECISION": "f16"}
    pipe = genai.ContinuousBatchingPipeline(str(export(args.model, "int8")), scheduler, "CPU",
                                            properties)
    generation = genai.GenerationConfig()
    generation.max_new_tokens = int(spec["max_tokens"])
    generation.min_new_tokens = int(spec["max_tokens"])
    generation.do_sample = False

    start = time.perf_counter()
    handles = [pipe.add_request(i, ov.Tensor(np.asarray([ids], dtype=np.int64)), generation)
               for i, ids in enumerate(spec["ids"])]
    tokens = [[] for _ in handles]
    ttft = [None] * len(handles)
    peak_scheduled = 0
    while pipe.has_non_finished_requests():
        pipe.step()
        peak_scheduled = max(peak_scheduled, pipe.get_metrics().scheduled_requests)
        now = time.perf_counter() - start
        for i, handle in enumerate(handles):
            if handle.can_read():
                for output in handle.read().values():
                    tokens[i] += list(output.generated_ids)
                if ttft[i] is None and tokens[i]:
                    ttft[i] = now
    wall = time.perf_counter() - start
    for i, handle in enumerate(handles):  # what the last step left unread
        if handle.can_read():
            for output in handle.read().values():
                tokens[i] += list(output.generated_ids)
    print(json.dumps(dict(
        tokens=tokens, ttft_s=ttft, wall_s=wall, peak_scheduled=peak_scheduled,
        kv_blocks=blocks, kv_bytes=blocks * block_bytes, max_cache_size=capacity,
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        label=f"OpenVINO GenAI {genai.__version__} ContinuousBatchingPipeline, int8-weight IR, "
              f"default precision, KV f16, {blocks} blocks of {BLOCK}, cache eviction "
              f"max_cache_size {capacity} (NORM_SUM, 32 start + 32 recent), "
              f"{spec['threads']} threads")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
