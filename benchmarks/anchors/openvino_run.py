#!/usr/bin/env python3
"""One OpenVINO GenAI measurement, run by the interpreter of the venv that
``benchmarks/anchors/setup-openvino.sh`` makes (``bench_model.py``'s ``openvino-*`` rows).

Exports the HF checkpoint to OpenVINO IR once (``optimum-cli export openvino``, fp32 or int8
weights, cached under ``~/.cache/snapkv/openvino``), then runs ``openvino_genai.LLMPipeline``
on the CPU with ``--threads`` inference threads: a warm-up generation on another prompt (the
pipeline caches prefixes, so the timed prompt must be new to it), then ``--runs`` greedy
generations of ``--steps`` + 1 tokens on the prompt text, each on a fresh pipeline state.
Prints one JSON line: the median time to the first token, the median time per output token
after it, the precision the plugin compiled in (``INFERENCE_PRECISION_HINT`` read back), the
KV cache precision, the prompt's token count and the process's peak RSS.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path


def peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def export(checkpoint: Path, weights: str) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "snapkv"
    out = cache / "openvino" / f"{checkpoint.name}-{weights}"
    if (out / "openvino_model.xml").exists():
        return out
    staged = out.with_name(out.name + ".tmp")
    shutil.rmtree(staged, ignore_errors=True)
    cli = Path(sys.executable).with_name("optimum-cli")
    done = subprocess.run([str(cli), "export", "openvino", "--model", str(checkpoint), "--task",
                           "text-generation-with-past", "--weight-format", weights, str(staged)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"optimum-cli export failed ({done.returncode}):\n{tail}")
    staged.replace(out)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="HF checkpoint directory")
    ap.add_argument("--weights", choices=("fp32", "int8"), default="fp32")
    ap.add_argument("--precision", choices=("default", "f32"), default="default",
                    help="the plugin's default (bf16 where the CPU has it) or held to f32")
    ap.add_argument("--prompt-file", required=True)
    ap.add_argument("--warmup-file", required=True, help="another prompt of the same length")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()

    import openvino_genai as genai

    ir = export(Path(args.checkpoint), args.weights)
    properties = {"INFERENCE_NUM_THREADS": args.threads}
    if args.precision == "f32":
        properties["INFERENCE_PRECISION_HINT"] = "f32"
    config = genai.GenerationConfig()
    config.max_new_tokens = config.min_new_tokens = args.steps + 1
    config.ignore_eos = True
    config.apply_chat_template = False

    prompt = Path(args.prompt_file).read_text()
    ttft, tpot, tokens = [], [], None
    compiled = kv = None
    for _ in range(args.runs):
        # A fresh pipeline per run: nothing of the previous run's prompt is cached.
        pipe = genai.LLMPipeline(str(ir), "CPU", **properties)
        pipe.generate([Path(args.warmup_file).read_text()], config)
        # A list in, DecodedResults out (a string in gives a string back, without metrics).
        result = pipe.generate([prompt], config)
        metrics = result.perf_metrics
        ttft.append(metrics.get_ttft().mean / 1e3)
        tpot.append(metrics.get_tpot().mean)
        tokens = int(metrics.get_num_input_tokens())
        if compiled is None:
            import openvino as ov

            core = ov.Core()
            compiled = core.get_property("CPU", "INFERENCE_PRECISION_HINT").to_string()
            if args.precision == "f32":
                compiled = "f32"
            kv = core.get_property("CPU", "KV_CACHE_PRECISION").to_string()
        del pipe
    print(json.dumps(dict(prefill_s=statistics.median(ttft), decode_ms=statistics.median(tpot),
                          tokens=tokens, compute=compiled, kv_cache=kv,
                          peak_rss=peak_rss())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
