"""``snapkv generate``: greedy generation with the compacted and with the full cache."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union

import numpy as np

from . import ledger
from .arguments import (
    DEFAULT_STEPS,
    Formatter,
    add_prompt_options,
    checkpoint_option,
    dtype_option,
    int_in,
    model_argument,
    weights_option,
)
from .compaction import check_window_capacity, describe, describe_options, option_dict, rewrite
from .locate import FIXTURE
from .messages import CLIError, progress, show
from .opt import count_selects, diagnostics, verify_ir
from .result import Result, emit
from .running import (
    check_limits,
    check_runnable,
    check_weights,
    compile_model,
    ids_text,
    prompt,
    prompt_length,
    signatures,
    stored_weights,
    text_prompt,
)
from .sources import load_source


def add_parser(commands, common_options, compaction):
    p = commands.add_parser(
        "generate", parents=[common_options, compaction], formatter_class=Formatter,
        help="generate tokens with the compacted cache and with the full cache, side by side",
        description="Rewrite MODEL with snapkv-compress-kv-cache, compile the rewritten "
                    "and the original module ahead of time (cached under "
                    "~/.cache/snapkv/runner, or $SNAPKV_RUNNER_CACHE), then greedily generate "
                    "with each: prefill on the prompt, then --steps decode steps. Prints both "
                    "token sequences, per-step agreement, the logical length (what RoPE "
                    "counts) next to the physical cache rows, a teacher-forced comparison "
                    "(the full run's tokens fed to the compacted model), the cache ledger "
                    "(snapkv-opt --snapkv-report-cache on the rewritten module) with the bytes "
                    "the runs actually held, and compile and run times. Progress goes to "
                    "stderr. A prompt (plus the generated tokens) past the model's "
                    "max_position_embeddings, or one whose attention would not fit in "
                    "memory, is refused before anything is allocated.",
        epilog="examples:\n"
               "  snapkv generate --window 8 --capacity 24\n"
               "  snapkv generate --prompt-length 128 --window 8 --capacity 32 --gqa mean "
               "--steps 32\n"
               "  snapkv generate --prompt \"5 17 42 7 99 3 64 12 250 1 8 33\" --window 4 "
               "--capacity 8 --steps 4 --json\n"
               "  snapkv generate my-model/ --prompt-length 512 --window 32 --capacity 128   "
               "# a checkpoint directory\n"
               "  snapkv generate smollm2-135m-instruct --text \"The capital of France is\" "
               "--window 4 --capacity 8\n"
               "  snapkv generate smollm2-135m-instruct --prompt-file story.txt --gqa mean "
               "--capacity 256 --json   # `snapkv models` lists the names")
    model_argument(p, checkpoints=True)
    checkpoint_option(p)
    dtype_option(p)
    weights_option(p)
    add_prompt_options(p, text=True)
    p.add_argument("--steps", "-n", type=int_in(0, "the number of steps"),
                   default=DEFAULT_STEPS, metavar="N", help="decode steps (tokens generated "
                                                            "after the first)")
    p.add_argument("--json", action="store_true",
                   help="print the results as one JSON object (progress still goes to "
                        "stderr)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show each compile step (snapkv-opt, snapkv-translate, clang)")
    p.set_defaults(func=run)


def allocated(caches) -> int:
    """Bytes of the cache buffers the runner allocated (room for more rows included)."""
    return int(getattr(caches, "allocated", None) or sum(c.nbytes for c in caches))


def rows_per_head(caches) -> int:
    """Layer 0's cache rows per head (ragged caches, ``--budget adaptive``: their mean)."""
    from ..runtime import RaggedKVCache

    if isinstance(caches, RaggedKVCache):
        return int(caches.lengths[0, 0].sum()) // caches.lengths.shape[-1]
    return caches[0].shape[2] if caches else 0


