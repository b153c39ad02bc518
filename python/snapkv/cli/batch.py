"""``snapkv batch``: many prompts from a JSONL file through one :class:`~snapkv.Engine`
(continuous batching under a cache budget); JSONL results and a summary."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .arguments import Formatter, dtype_option, int_in, model_argument
from .compaction import check_window_capacity, option_dict
from .messages import CLIError, progress
from .result import Result, emit

LINE_FIELDS = ("id", "prompt", "messages", "max_tokens", "temperature", "top_p", "seed", "stop",
               "ignore_eos")


def add_parser(commands, common_options, compaction):
    p = commands.add_parser(
        "batch", parents=[common_options, compaction], formatter_class=Formatter,
        help="run many prompts from a JSONL file together (continuous batching)",
        description="Loads MODEL once (rewritten with the compaction options, or with "
                    "--full-cache kept whole) and runs every prompt of --prompts through "
                    "one engine: sequences are admitted while their K/V cache fits in "
                    "--cache-budget, a new prompt is prefilled while the others decode, and "
                    "a finished sequence frees its rows for the next (docs/serving.md). "
                    "Each line of FILE.jsonl is an object with \"prompt\" (text, or a list "
                    "of token ids) or \"messages\" (chat turns), and optionally "
                    "\"max_tokens\", \"temperature\" (default 0: greedy, the tokens of "
                    "`snapkv generate`), \"top_p\", \"seed\", \"stop\", \"ignore_eos\" and "
                    "\"id\" (copied to the result). Writes one JSON result per line, in "
                    "order (tokens, text, finish reason, the cache bytes the sequence "
                    "held), to --out or stdout, and a summary (sequences, peak concurrent "
                    "sequences, aggregate tokens/s, peak cache and RSS) to stdout when "
                    "--out is given, else to stderr.",
        epilog="examples:\n"
               "  snapkv batch smollm2-135m-instruct --prompts prompts.jsonl --capacity 256 "
               "--out results.jsonl\n"
               "  snapkv batch models/retrieval-llama --prompts ids.jsonl --window 16 "
               "--capacity 64 --cache-budget 8 --json --out results.jsonl")
    model_argument(p, checkpoints=True)
    add_engine_options(p)
    p.add_argument("--prompts", type=Path, required=True, metavar="FILE.jsonl",
                   help="one JSON object per line (see above)")
    p.add_argument("--out", "-o", type=Path, metavar="FILE.jsonl",
                   help="where the results go (default: stdout)")
    p.add_argument("--max-tokens", type=int_in(1, "--max-tokens"), default=16,
                   metavar="N", help="tokens generated per prompt unless its line says")
    p.add_argument("--json", action="store_true", help="the summary as one JSON object")
    p.set_defaults(func=run)


def add_engine_options(p):
    """The options `batch` and `serve` share: the cache budget, the full cache, a
    tokenizer."""
    group = p.add_argument_group("engine")
    group.add_argument("--cache-budget", type=positive_mb, default=1024.0, metavar="MB",
                       help="MiB of K/V cache the running sequences may hold together; a "
                            "sequence waits until its cache (prompt rows kept plus one row per "
                            "token it may generate) fits")
    group.add_argument("--max-queue", type=int_in(0, "--max-queue"), default=256,
                       metavar="N", help="sequences that may wait for room at most")
    group.add_argument("--full-cache", action="store_true",
                       help="run the model as it is, with the full cache (no SnapKV)")
    group.add_argument("--tokenizer", type=Path, metavar="DIR",
                       help="a directory with tokenizer files, for a model without them "
                            "(default: the checkpoint's own)")
    group.add_argument("--decode-batch", type=int_in(0, "--decode-batch", 1024),
                       metavar="N",
                       help="the running sequences of a model advance together, at most N "
                            "per compiled decode call (more take several calls; fewer take "
                            "the smallest exported step that fits them: the powers of two "
                            "below N, and N; default 8); 0: one call per sequence")
    dtype_option(group)


def positive_mb(value: str) -> float:
    import argparse

    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cache-budget must be a number of MiB, got "
                                         f"{value!r}") from None
    if not number > 0 or number > 2 ** 40:
        raise argparse.ArgumentTypeError(f"--cache-budget must be > 0 MiB, got {value}")
    return number


def compaction(args):
    """The rewrite's settings from the compaction options (None with --full-cache)."""
    from .. import hf

    if args.full_cache:
        return None
    check_window_capacity(args)
    return hf.Compaction(**option_dict(args))


def load_engine(args, per_request: bool = False, max_models: int = 4):
    from ..serving import LoadError, load_engine

    try:
        return load_engine(args.model, compaction(args), cache_budget_mb=args.cache_budget,
                           max_queue=args.max_queue, tokenizer=args.tokenizer,
                           per_request=per_request, max_models=max_models,
                           **({} if args.decode_batch is None
                              else dict(decode_batch=args.decode_batch)),
                           dtype=args.dtype,
                           log=lambda m: progress(args.quiet, m))
    except LoadError as error:
        raise CLIError(str(error)) from None


