"""``snapkv eval``: accuracy of the full cache, SnapKV and its variants, and the baselines on
the retrieval task, through the compiled pipeline (:mod:`snapkv.evaluation`)."""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import List

import numpy as np

from ..evaluation import DEFAULT_MODEL, DEFAULT_WINDOW, EvalError
from ..evaluation.methods import DEFAULT_BUDGETS, METHODS, capacity_of, fraction_text, method_named
from ..evaluation.pipeline import Pipeline
from ..evaluation.results import ResultCache
from ..evaluation.suite import evaluate
from ..evaluation.tasks import RetrievalTask, TextTask
from ..runtime import CompiledCheckError, ResourceLimitError
from ..tasks import retrieval
from .arguments import Formatter, dtype_option, int_in
from .compaction import KV_DTYPES
from .messages import CLIError, progress, show
from .result import Result, emit, json_text

DEFAULT_LENGTHS = (512, 1024, 2048, 4096)
DEFAULT_SAMPLES = 20
# Answers of several tokens: the first answer token comes from prefill, whose attention sees
# the whole prompt whatever the cache keeps, so only the later ones test the cache.
DEFAULT_VARIANT = "multitoken"
PLOT_METHODS = ("snapkv", "streaming", "random")
TASKS = ("retrieval", "passkey", "needle", "multikey")


def add_parser(commands, common_options):
    methods = "\n".join(f"  {m.name:<22} {m.summary}" for m in METHODS.values()) + \
        f"\n  {'chunked-N':<22} chunked prefill with any chunk N >= 1 (not in all)" + \
        f"\n  {'chunked-N-mKc':<22} two-level chunked prefill: chunks staged at K x C rows by " \
        f"accumulated attention (-norm: normalised, -votes: the chunk's window), then C kept " \
        f"by the prompt's last window (not in all)"
    p = commands.add_parser(
        "eval", parents=[common_options], formatter_class=Formatter,
        help="accuracy vs cache budget on the retrieval task, through the compiled pipeline",
        description="Draws --samples retrieval prompts per length (snapkv.tasks.retrieval: "
                    "key-value needles in filler, a question at the end) and answers each "
                    "greedily with every method at every budget C = L * fraction. Everything "
                    "runs compiled: one shared prefill per prompt (the rewritten model with "
                    "its select queries exposed), each method's snapkv.select as the rewrite "
                    "writes it, and the rewritten (or, for full, the original) decode; see "
                    "docs/eval.md. Prints accuracy, the kept cache bytes and the decode time "
                    "per step; writes --json and --plots. Results are cached (per model, "
                    "method, length, capacity, prompt), so a rerun only computes what is new. "
                    "A progress bar goes to stderr. The default task variant has 3-token "
                    "answers: the first answer token comes from prefill, whose own attention "
                    "sees the whole prompt whatever the cache keeps, so a 1-token answer "
                    "cannot tell the methods apart.",
        epilog="methods:\n" + methods + "\n\nexamples:\n"
               "  snapkv eval --lengths 1024 --samples 20 --methods full,snapkv,streaming\n"
               "  snapkv eval --lengths 512,1024,2048 --budgets 1/4,1/8 --json - -q\n"
               "  snapkv eval --model /tmp/my-model --plots /tmp/plots\n"
               "  snapkv eval --model smollm2-135m-instruct --task passkey --lengths 2048 "
               "--budgets 1/4,1/8 --methods full,snapkv-gqa-mean,streaming --samples 10")
    p.add_argument("--model", type=Path, metavar="DIR",
                   help="checkpoint directory (config.json + safetensors; the retrieval task "
                        "needs a vocabulary >= 256, the text tasks the checkpoint's "
                        "tokenizer) or a known model's name (`snapkv models`), default: "
                        "models/retrieval-llama")
    dtype_option(p, module_files=False)
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default="same",
                   help="element type of the SnapKV methods' compacted caches: same = the "
                        "model's (--dtype); i8 = int8 rows with a per-token per-head f32 "
                        "scale (docs/model-rewrite.md, \"An 8-bit cache\"). The full cache "
                        "keeps the model's type; not with chunked or adaptive methods")
    p.add_argument("--lengths", type=int_list("--lengths"), metavar="L,L",
                   default=",".join(map(str, DEFAULT_LENGTHS)), help="prompt lengths")
    p.add_argument("--budgets", type=budget_list, metavar="F,F",
                   default=",".join(map(fraction_text, DEFAULT_BUDGETS)),
                   help="cache budgets as fractions of L (1/8 or 0.125): C = floor(L * F) "
                        "per head, window included")
    p.add_argument("--methods", type=method_list, metavar="M,M",
                   default="all", help="methods (below), or all")
    p.add_argument("--samples", "-n", type=int_in(1, "--samples"),
                   default=DEFAULT_SAMPLES, help="prompts per length")
    p.add_argument("--seed", type=int_in(0, "--seed"), default=0,
                   help="which prompts are drawn (and the random baseline's draw)")
    p.add_argument("--task", choices=TASKS, default="retrieval",
                   help="retrieval: the synthetic key-value task over our own 256-id "
                        "vocabulary (for models/retrieval-llama; --variant picks its form); "
                        "passkey, needle, multikey: real text (snapkv.tasks.text) tokenised "
                        "with the model's own tokenizer, right when the answer string is in "
                        "the greedy continuation")
    p.add_argument("--variant", choices=sorted(retrieval.VARIANTS),
                   default=DEFAULT_VARIANT, help="retrieval task variant (multitoken: see the "
                                                 "description)")
    p.add_argument("--window", "-W", type=int_in(1, "the window"),
                   help=f"SnapKV observation window (default: {DEFAULT_WINDOW} for the "
                        f"retrieval task, whose question sits in its last 16 positions; "
                        f"{TextTask.default_window} for the text tasks)")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON ('-': stdout, "
                                                  "and the table goes to stderr)")
    p.add_argument("--plots", type=Path, metavar="DIR",
                   help="write accuracy.png (accuracy vs budget per method) and "
                        "kept-positions.png (for one prompt, the positions each head keeps "
                        "against where the needles are) to DIR; needs matplotlib")
    p.add_argument("--no-cache", action="store_true",
                   help="recompute everything (and do not store results)")
    p.add_argument("--prefill-memory", action="store_true",
                   help="also measure each one-shot cell's own compiled model on its first "
                        "prompt: the peak bytes and seconds of its prefill (one more compile "
                        "and prefill per cell; chunked methods are always measured)")
    p.set_defaults(func=run)


