"""``snapkv needle``: one retrieval prompt answered with the full cache, SnapKV and the
StreamingLLM baseline at one budget, side by side: a real-text prompt through a real model
(``make demo``: SmolLM2, the passkey task) or the synthetic task through the bundled toy
retrieval model (``make demo-toy``)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import List

from ..evaluation import DEFAULT_MODEL, DEFAULT_WINDOW, EvalError
from ..evaluation.methods import capacity_of, fraction_text
from ..evaluation.pipeline import Pipeline
from ..evaluation.suite import answer_prompt, check_jobs, jobs_for
from ..evaluation.tasks import TextTask
from ..runtime import CompiledCheckError, ResourceLimitError
from ..tasks import retrieval
from .arguments import Formatter, int_in
from .eval import DEFAULT_VARIANT, TASKS, budget_list, method_list
from .messages import CLIError, progress, show
from .result import Result, emit

DEFAULT_LENGTH = 1024
DEFAULT_METHODS = "full,snapkv,streaming"


def add_parser(commands, common_options):
    p = commands.add_parser(
        "needle", parents=[common_options], formatter_class=Formatter,
        help="one needle prompt: the full cache, SnapKV and StreamingLLM side by side",
        description="Draws one retrieval prompt (snapkv.tasks.retrieval: a key-value needle "
                    "somewhere in L tokens of filler, the question at the end) and answers it "
                    "greedily with each method through the compiled pipeline (as `snapkv "
                    "eval` does: the shared compiled prefill, each method's compiled "
                    "snapkv.select, the rewritten decode). Prints where the needle is, the "
                    "expected answer and, per method, the capacity, the answer, whether "
                    "every layer and head kept the answer tokens, the cache bytes and the "
                    "decode time per step.",
        epilog="examples:\n"
               "  snapkv needle                                   # L=1024, C=L/8\n"
               "  snapkv needle --model smollm2-135m-instruct --task passkey --length 2048 \\\n"
               "      --methods full,snapkv-gqa-mean-k15,chunked-512,streaming-gqa-mean\n"
               "  snapkv needle --length 2048 --budget 1/16 --index 3\n"
               "  snapkv needle --methods full,snapkv,random,snapkv-gqa-mean --json")
    p.add_argument("--model", type=Path, metavar="DIR",
                   help="checkpoint directory or a known model's name (`snapkv models`), "
                        "default: models/retrieval-llama")
    p.add_argument("--task", choices=TASKS, default="retrieval",
                   help="retrieval: the synthetic key-value task (for models/retrieval-llama); "
                        "passkey, needle, multikey: real text tokenised with the model's own "
                        "tokenizer (snapkv.tasks.text), right when the answer string is in the "
                        "greedy continuation; these also measure each method's own prefill "
                        "(its peak bytes and seconds)")
    p.add_argument("--length", "-L", type=int_in(1, "the length"),
                   default=DEFAULT_LENGTH, help="prompt length")
    p.add_argument("--budget", type=budget_list, default="1/8", metavar="F",
                   help="cache budget as a fraction of L: C = floor(L * F)")
    p.add_argument("--methods", type=method_list, default=DEFAULT_METHODS,
                   metavar="M,M", help="methods, as for `snapkv eval`")
    p.add_argument("--seed", type=int_in(0, "--seed"), default=0,
                   help="the prompt's seed")
    p.add_argument("--index", type=int_in(0, "--index"), default=0,
                   help="which prompt of the seed")
    p.add_argument("--variant", choices=sorted(retrieval.VARIANTS), default=DEFAULT_VARIANT,
                   help="task variant")
    p.add_argument("--window", "-W", type=int_in(1, "the window"),
                   help=f"SnapKV observation window (default {DEFAULT_WINDOW} for the "
                        f"retrieval task, {TextTask.default_window} for the text tasks)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    p.set_defaults(func=run)


def answer_all(pipeline, sample, methods, capacity, seed):
    """Per method: dict(method, capacity, tokens, correct, answer_kept, kept_bytes,
    decode_ms, kept)."""
    cells = [(m, sample.length if m.full else capacity) for m in methods]
    results = answer_prompt(pipeline, sample, cells, seed)
    return [dict(method=m.name, capacity=c, **r) for (m, c), r in zip(cells, results)]


def verdict(results) -> list:
    """Sentences that compare the runs (computed, never assumed)."""
    by = {r["method"]: r for r in results}
    lines = []
    full = by.get("full")
    if full:
        lines.append(f"full cache: {'right' if full['correct'] else 'WRONG'} answer.")
    for name, r in by.items():
        if name == "full":
            continue
        # Text tasks compare what was said (their rows carry no token ids).
        same = full is not None and r.get("tokens", r.get("said")) == \
            full.get("tokens", full.get("said"))
        share = f"{r['kept_bytes'] / full['kept_bytes']:.1%} of the full cache's bytes" \
            if full else f"{r['kept_bytes']:,} bytes"
        speed = f", a decode step in {r['decode_ms'] / full['decode_ms']:.2f}x the full " \
            f"cache's time" if full and full["decode_ms"] else ""
        kept = "" if r["answer_kept"] is None else \
            f"; the answer tokens are in {r['answer_kept']:.0%} of its layer/head caches"
        lines.append(f"{name}: {'right' if r['correct'] else 'WRONG'} answer"
                     + (" (the same continuation as the full cache)" if same else "")
                     + f" with {share}{speed}{kept}.")
    return lines


@dataclass
class NeedleResult(Result):
    """One retrieval prompt answered by each method: the prompt (its needles, question and
    answer) and per method dict(method, capacity, tokens, answer, correct, answer_kept,
    kept_bytes, decode_ms), as :func:`answer_all` computes them less the kept indices."""
    model: Path
    budget: Fraction
    capacity: int
    window: int
    sample: retrieval.Sample
    results: List[dict]

    def to_json(self) -> dict:
        sample, asked = self.sample, self.sample.asked
        return dict(
            model=show(self.model), length=sample.length, budget=fraction_text(self.budget),
            capacity=self.capacity, seed=sample.seed, index=sample.index,
            variant=sample.variant,
            needle=dict(start=asked.start, key=list(asked.key), value=list(asked.value)),
            answer=sample.answer.tolist(), results=self.results,
            verdict=verdict(self.results))

    def render_text(self) -> str:
        sample, asked = self.sample, self.sample.asked
        lines = [f"snapkv needle: {show(self.model)}; prompt {sample.index} of seed "
                 f"{sample.seed} (variant {sample.variant!r}), L={sample.length}, budget "
                 f"{fraction_text(self.budget)} (C={self.capacity}), window {self.window}"]
        for needle in sample.needles:
            lines.append(f"  {needle.role:>10} needle at {needle.start}.."
                         f"{needle.start + needle.length - 1}: KEY "
                         f"{' '.join(map(str, needle.key))} -> {' '.join(map(str, needle.value))}"
                         f" END")
        lines += [f"  question at {sample.question_position}..{sample.length - 1}: QRY "
                  f"{' '.join(map(str, asked.key))}; expected answer: "
                  f"{' '.join(map(str, sample.answer.tolist()))}", "",
                  f"{'method':<22} {'C':>5}  {'answer':<14} {'right':>5}  {'answer kept':>11}  "
                  f"{'cache bytes':>12}  {'decode ms/step':>14}"]
        for r in self.results:
            lines.append(f"{r['method']:<22} {r['capacity']:>5}  "
                         f"{' '.join(map(str, r['tokens'])):<14} "
                         f"{'yes' if r['correct'] else 'NO':>5}  {r['answer_kept']:>11.0%}  "
                         f"{r['kept_bytes']:>12,}  {r['decode_ms']:>14.1f}")
        lines += ["", *verdict(self.results),
                  "answer kept: share of (layer, head) caches holding every answer token; "
                  "decode: one step, median of 3 (timings depend on the machine's load); "
                  "`snapkv eval` measures accuracy over many prompts (docs/eval.md)."]
        return "\n".join(lines)


def _text_row(cell, result) -> dict:
    """A text task's row: the answer as said, and what the method's own prefill held."""
    (method, capacity), held = cell, result.get("prefill") or {}
    return dict(method=method.name, capacity=capacity, said=result.get("said", ""),
                correct=result["correct"], answer_kept=result["answer_kept"],
                kept_bytes=result["kept_bytes"], decode_ms=result["decode_ms"],
                prefill_peak_cache_bytes=held.get("cache"),
                prefill_peak_bytes=held.get("total"), prefill_s=held.get("seconds"),
                chunks=held.get("chunks"))


@dataclass
class TextPromptResult(Result):
    """One real-text prompt (passkey, needle, multikey) answered by each method: per method
    dict(method, capacity, said, correct, answer_kept, kept_bytes, decode_ms,
    prefill_peak_cache_bytes, prefill_peak_bytes, prefill_s, chunks): the prefill figures are
    those of the method's own compiled model (``CompiledModel.last_prefill``)."""
    model: Path
    task: str
    budget: Fraction
    capacity: int
    window: int
    length: int
    seed: int
    index: int
    answer: object
    needle: tuple   # (first, last) prompt positions of the asked needle's tokens
    results: List[dict]

    def to_json(self) -> dict:
        return dict(model=show(self.model), task=self.task, length=self.length,
                    budget=fraction_text(self.budget), capacity=self.capacity,
                    window=self.window, seed=self.seed, index=self.index,
                    needle=list(self.needle), answer=self.answer, results=self.results,
                    verdict=verdict(self.results))

    def render_text(self) -> str:
        lines = [f"snapkv needle: {show(self.model)}; {self.task} prompt {self.index} of seed "
                 f"{self.seed}, L={self.length}, budget {fraction_text(self.budget)} "
                 f"(C={self.capacity}), window {self.window}",
                 f"  the asked needle's tokens at {self.needle[0]}..{self.needle[1]}; expected "
                 f"answer: {self.answer}", "",
                 f"{'method':<22} {'C':>5}  {'said':<24} {'right':>5}  {'needle kept':>11}  "
                 f"{'cache bytes':>12}  {'prefill peak':>13}  {'prefill s':>9}  "
                 f"{'decode ms/step':>14}"]
        for r in self.results:
            said = " ".join(r["said"].split())
            said = said if len(said) <= 24 else said[:23] + "~"
            kept = "" if r["answer_kept"] is None else f"{r['answer_kept']:.0%}"
            peak = "" if r["prefill_peak_bytes"] is None else f"{r['prefill_peak_bytes']:,}"
            seconds = "" if r["prefill_s"] is None else f"{r['prefill_s']:.2f}"
            decode = "" if r["decode_ms"] is None else f"{r['decode_ms']:.1f}"
            lines.append(f"{r['method']:<22} {r['capacity']:>5}  {said:<24} "
                         f"{'yes' if r['correct'] else 'NO':>5}  {kept:>11}  "
                         f"{r['kept_bytes']:>12,}  {peak:>13}  {seconds:>9}  {decode:>14}")
        lines += ["", *verdict(self.results),
                  "said: the start of the greedy continuation; needle kept: mean share of the "
                  "asked needle's tokens a (layer, head) cache holds (blank for chunked "
                  "prefill, whose rows are not prompt positions); cache bytes: K/V after "
                  "prefill; prefill peak: the most bytes the method's own compiled prefill "
                  "held at once (the K/V the runner holds plus the compiled code's heap: "
                  "activations, the layer's full K/V, attention tiles); times depend on the "
                  "machine's load. `snapkv eval` measures accuracy over many prompts "
                  "(docs/eval.md)."]
        return "\n".join(lines)