def prefill(model, ids) -> dict:
    """One timed prefill: dict(logits, caches, prefill_s, held)."""
    start = time.perf_counter()
    logits, caches = model.prefill(ids)
    return dict(logits=logits, caches=caches, prefill_s=time.perf_counter() - start,
                held=dict(model.last_prefill or {}))


def greedy(model, ids, steps: int, *, forced: Optional[Sequence[int]] = None,
           label: str = "", quiet: bool = True, prefilled: Optional[dict] = None):
    """Prefill (or start from `prefilled`, what :func:`prefill` returned) then `steps`
    decode steps. Feeds its own argmax, or `forced[g]` at step g.
    Returns dict(tokens, logits, physical, caches, prefill_s, decode_s, step_s (seconds of
    each decode step))."""
    length = ids.shape[1]
    first = prefilled or prefill(model, ids)
    logits, caches, prefill_s, held = (first[k] for k in ("logits", "caches", "prefill_s",
                                                          "held"))
    rows = [logits[0, -1]]
    tokens = [int(np.argmax(rows[0]))]
    caches = model.cache(caches, steps)  # room for the steps: each writes its row in place
    physical = [rows_per_head(caches)]
    step_s, last_report, recompressed = [], time.perf_counter(), []
    for g in range(steps):
        feed = tokens[-1] if forced is None else int(forced[g])
        t0 = time.perf_counter()
        step_logits, caches = model.decode(feed, length + g, caches)
        step_s.append(time.perf_counter() - t0)
        rows.append(step_logits[0, 0])
        tokens.append(int(np.argmax(rows[-1])))
        # Decode-time compression (--decode-interval) compacts the caches when due; the
        # forced run compacts after the tokens it was fed.
        fed = tokens if forced is None else [int(t) for t in forced[:g + 1]] + [0]
        caches, done = model.compress_if_due(caches, fed, length, steps - g - 1)
        if done:
            recompressed.append(g + 1)
        physical.append(rows_per_head(caches))
        if time.perf_counter() - last_report > 2.0:
            progress(quiet, f"  {label}: decode step {g + 1}/{steps}")
            last_report = time.perf_counter()
    return dict(tokens=tokens, logits=np.stack(rows), physical=physical, caches=caches,
                prefill_s=prefill_s, decode_s=float(sum(step_s)), step_s=step_s,
                recompressed=recompressed, chunks=len(held.get("chunks", [])) or 1,
                held={k: held.get(f"peak_{k}_bytes") for k in ("cache", "heap")}
                | {"total": held.get("peak_bytes")})


def _runs(full, compact, ids, steps, quiet):
    from ..runtime import CompiledCheckError

    try:
        ref = greedy(full, ids, steps, label="full cache", quiet=quiet)
        # The teacher-forced run starts from the same prefill instead of a second one (as
        # long as the first): no step writes into prefill's arrays (model.cache copies them
        # into buffers with room; a functional decode returns new arrays).
        start = prefill(compact, ids)
        got = greedy(compact, ids, steps, label="compacted cache", quiet=quiet,
                     prefilled=start)
        forced = greedy(compact, ids, steps, forced=ref["tokens"],
                        label="compacted cache, teacher-forced", quiet=quiet,
                        prefilled=start)
    except CompiledCheckError as error:
        raise CLIError(f"the compiled model stopped: {error}") from None
    except ValueError as error:
        raise CLIError(str(error)) from None
    return ref, got, forced


def _median(values) -> Optional[float]:
    return float(np.median(values)) if values else None