def int_list(what):
    def parse(value: str):
        pieces = [p for p in value.replace(" ", ",").split(",") if p]
        if not pieces:
            raise argparse.ArgumentTypeError(f"{what} is empty")
        out = []
        for piece in pieces:
            try:
                number = int(piece)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{what} takes integers like 512,1024; got {piece!r}") from None
            if number < 1:
                raise argparse.ArgumentTypeError(f"{what}: {number} is not a positive length")
            out.append(number)
        return sorted(set(out))
    return parse


def budget_list(value: str):
    out = []
    for piece in [p for p in value.replace(" ", ",").split(",") if p]:
        try:
            budget = Fraction(piece).limit_denominator(1 << 20)
        except (ValueError, ZeroDivisionError):
            raise argparse.ArgumentTypeError(
                f"--budgets takes fractions like 1/8 or 0.125; got {piece!r}") from None
        if not 0 < budget < 1:
            raise argparse.ArgumentTypeError(
                f"--budgets: {piece} is not a fraction of the prompt in (0, 1)")
        out.append(budget)
    if not out:
        raise argparse.ArgumentTypeError("--budgets is empty")
    return sorted(set(out), reverse=True)


def method_list(value: str):
    names = [p for p in value.replace(" ", ",").split(",") if p]
    if names == ["all"]:
        return list(METHODS.values())
    if not names:
        raise argparse.ArgumentTypeError("--methods is empty")
    out = []
    for name in names:
        chosen = method_named(name)
        if chosen is None:
            close = difflib.get_close_matches(name, list(METHODS), 1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise argparse.ArgumentTypeError(
                f"unknown method {name!r}{hint} (choose from {', '.join(METHODS)}, "
                f"chunked-N for any chunk N >= 1, chunked-N-mKc[-norm|-votes] for K >= 1, "
                f"block-N for any block N >= 1, or all)")
        if chosen not in out:
            out.append(chosen)
    return out


class Bar:
    """A one-line progress bar on stderr (a line per prompt when stderr is not a terminal)."""

    def __init__(self, quiet: bool):
        self.quiet, self.tty = quiet, sys.stderr.isatty()

    def __call__(self, done, total, note, computed, elapsed):
        if self.quiet:
            return
        width = 30
        filled = int(width * done / total)
        eta = ""
        if computed and done < total:
            eta = f", ~{elapsed / computed * (total - done) / 60:.1f} min left at most"
        line = (f"eval [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {note} "
                f"({elapsed:.0f} s{eta})")
        if self.tty:
            print("\r" + line.ljust(100), end="" if done < total else "\n", file=sys.stderr,
                  flush=True)
        else:
            print(line, file=sys.stderr, flush=True)


def table(rows) -> List[str]:
    """The accuracy table's lines, a blank line between lengths."""
    lines = [f"{'length':>6} {'budget':>6} {'C':>5}  {'method':<22} {'accuracy':>9} "
             f"{'95% interval':>13} {'n':>3}  {'answer kept':>11}  {'cache KiB':>9}  "
             f"{'decode ms':>9}  {'peak KiB':>9}  {'prefill s':>9}"]
    last = None
    for r in rows:
        if last is not None and r["length"] != last:
            lines.append("")
        last = r["length"]
        acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.1%}"
        low, high = r.get("interval") or (None, None)
        interval = "-" if low is None else f"{low:.0%}-{high:.0%}"
        kept = "-" if r["answer_kept"] is None else f"{r['answer_kept']:.0%}"
        kib = "-" if r["kept_bytes"] is None else f"{r['kept_bytes'] / 1024:,.0f}"
        ms = "-" if r["decode_ms"] is None else f"{r['decode_ms']:.1f}"
        peak = "-" if r.get("peak_bytes") is None else f"{r['peak_bytes'] / 1024:,.0f}"
        seconds = "-" if r.get("prefill_s") is None else f"{r['prefill_s']:.1f}"
        lines.append(f"{r['length']:>6} {r['budget_fraction']:>6} {r['capacity']:>5}  "
                     f"{r['method']:<22} {acc:>9} {interval:>13} {r['n']:>3}  {kept:>11}  "
                     f"{kib:>9}  {ms:>9}  {peak:>9}  {seconds:>9}")
    return lines


