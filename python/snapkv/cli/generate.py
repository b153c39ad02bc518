"""``snapkv generate``: greedy generation with the compacted and with the full cache."""

from __future__ import annotations

import json
import time
from typing import Optional, Sequence

import numpy as np

from . import common, ledger
from .common import DEFAULT_STEPS, FIXTURE, CLIError, Formatter, progress, show


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
    common.model_argument(p, checkpoints=True)
    common.checkpoint_option(p)
    common.add_prompt_options(p, text=True)
    p.add_argument("--steps", "-n", type=common.int_in(0, "the number of steps"),
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


def greedy(model, ids, steps: int, *, forced: Optional[Sequence[int]] = None,
           label: str = "", quiet: bool = True):
    """Prefill then `steps` decode steps. Feeds its own argmax, or `forced[g]` at step g.
    Returns dict(tokens, logits, physical, caches, prefill_s, decode_s, step_s (seconds of
    each decode step))."""
    length = ids.shape[1]
    start = time.perf_counter()
    logits, caches = model.prefill(ids)
    prefill_s = time.perf_counter() - start
    rows = [logits[0, -1]]
    tokens = [int(np.argmax(rows[0]))]
    caches = model.cache(caches, steps)  # room for the steps: each writes its row in place
    physical = [rows_per_head(caches)]
    step_s, last_report = [], time.perf_counter()
    for g in range(steps):
        feed = tokens[-1] if forced is None else int(forced[g])
        t0 = time.perf_counter()
        step_logits, caches = model.decode(feed, length + g, caches)
        step_s.append(time.perf_counter() - t0)
        rows.append(step_logits[0, 0])
        tokens.append(int(np.argmax(rows[-1])))
        physical.append(rows_per_head(caches))
        if time.perf_counter() - last_report > 2.0:
            progress(quiet, f"  {label}: decode step {g + 1}/{steps}")
            last_report = time.perf_counter()
    return dict(tokens=tokens, logits=np.stack(rows), physical=physical, caches=caches,
                prefill_s=prefill_s, decode_s=float(sum(step_s)), step_s=step_s)


def _runs(full, compact, ids, steps, quiet):
    from ..runtime import CompiledCheckError

    try:
        ref = greedy(full, ids, steps, label="full cache", quiet=quiet)
        got = greedy(compact, ids, steps, label="compacted cache", quiet=quiet)
        forced = greedy(compact, ids, steps, forced=ref["tokens"],
                        label="compacted cache, teacher-forced", quiet=quiet)
    except CompiledCheckError as error:
        raise CLIError(f"the compiled model stopped: {error}") from None
    except ValueError as error:
        raise CLIError(str(error)) from None
    return ref, got, forced


def _median(values) -> Optional[float]:
    return float(np.median(values)) if values else None


def run(args) -> int:
    common.check_window_capacity(args)
    source = common.load_source(args.model, args, args.quiet)
    path, text = source.path, source.text
    prompt_text = common.text_prompt(args, source.checkpoint)
    common.verify_ir(path)
    if common.count_selects(text):
        raise CLIError(f"{show(path)} already holds snapkv.select (a rewritten model?): `snapkv "
                       f"generate` rewrites the ORIGINAL model itself and runs both")
    prefill_sig, _ = common.signatures(text, path)
    vocab = prefill_sig.results[0].shape[-1] if prefill_sig.results else None
    steps = args.steps
    common.check_limits(text, path, args, common.prompt_length(args), steps)
    ids, where = common.prompt(args, vocab)
    length = ids.shape[1]
    common.check_runnable(text, path, length, args.window)

    progress(args.quiet, f"rewriting {show(path)} with snapkv-compress-kv-cache "
                         f"({common.describe_options(args)}) ...")
    rewritten, warnings, rewrite_s = common.rewrite(path, args)
    if warnings.strip():
        progress(False, common.diagnostics(warnings))
    compact = common.compile_model(rewritten, "compacted-cache model", args,
                                   weights=source.checkpoint)
    full = common.compile_model(text, "full-cache model (the original module)", args,
                                weights=source.checkpoint)

    progress(args.quiet, f"generating {steps} tokens after a {length}-token prompt, "
                         f"with each cache ...")
    ref, got, forced = _runs(full, compact, ids, steps, args.quiet)
    table = None if args.json else ledger.ledger_text(rewritten, length, steps)
    cache_ledger = ledger.ledger_data(rewritten, length, steps)

    agree = sum(a == b for a, b in zip(ref["tokens"], got["tokens"]))
    first = next((g for g, (a, b) in enumerate(zip(ref["tokens"], got["tokens"])) if a != b),
                 None)
    same_next = sum(a == b for a, b in zip(ref["tokens"][1:], forced["tokens"][1:]))
    diff = float(np.max(np.abs(forced["logits"][1:] - ref["logits"][1:]))) if steps else 0.0
    full_bytes = sum(c.nbytes for c in ref["caches"])
    compact_bytes = sum(c.nbytes for c in got["caches"])
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
    if args.json:
        print(json.dumps(dict(
            model=source.label, prompt=dict(length=length, source=where, ids=ids[0].tolist()),
            compaction=common.option_dict(args), kept_per_head=kept,
            tokens=dict(full=ref["tokens"], compacted=got["tokens"]), text=said,
            steps=[dict(step=g, fed_at=None if g == 0 else length + g - 1,
                        full=ref["tokens"][g], compacted=got["tokens"][g],
                        same=ref["tokens"][g] == got["tokens"][g], logical_length=length + g,
                        physical_rows=dict(full=ref["physical"][g],
                                           compacted=got["physical"][g]))
                   for g in range(steps + 1)],
            agreement=dict(same=agree, of=steps + 1, first_difference=first),
            teacher_forced=dict(same_next=same_next, of=steps, max_logit_difference=diff),
            ledger=cache_ledger, ledger_note=ledger.note(cache_ledger, length),
            measured=dict(full_bytes=full_bytes, compacted_bytes=compact_bytes,
                          compacted_allocated_bytes=allocated(got["caches"])),
            seconds=dict(rewrite=rewrite_s, compile_compacted=compact.library.seconds,
                         compile_full=full.library.seconds,
                         compiled_from_cache=dict(compacted=compact.from_cache,
                                                  full=full.from_cache),
                         prefill_full=ref["prefill_s"], prefill_compacted=got["prefill_s"],
                         decode_full=ref["decode_s"], decode_compacted=got["decode_s"],
                         decode_step_full=_median(ref["step_s"]),
                         decode_step_compacted=_median(got["step_s"]))),
            indent=1))
        return 0

    print(f"snapkv generate: {source.label}")
    if said is not None:
        shown = prompt_text if len(prompt_text) <= 200 else \
            f"{prompt_text[:120]} ... {prompt_text[-60:]}"
        print(f"prompt: {length} tokens from {len(prompt_text):,} characters of text: "
              f"{shown!r}")
    else:
        print(f"prompt: {length} tokens ({where}): {common.ids_text(ids[0])}")
    kept_text = kept if isinstance(kept, int) else \
        f"{kept[0]} (layer 0) down to {kept[-1]} (layer {len(kept) - 1})"
    print(f"compaction: {common.describe_options(args)} -> {kept_text} of {length} prompt "
          f"positions cached per head")
    print()
    print(f"full-cache tokens:      {common.ids_text(ref['tokens'])}")
    print(f"compacted-cache tokens: {common.ids_text(got['tokens'])}")
    if said is not None:
        print(f"full-cache text:        {said['full']!r}")
        print(f"compacted-cache text:   {said['compacted']!r}")
    print()
    # Layer 0's cache: with --budget pyramid the layers keep different lengths (the ledger
    # below lists them).
    print("step  fed at  full  compacted  same  logical  layer 0's rows (full / compacted)")
    for g in range(steps + 1):
        fed = "prefill" if g == 0 else f"{length + g - 1:>7}"
        same = "yes" if ref["tokens"][g] == got["tokens"][g] else "NO"
        print(f"{g:>4}  {fed:>7}  {ref['tokens'][g]:>4}  {got['tokens'][g]:>9}  {same:>4}  "
              f"{length + g:>7}  {ref['physical'][g]:>8} / {got['physical'][g]}")
    print()
    print(f"greedy agreement: {agree} of {steps + 1} tokens"
          + (" (identical sequences)" if first is None else
             f" (first difference at step {first}; after it the two runs continue from "
             f"different tokens)"))
    print(f"teacher-forced (the full run's tokens fed to both): same next token at "
          f"{same_next} of {steps} decode steps, max |logit difference| {diff:.3g}")
    print("step 0 comes from prefill's logits, which the rewrite leaves unchanged; decode "
          "step g runs at logical position L+g-1 over min(L, C)+g-1 cached rows")
    if first is not None and path.name == FIXTURE:
        print("the bundled model has random weights: its attention is spread almost evenly "
              "over the prompt (docs/gallery), so dropping positions changes its predictions; "
              "with --capacity >= the prompt length both runs agree exactly, and the compiled "
              "compacted model matches the PyTorch SnapKV reference "
              "(python/tests/test_model_rewrite.py)")
    print()
    print(table)
    explained = ledger.note(cache_ledger, length)
    if explained:
        print(explained)
    shape_full = tuple(ref["caches"][0].shape) if ref["caches"] else ()
    shape_compact = tuple(got["caches"][0].shape) if got["caches"] else ()
    print(f"measured after the runs: full cache {full_bytes:,} B "
          f"({len(ref['caches'])} x {list(shape_full)}), compacted {compact_bytes:,} B "
          f"({len(got['caches'])} x {list(shape_compact)})")
    print()

    def compile_note(model):
        return f"{model.library.seconds:.1f} s" + (" (cached)" if model.from_cache else "")

    print(f"times: rewrite {rewrite_s:.2f} s; compile compacted {compile_note(compact)}, "
          f"full {compile_note(full)}; prefill full {ref['prefill_s'] * 1e3:.1f} ms, "
          f"compacted {got['prefill_s'] * 1e3:.1f} ms; {steps} decode steps full "
          f"{ref['decode_s'] * 1e3:.1f} ms, compacted {got['decode_s'] * 1e3:.1f} ms")
    return 0