@dataclass
class Run:
    """One greedy run as the result reports it (:func:`greedy` less its logits and caches)."""
    tokens: List[int]
    physical: List[int]  # layer 0's cache rows per head after prefill and each step
    prefill_s: float
    step_s: List[float]  # seconds of each decode step
    cache_bytes: int     # the cache arrays after the run
    caches: int          # how many cache arrays
    shape: List[int]     # the first one's shape
    chunks: int = 1      # prompt chunks prefill fed (--chunk)
    recompressed: List[int] = field(default_factory=list)  # after these steps
    # Measured during prefill (CompiledModel.last_prefill): the most K/V bytes the runner
    # held at once ("cache"), the compiled code's heap peak in one call ("heap"), their
    # largest sum over the calls ("total").
    held: Optional[dict] = None

    @classmethod
    def of(cls, run: dict) -> "Run":
        caches = run["caches"]
        return cls(run["tokens"], run["physical"], run["prefill_s"], run["step_s"],
                   sum(c.nbytes for c in caches), len(caches),
                   list(caches[0].shape) if caches else [], run["chunks"], run["recompressed"],
                   run["held"])

    @property
    def decode_s(self) -> float:
        return float(sum(self.step_s))


@dataclass
class GenerateResult(Result):
    """Both greedy runs of `snapkv generate` (the full cache's and the compacted one's), the
    teacher-forced comparison, the ledger of the rewritten module and the times."""
    model: str
    ids: List[int]
    source: str                       # where the prompt came from ("given", "random ids ...")
    compaction: dict
    kept: Union[int, List[int]]       # prompt positions kept per head (per layer if they differ)
    full: Run
    compacted: Run
    said: Optional[dict]              # text prompts: dict(prompt, full, compacted), decoded
    same_next: int                    # teacher-forced: decode steps with the same next token
    max_logit_difference: float
    ledger: dict                      # :func:`ledger.ledger_data`
    ledger_table: str                 # :func:`ledger.ledger_text`
    compacted_allocated_bytes: int
    rewrite_s: float
    compile_s: dict                   # {compacted, full}: seconds compiling (or loading)
    from_cache: dict                  # {compacted, full}: whether the library was cached
    bundled: bool                     # the bundled random-weight model (its note)

    @property
    def length(self) -> int:
        return len(self.ids)

    @property
    def steps(self) -> int:
        return len(self.full.tokens) - 1

    @property
    def agree(self) -> int:
        return sum(a == b for a, b in zip(self.full.tokens, self.compacted.tokens))

    @property
    def first_difference(self) -> Optional[int]:
        return next((g for g, (a, b) in enumerate(zip(self.full.tokens, self.compacted.tokens))
                     if a != b), None)

    @property
    def ledger_note(self) -> Optional[str]:
        return ledger.note(self.ledger, self.length)

    def to_json(self) -> dict:
        full, compacted, length, steps = self.full, self.compacted, self.length, self.steps
        return dict(
            model=self.model, prompt=dict(length=length, source=self.source, ids=self.ids),
            compaction=self.compaction, kept_per_head=self.kept,
            tokens=dict(full=full.tokens, compacted=compacted.tokens), text=self.said,
            steps=[dict(step=g, fed_at=None if g == 0 else length + g - 1,
                        full=full.tokens[g], compacted=compacted.tokens[g],
                        same=full.tokens[g] == compacted.tokens[g], logical_length=length + g,
                        physical_rows=dict(full=full.physical[g],
                                           compacted=compacted.physical[g]))
                   for g in range(steps + 1)],
            agreement=dict(same=self.agree, of=steps + 1,
                           first_difference=self.first_difference),
            teacher_forced=dict(same_next=self.same_next, of=steps,
                                max_logit_difference=self.max_logit_difference),
            ledger=self.ledger, ledger_note=self.ledger_note,
            measured=dict(full_bytes=full.cache_bytes, compacted_bytes=compacted.cache_bytes,
                          compacted_allocated_bytes=self.compacted_allocated_bytes,
                          prefill_chunks=dict(full=full.chunks, compacted=compacted.chunks),
                          recompressed_after_steps=compacted.recompressed,
                          prefill_peak_bytes=dict(full=full.held, compacted=compacted.held)),
            seconds=dict(rewrite=self.rewrite_s, compile_compacted=self.compile_s["compacted"],
                         compile_full=self.compile_s["full"],
                         compiled_from_cache=dict(compacted=self.from_cache["compacted"],
                                                  full=self.from_cache["full"]),
                         prefill_full=full.prefill_s, prefill_compacted=compacted.prefill_s,
                         decode_full=full.decode_s, decode_compacted=compacted.decode_s,
                         decode_step_full=_median(full.step_s),
                         decode_step_compacted=_median(compacted.step_s)))

    def render_text(self) -> str:
        full, compacted, length, steps = self.full, self.compacted, self.length, self.steps
        said, first = self.said, self.first_difference
        lines = [f"snapkv generate: {self.model}"]
        if said is not None:
            text = said["prompt"]
            shown = text if len(text) <= 200 else f"{text[:120]} ... {text[-60:]}"
            lines.append(f"prompt: {length} tokens from {len(text):,} characters of text: "
                         f"{shown!r}")
        else:
            lines.append(f"prompt: {length} tokens ({self.source}): {ids_text(self.ids)}")
        kept = self.kept if isinstance(self.kept, int) else \
            f"{self.kept[0]} (layer 0) down to {self.kept[-1]} (layer {len(self.kept) - 1})"
        lines += [f"compaction: {describe(self.compaction)} -> {kept} of {length} "
                  f"prompt positions cached per head", "",
                  f"full-cache tokens:      {ids_text(full.tokens)}",
                  f"compacted-cache tokens: {ids_text(compacted.tokens)}"]
        if said is not None:
            lines += [f"full-cache text:        {said['full']!r}",
                      f"compacted-cache text:   {said['compacted']!r}"]
        # Layer 0's cache: with --budget pyramid the layers keep different lengths (the
        # ledger below lists them).
        lines += ["", "step  fed at  full  compacted  same  logical  layer 0's rows "
                      "(full / compacted)"]
        for g in range(steps + 1):
            fed = "prefill" if g == 0 else f"{length + g - 1:>7}"
            same = "yes" if full.tokens[g] == compacted.tokens[g] else "NO"
            lines.append(f"{g:>4}  {fed:>7}  {full.tokens[g]:>4}  {compacted.tokens[g]:>9}  "
                         f"{same:>4}  {length + g:>7}  {full.physical[g]:>8} / "
                         f"{compacted.physical[g]}")
        lines += ["", f"greedy agreement: {self.agree} of {steps + 1} tokens"
                  + (" (identical sequences)" if first is None else
                     f" (first difference at step {first}; after it the two runs continue "
                     f"from different tokens)"),
                  f"teacher-forced (the full run's tokens fed to both): same next token at "
                  f"{self.same_next} of {steps} decode steps, max |logit difference| "
                  f"{self.max_logit_difference:.3g}",
                  ("step 0 comes from the last chunk's logits: chunks after the first attend "
                   "over the compacted cache, so prefill's logits may change; "
                   if compacted.chunks > 1 else
                   "step 0 comes from prefill's logits, which the rewrite leaves unchanged; ")
                  + "decode step g runs at logical position L+g-1 over min(L, C)+g-1 cached "
                    "rows"]
        if first is not None and self.bundled:
            lines.append("the bundled model has random weights: its attention is spread almost "
                         "evenly over the prompt (docs/gallery), so dropping positions changes "
                         "its predictions; with --capacity >= the prompt length both runs "
                         "agree exactly, and the compiled compacted model matches the PyTorch "
                         "SnapKV reference (python/tests/test_model_rewrite.py)")
        lines += ["", self.ledger_table] + ([self.ledger_note] if self.ledger_note else [])
        lines += [f"measured after the runs: full cache {full.cache_bytes:,} B "
                  f"({full.caches} x {full.shape}), compacted {compacted.cache_bytes:,} B "
                  f"({compacted.caches} x {compacted.shape})"]
        if compacted.chunks > 1:
            lines.append(f"chunked prefill: {compacted.chunks} chunks")
        if compacted.recompressed:
            lines.append(f"decode-time compression: the caches compacted back to C after "
                         f"steps {', '.join(map(str, compacted.recompressed))}")
        if full.held or compacted.held:
            def held(run, key):
                value = (run.held or {}).get(key)
                return "-" if value is None else f"{value:,}"

            lines.append(
                "measured during prefill (full / compacted): K/V held by the runner "
                f"{held(full, 'cache')} / {held(compacted, 'cache')} B; the compiled code's "
                f"heap peak in one call {held(full, 'heap')} / {held(compacted, 'heap')} B")
        lines.append("")

        def compiled(which):
            return f"{self.compile_s[which]:.1f} s" + \
                (" (cached)" if self.from_cache[which] else "")

        lines.append(f"times: rewrite {self.rewrite_s:.2f} s; compile compacted "
                     f"{compiled('compacted')}, full {compiled('full')}; prefill full "
                     f"{full.prefill_s * 1e3:.1f} ms, compacted {compacted.prefill_s * 1e3:.1f} "
                     f"ms; {steps} decode steps full {full.decode_s * 1e3:.1f} ms, compacted "
                     f"{compacted.decode_s * 1e3:.1f} ms")
        return "\n".join(lines)