def ordered(rows, methods):
    rank = {m.name: i for i, m in enumerate(methods)}
    return sorted(rows, key=lambda r: (r["length"], r["method"] != "full", -r["budget"],
                                       rank[r["method"]]))


@dataclass
class EvalResult(Result):
    """What `snapkv eval` measured: one row per (length, method, budget) of
    :func:`snapkv.evaluation.suite.evaluate` (ordered as printed), what they were computed for,
    and the plots written."""
    model: Path
    model_sha256: str
    task: str        # --task
    variant: str     # the task's name (the retrieval variant, or the text task)
    seed: int
    window: int
    samples: int
    task_key: dict
    rows: List[dict]
    seconds: float   # computing the rows
    written: List[Path]
    dtype: str = "f32"  # --dtype: the element type the model ran in
    kv_dtype: str = "same"  # --kv-dtype: the compacted caches' element type

    def to_json(self) -> dict:
        return dict(model=show(self.model), model_sha256=self.model_sha256, task=self.task,
                    variant=self.variant, seed=self.seed, window=self.window,
                    samples=self.samples, dtype=self.dtype, kv_dtype=self.kv_dtype,
                    task_key=self.task_key,
                    results=self.rows)

    def render_text(self) -> str:
        kept_note = ("mean share of the needle's tokens a (layer, head) cache holds"
                     if self.task != "retrieval" else
                     "share of (layer, head) caches that hold every answer token")
        return "\n".join(
            [f"snapkv eval: {show(self.model)} ({self.dtype}"
             + (f", {self.kv_dtype} compacted caches" if self.kv_dtype != "same" else "")
             + f"), task {self.variant!r}, seed "
             f"{self.seed}, window {self.window}, {self.samples} prompts per length "
             f"({self.seconds:.0f} s)",
             *table(self.rows),
             f"95% interval: Wilson score interval of the accuracy; answer kept: {kept_note}; "
             f"cache KiB: the K/V of all layers after prefill; decode ms: one decode step, "
             f"median of 3 (timed once per cell, when it was first computed; the machine's "
             f"load shows in it); peak KiB and prefill s: the method's own compiled model "
             f"(chunked: every prompt; others with --prefill-memory: the cell's first "
             f"prompt), the most K/V the runner held plus the compiled code's heap peak in "
             f"one call, and the prefill's median seconds"]
            + [f"wrote {show(path)}" for path in self.written])


