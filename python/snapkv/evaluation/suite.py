"""The suite: (length, method, budget) cells, refused before anything runs when they cannot
be evaluated, each prompt answered by every cell that lacks its result.

A prompt counts as correct when greedy decoding reproduces every answer token (the synthetic
retrieval task) or when the answer string occurs in the greedy continuation at word boundaries
(the text tasks). Results are
cached per (model weights, method options, length, capacity, prompt seed and index, task
variant, generator version, snapkv-opt build) under ``$SNAPKV_EVAL_CACHE`` (default
``~/.cache/snapkv/eval``), so a rerun only computes what is new.
"""

from __future__ import annotations

import dataclasses
import time
from fractions import Fraction
from typing import Callable, List, Optional, Sequence

import numpy as np

from ..tasks import retrieval
from . import EvalError
from .methods import Method, capacity_of, fraction_text
from .pipeline import Pipeline
from .results import ResultCache, wilson
from .tasks import EvalSample, RetrievalTask

# Bumped when what a cached result means changes.
EVAL_VERSION = 1


@dataclasses.dataclass
class Job:
    """One (length, method, budget) cell; `capacity` is the length for `full`."""
    length: int
    method: Method
    budget: Fraction
    capacity: int
    key: dict = None


def jobs_for(lengths, methods, budgets) -> List[Job]:
    jobs = []
    for length in lengths:
        for method in methods:
            if method.full:
                jobs.append(Job(length, method, Fraction(1), length))
            else:
                jobs += [Job(length, method, b, capacity_of(length, b)) for b in budgets]
    return jobs


def check_jobs(jobs: List[Job], window: int, task, max_positions: Optional[int]):
    """Refuse, before anything runs, what cannot be evaluated (one message)."""
    if isinstance(task, str):
        task = RetrievalTask(task)
    shortest = task.min_length()
    longest_answer = task.max_new_tokens()
    for job in jobs:
        need = max(shortest, job.method.window(window) + 1)
        if job.length < need:
            raise EvalError(f"length {job.length} is too short: the {task.name!r} task needs "
                            f"at least {need} tokens")
        if max_positions is not None and job.length + longest_answer - 1 > max_positions:
            raise EvalError(f"length {job.length} and up to {longest_answer} answer tokens "
                            f"reach past the model's max_position_embeddings ({max_positions})")
        if not job.method.full and job.capacity <= job.method.window(window):
            raise EvalError(f"budget {fraction_text(job.budget)} of length {job.length} is "
                            f"C={job.capacity}, not more than {job.method.name}'s window "
                            f"({job.method.window(window)}): the "
                            f"capacity counts the window; use a larger budget or length")
        if not job.method.full and \
                job.method.capacity(window, job.capacity) <= job.method.window(window):
            raise EvalError(f"budget {fraction_text(job.budget)} of length {job.length} is "
                            f"C={job.capacity}, which leaves less than one block of "
                            f"{job.method.block} after {job.method.name}'s window "
                            f"({job.method.window(window)}); use a larger budget or length")


def evaluate(pipeline: Pipeline, lengths: Sequence[int], methods: Sequence[Method],
             budgets: Sequence[Fraction], samples: int, seed: int,
             variant=retrieval.DEFAULT_VARIANT, cache: Optional[ResultCache] = None,
             progress: Optional[Callable] = None, keep_indices: Optional[dict] = None) \
        -> List[dict]:
    """The result rows (see :func:`summarise`). `variant`: a retrieval variant's name or a
    task object (:class:`RetrievalTask`, :class:`TextTask`). `progress(done, total, note)` is
    called after each prompt. `keep_indices`, a dict, receives {(length, method name,
    capacity, index): kept indices per layer} for the prompts computed in this call."""
    task = RetrievalTask(variant) if isinstance(variant, str) else variant
    cache = cache or ResultCache(None, enabled=False)
    jobs = jobs_for(lengths, methods, budgets)
    task.check(pipeline)
    check_jobs(jobs, pipeline.window, task, pipeline.max_positions)
    compiler = pipeline.compiler_digest()
    for job in jobs:
        job.key = dict(version=EVAL_VERSION, model=pipeline.digest,
                       method=job.method.key(pipeline.window, seed), length=job.length,
                       capacity=job.capacity, window=pipeline.window, seed=seed,
                       compiler=compiler, **task.key())
        if pipeline.dtype != "f32":  # f32 results keep the keys they were stored under
            job.key["dtype"] = pipeline.dtype
        if pipeline.kv_dtype != "same" and not job.method.full:
            if job.method.adaptive or job.method.chunk:
                raise EvalError(f"{job.method.name}: --kv-dtype {pipeline.kv_dtype} is not "
                                f"available with chunked prefill or an adaptive budget")
            job.key["kv_dtype"] = pipeline.kv_dtype
    total = len(lengths) * samples
    done, computed, start = 0, 0, time.perf_counter()
    for length in lengths:
        here = [j for j in jobs if j.length == length]
        for index in range(samples):
            missing = [j for j in here if str(index) not in cache.entry(j.key)["samples"]
                       or (index == 0 and _unmeasured(pipeline, j, cache))]
            if missing:
                sample = task.sample(length, seed, index)
                _run_sample(pipeline, sample, missing, seed, cache, keep_indices, task)
                computed += 1
            done += 1
            if progress:
                progress(done, total, f"L={length} prompt {index + 1}/{samples}"
                         + ("" if missing else " (cached)"), computed,
                         time.perf_counter() - start)
    return summarise(jobs, samples, cache)