def _text_prompt(args, budget, capacity, log) -> TextPromptResult:
    pipeline = Pipeline(args.model, args.window, log=log, measure_prefill=True)
    task = TextTask(args.task, args.model)
    check_jobs(jobs_for([args.length], args.methods, [budget]), args.window, task,
               pipeline.max_positions)
    sample = task.sample(args.length, args.seed, args.index)
    progress(args.quiet, f"answering a {sample.length}-token {args.task} prompt with "
                         f"{', '.join(m.name for m in args.methods)} (compiled; the first run "
                         f"compiles each piece, later runs load them) ...")
    cells = [(m, sample.length if m.full else capacity) for m in args.methods]
    results = answer_prompt(pipeline, sample, cells, args.seed, task=task)
    return TextPromptResult(args.model, args.task, budget, capacity, args.window,
                            sample.length, args.seed, args.index, sample.answer,
                            (int(sample.positions.min()), int(sample.positions.max())),
                            [_text_row(c, r) for c, r in zip(cells, results)])


def compute(args):
    budget = args.budget[0] if len(args.budget) == 1 else None
    if budget is None:
        raise CLIError("--budget takes one fraction")
    args.model = args.model or DEFAULT_MODEL
    text_task = args.task != "retrieval"
    if args.window is None:
        args.window = TextTask.default_window if text_task else DEFAULT_WINDOW
    log = (lambda message: None) if args.quiet else (lambda message: progress(False, message))
    capacity = capacity_of(args.length, budget)
    try:
        if text_task:
            return _text_prompt(args, budget, capacity, log)
        pipeline = Pipeline(args.model, args.window, log=log)
        check_jobs(jobs_for([args.length], args.methods, [budget]), args.window,
                   args.variant, pipeline.max_positions)
        sample = retrieval.generate(args.length, args.seed, args.variant, args.index)
        progress(args.quiet, f"answering a {args.length}-token prompt with "
                             f"{', '.join(m.name for m in args.methods)} (compiled; the "
                             f"first run compiles each piece, later runs load them) ...")
        results = answer_all(pipeline, sample, args.methods, capacity, args.seed)
    except EvalError as error:
        raise CLIError(str(error)) from None
    except (CompiledCheckError, ResourceLimitError) as error:
        raise CLIError(f"the compiled model stopped: {error}") from None
    return NeedleResult(args.model, budget, capacity, args.window, sample,
                        [{k: v for k, v in r.items() if k != "kept"} for r in results])


def run(args) -> int:
    emit(compute(args), args.json)
    return 0