def compute(args) -> EvalResult:
    """Evaluate (and write the plots): everything but the output."""
    if args.plots is not None and importlib.util.find_spec("matplotlib") is None:
        raise CLIError("--plots needs matplotlib: pip install matplotlib")
    log = (lambda message: None) if args.quiet else (lambda message: progress(False, message))
    args.model = args.model or DEFAULT_MODEL
    text_task = args.task != "retrieval"
    if args.window is None:
        args.window = TextTask.default_window if text_task else DEFAULT_WINDOW
    try:
        pipeline = Pipeline(args.model, args.window, log=log,
                            measure_prefill=args.prefill_memory, dtype=args.dtype or "f32")
        task = TextTask(args.task, args.model) if text_task else RetrievalTask(args.variant)
        args.task_object = task
        cache = ResultCache(None, enabled=not args.no_cache)
        kept = {}
        start = time.perf_counter()
        rows = evaluate(pipeline, args.lengths, args.methods, args.budgets, args.samples,
                        args.seed, task, cache, Bar(args.quiet), kept)
        seconds = time.perf_counter() - start
        rows = ordered(rows, args.methods)
        written = [] if args.plots is None else write_plots(args, pipeline, rows, kept)
    except EvalError as error:
        raise CLIError(str(error)) from None
    except (CompiledCheckError, ResourceLimitError) as error:
        raise CLIError(f"the compiled model stopped: {error}") from None
    return EvalResult(args.model, pipeline.digest, args.task, task.name, args.seed, args.window,
                      args.samples, task.key(), rows, seconds, written, pipeline.dtype,
                      pipeline.kv_dtype)


def run(args) -> int:
    result = compute(args)
    # With --json -, the JSON alone goes to stdout and the table to stderr.
    emit(result, as_json=False, out=sys.stderr if args.json == "-" else sys.stdout)
    if args.json == "-":
        emit(result, as_json=True)
    elif args.json:
        try:
            Path(args.json).write_text(json_text(result) + "\n")
        except OSError as error:
            raise CLIError(f"cannot write {args.json}: {error.strerror or error}") from None
    return 0


# ---------------------------------------------------------------------------------------------
# Plots

def write_plots(args, pipeline, rows, kept):
    try:
        args.plots.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CLIError(f"cannot create {args.plots}: {error.strerror or error}") from None
    import matplotlib

    matplotlib.use("Agg")
    written = [plot_accuracy(args.plots / "accuracy.png", rows, args)]
    target = kept_positions_target(args)
    if target is not None:
        written.append(plot_kept(args.plots / "kept-positions.png", pipeline, args, target,
                                 kept))
    return written