def answer_prompt(pipeline: Pipeline, sample, cells: Sequence[tuple], seed: int,
                  timed: Callable[[int], bool] = lambda i: True, task=None) -> List[dict]:
    """Answer `sample` (an :class:`EvalSample`, or a retrieval sample) with each (method,
    capacity) of `cells` after one shared prefill: per cell dict(tokens, answer, correct,
    answer_kept, kept_bytes, decode_ms (None where `timed(i)` is false), kept (indices per
    layer; None for full), prefill (what the method's own model's prefill held and took:
    measured where `timed(i)`, and on every prompt for a chunked method, which answers with
    its own model; else None), and for text tasks said (the decoded continuation))."""
    if not isinstance(sample, EvalSample):
        sample, task = RetrievalTask.wrap(sample), RetrievalTask
    task = task or RetrievalTask
    length, steps = sample.length, sample.steps
    pipeline.need_rows([method for method, _ in cells])
    logits, caches, queries = pipeline.prefill(sample.ids)
    first = int(np.argmax(logits))
    out = []
    for i, (method, capacity) in enumerate(cells):
        model, held, start = None, None, first
        if method.chunk:
            # Its own prefill: chunks after the first attend over the compacted cache. The
            # kept rows are rows of the last chunk's concatenation, not prompt positions.
            model = pipeline.own_model(method, capacity, seed)
            row, kept_caches, held = pipeline.measured_prefill(model, sample.ids)
            start, kept = int(np.argmax(row)), None
        elif method.full:
            kept_caches, kept = caches, None
        else:
            kept_caches, kept = pipeline.compact(method, capacity, seed, caches, queries)
        if held is None and timed(i) and pipeline.measure_prefill and not method.adaptive:
            _, _, held = pipeline.measured_prefill(pipeline.own_model(method, capacity, seed),
                                                   sample.ids)
        tokens = pipeline.answer(method, start, length, steps, kept_caches, model)
        result = dict(
            tokens=tokens, answer=sample.answer, correct=bool(sample.judge(tokens)),
            answer_kept=None if method.chunk else
            1.0 if kept is None else task.kept_share(sample, kept),
            kept_bytes=pipeline.cache_bytes(method, kept_caches),
            decode_ms=pipeline.decode_ms(method, start, length, kept_caches, model=model)
            if timed(i) else None, kept=kept, prefill=held)
        said = sample.said(tokens)
        if said is not None:
            result["said"] = said
        out.append(result)
    return out


def _run_sample(pipeline: Pipeline, sample: EvalSample, jobs: List[Job], seed: int,
                cache: ResultCache, keep_indices: Optional[dict], task):
    entries = [cache.entry(job.key) for job in jobs]
    results = answer_prompt(pipeline, sample, [(j.method, j.capacity) for j in jobs], seed,
                            timed=lambda i: entries[i].get("decode_ms") is None
                            or _unmeasured(pipeline, jobs[i], cache), task=task)
    for job, entry, result in zip(jobs, entries, results):
        kept = result.pop("kept")
        decode_ms = result.pop("decode_ms")
        prefill = result.pop("prefill")
        entry["samples"][str(sample.index)] = result
        if decode_ms is not None:
            entry["decode_ms"] = decode_ms
        if prefill is not None:
            entry.setdefault("prefill", {})[str(sample.index)] = prefill
        cache.save(job.key)
        if keep_indices is not None and kept is not None:
            keep_indices[(job.length, job.method.name, job.capacity, sample.index)] = kept


def _unmeasured(pipeline: Pipeline, job: Job, cache: ResultCache) -> bool:
    """A cell to measure (``measure_prefill``; not adaptive methods) whose own prefill was
    never measured: its first prompt is run again to measure it."""
    return pipeline.measure_prefill and not job.method.adaptive and \
        not cache.entry(job.key).get("prefill")


def _prefill_summary(measured: dict) -> dict:
    """The most bytes a method's own prefill held (the largest over the prompts measured:
    K/V held by the runner, the compiled code's heap in one call, their sum) and its median
    seconds; None where nothing was measured."""
    runs = list(measured.values())
    if not runs:
        return dict(peak_cache_bytes=None, peak_heap_bytes=None, peak_bytes=None,
                    prefill_s=None)
    return dict(peak_cache_bytes=max(r["cache"] for r in runs),
                peak_heap_bytes=max((r["heap"] or 0) for r in runs) or None,
                peak_bytes=max(r["total"] for r in runs),
                prefill_s=float(np.median([r["seconds"] for r in runs])))


def summarise(jobs: List[Job], samples: int, cache: ResultCache) -> List[dict]:
    rows = []
    for job in jobs:
        entry = cache.entry(job.key)
        found = [entry["samples"][str(i)] for i in range(samples)
                 if str(i) in entry["samples"]]
        correct = sum(r["correct"] for r in found)
        rows.append(dict(
            method=job.method.name, length=job.length, budget=float(job.budget),
            budget_fraction=fraction_text(job.budget), capacity=job.capacity,
            accuracy=correct / len(found) if found else None, n=len(found), correct=correct,
            interval=wilson(correct, len(found)) if found else None,
            answer_kept=float(np.mean([r["answer_kept"] for r in found]))
            if found and all(r["answer_kept"] is not None for r in found) else None,
            kept_bytes=found[0]["kept_bytes"] if found else None,
            decode_ms=entry.get("decode_ms"), **_prefill_summary(entry.get("prefill", {}))))
    return rows