def read_lines(path: Path, default_max_tokens: int):
    """[(id, prompt, SamplingParams)] of the JSONL file; a CLIError naming the line."""
    from ..serving import RequestError, SamplingParams

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise CLIError(f"--prompts {path}: {error}") from None
    jobs = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = json.loads(line)
        except ValueError as error:
            raise CLIError(f"{where}: not JSON: {error}") from None
        if not isinstance(item, dict):
            raise CLIError(f"{where}: each line must be a JSON object")
        unknown = sorted(set(item) - set(LINE_FIELDS))
        if unknown:
            raise CLIError(f"{where}: unknown field {unknown[0]!r} (known: "
                           f"{', '.join(LINE_FIELDS)})")
        if ("prompt" in item) == ("messages" in item):
            raise CLIError(f"{where}: give \"prompt\" or \"messages\" (one of them)")
        prompt = item.get("prompt", item.get("messages"))
        if "messages" in item and (not isinstance(prompt, list) or not prompt or
                                   not all(isinstance(m, dict) for m in prompt)):
            raise CLIError(f"{where}: messages must be a non-empty list of objects")
        if "prompt" in item and not isinstance(prompt, str) and not (
                isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                                 for t in prompt)):
            raise CLIError(f"{where}: prompt must be a string or a list of token ids")
        stop = item.get("stop") or ()
        params = SamplingParams(
            max_tokens=item.get("max_tokens", default_max_tokens),
            temperature=item.get("temperature", 0.0), top_p=item.get("top_p", 1.0),
            seed=item.get("seed"), stop=(stop,) if isinstance(stop, str) else tuple(stop),
            ignore_eos=item.get("ignore_eos", False))
        try:
            params.check()
        except RequestError as error:
            raise CLIError(f"{where}: {error}") from None
        if not isinstance(params.ignore_eos, bool):
            raise CLIError(f"{where}: ignore_eos must be true or false")
        jobs.append((item.get("id", number), where, prompt, params))
    if not jobs:
        raise CLIError(f"--prompts {path}: no prompts")
    return jobs


@dataclass
class BatchSummary(Result):
    model: str
    settings: str
    cache_budget: int
    stats: dict
    finish_reasons: dict
    out: Optional[str]

    def to_json(self) -> dict:
        return dict(model=self.model, settings=self.settings,
                    cache_budget_bytes=self.cache_budget, **self.stats,
                    finish_reasons=self.finish_reasons, results=self.out)

    def render_text(self) -> str:
        s = self.stats

        def rate(value):
            return "-" if value is None else f"{value:.1f}"

        ttft = s["ttft_s"]
        reasons = ", ".join(f"{n} {k}" for k, n in sorted(self.finish_reasons.items()))
        return "\n".join([
            f"snapkv batch: {self.model}, {self.settings}",
            f"sequences: {s['sequences']} ({reasons}); "
            f"peak concurrent {s['peak_concurrent_sequences']} under a cache budget of "
            f"{self.cache_budget / 2**20:.1f} MiB",
            f"tokens: {s['generated_tokens']} generated in {s['wall_s']:.2f} s "
            f"({rate(s['tokens_per_s'])} tokens/s aggregate); {s['decode_tokens']} by decode "
            f"steps in {s['decode_s']:.2f} s ({rate(s['decode_tokens_per_s'])} tokens/s); "
            f"prefill {s['prefill_s']:.2f} s",
            "time to first token: " + ("-" if ttft is None else
                                       f"median {ttft['median']:.3f} s, max {ttft['max']:.3f} s"),
            f"peak K/V cache held {s['peak_cache_bytes']:,} B; peak RSS "
            f"{s['peak_rss_bytes'] / 2**20:.0f} MiB"]
            + ([f"results: {self.out}"] if self.out else []))


def run(args) -> int:
    from ..serving import RequestError
    from ..serving.loading import describe

    jobs = read_lines(args.prompts, args.max_tokens)
    engine = load_engine(args)
    seqs = []
    engine.max_queue = max(engine.max_queue, len(jobs))
    for _, where, prompt, params in jobs:
        try:
            seqs.append(engine.submit(prompt, params))
        except RequestError as error:
            raise CLIError(f"{where}: {error}") from None
    progress(args.quiet, f"running {len(seqs)} sequences ...")
    results = [engine.result(s) for s in seqs]
    out = args.out.open("w", encoding="utf-8") if args.out else sys.stdout
    try:
        for (ident, *_), done in zip(jobs, results):
            print(json.dumps(dict(done.to_json(), id=ident)), file=out)
    finally:
        if args.out:
            out.close()
    reasons = {}
    for done in results:
        reasons[done.finish_reason] = reasons.get(done.finish_reason, 0) + 1
    summary = BatchSummary(engine.served.label, describe(compaction(args)), engine.cache_budget,
                           engine.stats.to_json(), reasons,
                           str(args.out) if args.out else None)
    emit(summary, args.json, out=None if args.out else sys.stderr)
    errors = [d for d in results if d.finish_reason == "error"]
    if errors:
        raise CLIError(f"{len(errors)} sequences stopped with an error, the first: "
                       f"{errors[0].error}")
    return 0