def plot_accuracy(path, rows, args):
    import matplotlib.pyplot as plt

    lengths = sorted({r["length"] for r in rows})
    fig, axes = plt.subplots(1, len(lengths), figsize=(max(6.5, 3.3 * len(lengths) + 1.6), 3.2),
                             sharey=True, squeeze=False)
    names = [m.name for m in args.methods if not m.full]
    colours = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    for ax, length in zip(axes[0], lengths):
        for i, name in enumerate(names):
            mine = sorted((r for r in rows if r["length"] == length and r["method"] == name
                           and r["accuracy"] is not None), key=lambda r: r["budget"])
            style = dict(linewidth=2.2) if name == "snapkv" else dict(linewidth=1.1)
            ax.plot([r["budget"] for r in mine], [100 * r["accuracy"] for r in mine],
                    marker="o", markersize=3, color=colours(i), label=name, **style)
        full = [r for r in rows if r["length"] == length and r["method"] == "full"]
        if full and full[0]["accuracy"] is not None:
            ax.axhline(100 * full[0]["accuracy"], color="black", linestyle="--",
                       linewidth=1, label="full")
        ax.set_xscale("log", base=2)
        ticks = [float(b) for b in args.budgets]
        ax.set_xticks(ticks, [fraction_text(b) for b in args.budgets])
        ax.minorticks_off()
        ax.set_title(f"L = {length}", fontsize=9)
        ax.set_xlabel("budget C / L", fontsize=8)
        ax.set_ylim(-3, 103)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    axes[0, 0].set_ylabel("accuracy (%)", fontsize=8)
    handles, labels = axes[0, -1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=7, frameon=False)
    fig.suptitle(f"retrieval accuracy vs cache budget\n({args.task_object.name}, seed {args.seed}, "
                 f"{args.samples} prompts per point, window {args.window})", fontsize=8)
    fig.subplots_adjust(left=0.06, right=1 - 1.5 / fig.get_figwidth(), bottom=0.16, top=0.78,
                        wspace=0.08)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def kept_positions_target(args):
    """(length, budget, methods) of the kept-positions plot: the longest length, the budget
    nearest 1/8, and the methods of PLOT_METHODS that ran (else the first non-full ones)."""
    methods = [m for m in args.methods if m.name in PLOT_METHODS] or \
        [m for m in args.methods if not m.full][:3]
    if not methods:
        return None
    budget = min(args.budgets, key=lambda b: abs(float(b) - 1 / 8))
    return max(args.lengths), budget, methods


def plot_kept(path, pipeline, args, target, kept):
    import matplotlib.pyplot as plt

    length, budget, methods = target
    capacity = capacity_of(length, budget)
    sample = args.task_object.sample(length, args.seed, 0)
    indices, prefilled = {}, None
    for method in methods:
        found = kept.get((length, method.name, capacity, 0))
        if found is None:  # cached results: run the compiled prefill and select again
            prefilled = prefilled or pipeline.prefill(sample.ids)
            found = pipeline.compact(method, capacity, args.seed, *prefilled[1:])[1]
        indices[method.name] = [layer[0] for layer in found]
    layers = len(next(iter(indices.values())))
    heads = max(len(layer) for rows in indices.values() for layer in rows)
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods), 0.22 * layers * heads
                                                       + 1.5), sharey=True, squeeze=False)
    for ax, method in zip(axes[0], methods):
        rows = indices[method.name]
        y, labels = 0, []
        for layer, per_head in enumerate(rows):
            for head, row in enumerate(per_head):
                ax.scatter(row, np.full(len(row), y), marker="|", s=18, linewidths=0.6,
                           color="#08519c")
                labels.append(f"l{layer} h{head}")
                y += 1
        for start, end, role in sample.spans:
            colour = {"asked": "#d62728", "distractor": "#ff7f0e"}.get(role, "#999999")
            ax.axvspan(start - 0.5, end - 0.5, color=colour,
                       alpha=0.35 if role == "asked" else 0.25, linewidth=0)
        ax.axvspan(sample.length - args.window - 0.5, sample.length - 0.5, color="#fdae6b",
                   alpha=0.3,
                   linewidth=0)
        ax.set_xlim(-1, sample.length)
        ax.set_ylim(y - 0.5, -0.5)
        ax.set_yticks(range(y), labels, fontsize=6)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel("prompt position", fontsize=8)
        ax.set_title(method.name, fontsize=9)
    fig.suptitle(f"kept positions per head (blue ticks), L={length}, C={capacity} "
                 f"({fraction_text(budget)}): asked needle red, distractors orange, other "
                 f"needles grey, window shaded (prompt 0 of seed {args.seed})", fontsize=8)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.8 / fig.get_figheight(),
                        top=1 - 0.45 / fig.get_figheight(), wspace=0.05)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
