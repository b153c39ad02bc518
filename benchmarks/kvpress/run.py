"""NVIDIA's kvpress (PyPI, pinned by setup.sh) run on the prompts of our evaluation: the anchor
that our SnapKV is compared with. Run it with the venv's interpreter that setup.sh makes:

    bash benchmarks/kvpress/setup.sh
    ~/.cache/snapkv/kvpress-venv/bin/python benchmarks/kvpress/run.py \\
        --model /tmp/smollm2 --prompts prompts.json --presses full,snapkv --ratios 0.5 \\
        --threads 2 --json /tmp/kvpress.json

For each prompt and each (press, ratio): the press is applied to the WHOLE prompt (the
question included, as our SnapKV's observation window holds the question too): one forward
over the prompt's ids inside ``with press(model):`` fills a ``DynamicCache`` and kvpress's
forward hooks compress it layer by layer; then ``max_new_tokens`` tokens are decoded greedily
outside the press context, one at a time, passing the cache and the true positions
(``L, L+1, ...``, as kvpress's own pipeline does: the compressed cache is shorter than ``L``).
Decoding stops early at the model's EOS token. The text is scored with
``answer in continuation`` at word boundaries (the answer not preceded or followed by a letter
or digit). README.md beside this file says what each press keeps.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from snapkv.evaluation.results import wilson  # noqa: E402 (pure Python + numpy: runs in the kvpress venv)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PRESSES = ("full", "snapkv", "streaming", "pyramid", "adakv", "chunkkv", "keydiff",
           "expected", "kvzip")
WINDOWED = ("snapkv", "pyramid", "adakv", "chunkkv")
CHUNKKV_LENGTH = 10  # ChunkKV's chunk (the paper's default for its LongBench runs)


def contains_word(text: str, answer: str) -> bool:
    """True when ``answer`` occurs in ``text`` with no letter or digit right before or after."""
    if not answer:
        return False
    start = text.find(answer)
    while start >= 0:
        end = start + len(answer)
        before = text[start - 1] if start > 0 else ""
        after = text[end] if end < len(text) else ""
        if not before.isalnum() and not after.isalnum():
            return True
        start = text.find(answer, start + 1)
    return False


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, type=Path,
                   help="a HuggingFace save_pretrained checkpoint directory (Llama family)")
    p.add_argument("--prompts", required=True, type=Path,
                   help='JSON list of {"id", "ids", "text", "answer", "max_new_tokens"}')
    p.add_argument("--presses", default="full,snapkv",
                   help=f"comma-separated, from {','.join(PRESSES)} (default full,snapkv)")
    p.add_argument("--ratios", default="0.5,0.75,0.875",
                   help="kvpress compression ratios: the fraction of positions removed")
    p.add_argument("--window", type=int, default=None,
                   help="window_size of snapkv/pyramid/adakv (default: kvpress's own, 64)")
    p.add_argument("--kernel", type=int, default=None,
                   help="kernel_size of the pooling (default: kvpress's own, 5)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    p.add_argument("--json", type=Path, default=None, help="write the rows here")
    return p.parse_args(argv)


def build_press(name: str, ratio: float, window, kernel):
    """The kvpress press object for ``name`` (None for ``full``) and the window it uses."""
    import kvpress

    if name == "full":
        return None, None
    if name == "streaming":
        return kvpress.StreamingLLMPress(compression_ratio=ratio), None
    options = {}
    if window is not None:
        options["window_size"] = window
    if kernel is not None:
        options["kernel_size"] = kernel
    if name == "snapkv":
        press = kvpress.SnapKVPress(compression_ratio=ratio, **options)
        return press, press.window_size
    if name == "pyramid":
        press = kvpress.PyramidKVPress(compression_ratio=ratio, **options)
        return press, press.window_size
    if name == "adakv":
        inner = kvpress.SnapKVPress(compression_ratio=ratio, **options)
        return kvpress.AdaKVPress(inner), inner.window_size
    if name == "chunkkv":  # whole chunks of SnapKV scores, one ranking per layer
        inner = kvpress.SnapKVPress(compression_ratio=ratio, **options)
        return kvpress.ChunkKVPress(inner, chunk_length=CHUNKKV_LENGTH), inner.window_size
    # The question-agnostic presses: keys' distinctness, attention expected from the
    # queries' statistics, and KVzip's context reconstruction.
    if name == "keydiff":
        return kvpress.KeyDiffPress(compression_ratio=ratio), None
    if name == "expected":
        return kvpress.ExpectedAttentionPress(compression_ratio=ratio), None
    if name == "kvzip":
        return kvpress.KVzipPress(compression_ratio=ratio), None
    raise SystemExit(f"run.py: unknown press {name!r} (known: {', '.join(PRESSES)})")


def cache_stats(model, cache) -> dict:
    """Bytes the cache holds after prefill, and how many of its positions are masked.

    kvpress's ScorerPress, StreamingLLMPress and PyramidKVPress remove rows (the cache
    tensors get shorter); AdaKVPress removes nothing: it leaves the full cache and records
    per layer which (head, position) pairs decoding must ignore (``masked_key_indices``,
    replaced by a fake key at each decode step, kvpress/attention_patch.py). ``kv_bytes``
    is what the cache holds; ``kv_bytes_effective`` leaves the masked rows out."""
    held = 0
    masked_bytes = 0
    positions = 0
    heads = 0
    layers = model.model.layers
    for index, layer in enumerate(cache.layers):
        keys, values = layer.keys, layer.values
        held += keys.nbytes + values.nbytes
        b, h, s, d = keys.shape
        masked = getattr(layers[index].self_attn, "masked_key_indices", None)
        n_masked = 0 if masked is None else int(masked[0].numel())
        # one masked (head, position) pair hides one key row and one value row
        masked_bytes += n_masked * d * (keys.element_size() + values.element_size())
        positions += b * h * s - n_masked
        heads += b * h
    return {"kv_bytes": held, "kv_bytes_effective": held - masked_bytes,
            "kv_masked": masked_bytes > 0,
            "kept_per_head": positions / heads if heads else 0.0}


def run_one(model, tokenizer, press, prompt, torch, DynamicCache) -> dict:
    ids = torch.tensor([prompt["ids"]], dtype=torch.long)
    length = ids.shape[1]
    steps = int(prompt["max_new_tokens"])
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])

    # Clear what a previous AdaKV run left on the attention modules (kvpress's patched
    # attention also resets it at every prefill).
    for layer in model.model.layers:
        layer.self_attn.masked_key_indices = None

    cache = DynamicCache()
    with torch.inference_mode():
        start = time.perf_counter()
        with press(model) if press is not None else contextlib.nullcontext():
            out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        prefill_s = time.perf_counter() - start
        stats = cache_stats(model, cache)

        token = int(out.logits[0, -1].argmax())
        generated = [token]
        step_ms = []
        for i in range(steps - 1):
            if token in eos:
                break
            start = time.perf_counter()
            out = model(input_ids=torch.tensor([[token]]), past_key_values=cache,
                        position_ids=torch.tensor([[length + i]]), use_cache=True)
            token = int(out.logits[0, -1].argmax())
            step_ms.append((time.perf_counter() - start) * 1000)
            generated.append(token)
    continuation = tokenizer.decode(generated, skip_special_tokens=True)
    return {"length": length, "continuation": continuation,
            "correct": contains_word(continuation, prompt["answer"]),
            "new_tokens": len(generated), "prefill_s": prefill_s,
            "decode_ms": statistics.median(step_ms) if step_ms else None,
            **stats,
            "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def fmt(value, spec):
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else format(value, spec)


def summarise(rows) -> list[dict]:
    groups = {}
    for row in rows:
        groups.setdefault((row["press"], row["ratio"], row["window"]), []).append(row)
    table = []
    for (press, ratio, window), group in groups.items():
        n = len(group)
        k = sum(r["correct"] for r in group)
        lo, hi = wilson(k, n)
        decode = [r["decode_ms"] for r in group if r["decode_ms"] is not None]
        table.append({
            "press": press, "ratio": ratio, "window": window, "n": n, "correct": k,
            "accuracy": k / n, "wilson_low": lo, "wilson_high": hi,
            "prefill_s": statistics.median(r["prefill_s"] for r in group),
            "decode_ms": statistics.median(decode) if decode else None,
            "kv_bytes": statistics.median(r["kv_bytes"] for r in group),
            "kv_bytes_effective": statistics.median(r["kv_bytes_effective"] for r in group),
            "kept_per_head": statistics.median(r["kept_per_head"] for r in group),
            "rss_peak_mb": max(r["rss_peak_mb"] for r in group),
        })
    return table


def print_table(table):
    head = (f"{'press':<10} {'ratio':>6} {'window':>6} {'n':>4} {'acc':>6} {'95% Wilson':>15} "
            f"{'prefill s':>9} {'decode ms':>9} {'kv bytes':>11} {'kv effective':>12} "
            f"{'kept/head':>9} {'peak RSS MB':>11}")
    print(head)
    print("-" * len(head))
    for t in table:
        interval = f"[{fmt(t['wilson_low'], '.3f')}, {fmt(t['wilson_high'], '.3f')}]"
        print(f"{t['press']:<10} {fmt(t['ratio'], '.3f'):>6} {fmt(t['window'], 'd'):>6} "
              f"{t['n']:>4} {t['accuracy']:>6.3f} "
              f"{interval:>15} "
              f"{t['prefill_s']:>9.3f} {fmt(t['decode_ms'], '.2f'):>9} {t['kv_bytes']:>11.0f} "
              f"{t['kv_bytes_effective']:>12.0f} {t['kept_per_head']:>9.1f} "
              f"{t['rss_peak_mb']:>11.0f}")


def main(argv=None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.presses.split(",") if n.strip()]
    for name in names:
        if name not in PRESSES:
            raise SystemExit(f"run.py: unknown press {name!r} (known: {', '.join(PRESSES)})")
    ratios = [float(r) for r in args.ratios.split(",") if r.strip()]
    for r in ratios:
        if not 0 < r < 1:
            raise SystemExit(f"run.py: a compression ratio must be in (0, 1), not {r}")
    prompts = json.loads(args.prompts.read_text())
    if args.limit is not None:
        prompts = prompts[:args.limit]
    for prompt in prompts:
        missing = {"id", "ids", "answer", "max_new_tokens"} - set(prompt)
        if missing:
            raise SystemExit(f"run.py: prompt {prompt.get('id')!r} lacks {sorted(missing)}")

    from importlib.metadata import version

    import kvpress  # importing it patches transformers' attention functions (AdaKV)
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if not isinstance(model, kvpress.presses.base_press.SUPPORTED_MODELS):
        print(f"run.py: warning: {type(model).__name__} is not among kvpress's tested models",
              file=sys.stderr)

    defaults = kvpress.SnapKVPress()
    window = args.window if args.window is not None else defaults.window_size
    kernel = args.kernel if args.kernel is not None else defaults.kernel_size
    config = model.config
    print(f"kvpress {version('kvpress')}, transformers {transformers.__version__}, "
          f"torch {torch.__version__}, {args.threads} threads, float32, sdpa attention")
    print(f"model {args.model}: {type(model).__name__}, {config.num_hidden_layers} layers, "
          f"{config.num_attention_heads} query heads, {config.num_key_value_heads} kv heads, "
          f"head_dim {getattr(config, 'head_dim', None)}")
    origin = {True: "given", False: "kvpress default"}
    print(f"window_size {window} ({origin[args.window is not None]}), "
          f"kernel_size {kernel} ({origin[args.kernel is not None]})"
          f"; presses {','.join(names)}; ratios {','.join(map(str, ratios))}; "
          f"{len(prompts)} prompts")

    jobs = []
    for name in names:
        for ratio in ([None] if name == "full" else ratios):
            jobs.append((name, ratio))

    # One untimed forward first, so that the first prompt's prefill does not pay for warm-up.
    with torch.inference_mode():
        model(input_ids=torch.tensor([prompts[0]["ids"][:64]]), past_key_values=DynamicCache())

    rows = []
    for name, ratio in jobs:
        for prompt in prompts:
            press, press_window = build_press(name, ratio or 0.0, args.window, args.kernel)
            length = len(prompt["ids"])
            if press_window is not None and length <= press_window:
                print(f"skip {name} ratio {ratio} prompt {prompt['id']}: length {length} <= "
                      f"window {press_window}", file=sys.stderr)
                continue
            if name in WINDOWED and ratio is not None and int(length * (1 - ratio)) <= press_window:
                print(f"warning: {name} ratio {ratio} prompt {prompt['id']}: keeps "
                      f"{int(length * (1 - ratio))} <= window {press_window} positions, so only "
                      f"part of the window", file=sys.stderr)
            result = run_one(model, tokenizer, press, prompt, torch, DynamicCache)
            row = {"press": name, "ratio": ratio, "window": press_window,
                   "prompt_id": prompt["id"], **result}
            rows.append(row)
            print(f"{name:<9} ratio {fmt(ratio, '.3f'):>5} {prompt['id']}: L={length} "
                  f"kept/head={row['kept_per_head']:.1f} "
                  f"{'ok  ' if row['correct'] else 'MISS'} prefill {row['prefill_s']:.2f}s "
                  f"decode {fmt(row['decode_ms'], '.1f')}ms "
                  f"{row['continuation'][:60]!r}", flush=True)
            if args.json is not None:  # after every row: a long run stopped early keeps them
                args.json.write_text(json.dumps(rows, indent=1))

    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
        print(f"wrote {len(rows)} rows to {args.json}")
    print()
    print_table(summarise(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