def compute(args) -> GenerateResult:
    check_window_capacity(args)
    check_weights(args)
    source = load_source(args.model, args, args.quiet)
    path, text = source.path, source.text
    prompt_text = text_prompt(args, source.checkpoint)
    verify_ir(path)
    if count_selects(text):
        raise CLIError(f"{show(path)} already holds snapkv.select (a rewritten model?): `snapkv "
                       f"generate` rewrites the ORIGINAL model itself and runs both")
    prefill_sig, _ = signatures(text, path)
    vocab = prefill_sig.results[0].shape[-1] if prefill_sig.results else None
    steps = args.steps
    check_limits(text, path, args, prompt_length(args), steps)
    ids, where = prompt(args, vocab)
    length = ids.shape[1]
    check_runnable(text, path, length, args.window)

    progress(args.quiet, f"rewriting {show(path)} with snapkv-compress-kv-cache "
                         f"({describe_options(args)}) ...")
    rewritten, warnings, rewrite_s = rewrite(path, args)
    if warnings.strip():
        progress(False, diagnostics(warnings))
    (rewritten_run, text_run), weights = stored_weights(source, args, [rewritten, text])
    compact = compile_model(rewritten_run, "compacted-cache model", args, weights=weights)
    full = compile_model(text_run, "full-cache model (the original module)", args,
                         weights=weights)

    progress(args.quiet, f"generating {steps} tokens after a {length}-token prompt, "
                         f"with each cache ...")
    ref, got, forced = _runs(full, compact, ids, steps, args.quiet)
    cache_ledger = ledger.ledger_data(rewritten, length, steps)
    same_next = sum(a == b for a, b in zip(ref["tokens"][1:], forced["tokens"][1:]))
    diff = float(np.max(np.abs(forced["logits"][1:] - ref["logits"][1:]))) if steps else 0.0
    # Per head; one number per layer when the layers' budgets differ (budget=pyramid).
    kept_layers = [layer["kept"] for layer in cache_ledger["layers"]]
    kept = kept_layers[0] if len(set(kept_layers)) <= 1 else kept_layers
    if not kept_layers:
        kept = min(length, args.capacity)
    said = None
    if prompt_text is not None:
        from .. import tokenizer

        said = dict(prompt=prompt_text,
                    full=tokenizer.decode(source.checkpoint.path, ref["tokens"]),
                    compacted=tokenizer.decode(source.checkpoint.path, got["tokens"]))
    return GenerateResult(
        source.label, ids[0].tolist(), where, option_dict(args), kept, Run.of(ref),
        Run.of(got), said, same_next, diff, cache_ledger,
        ledger.ledger_text(rewritten, length, steps), allocated(got["caches"]), rewrite_s,
        dict(compacted=compact.library.seconds, full=full.library.seconds),
        dict(compacted=compact.from_cache, full=full.from_cache), path.name == FIXTURE)


def run(args) -> int:
    emit(compute(args), args.json)
    return 0
