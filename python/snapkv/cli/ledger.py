"""``snapkv ledger``: the persistent K/V ledger (``--snapkv-report-cache``) of a model."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from typing import List, Optional

from .arguments import (
    DEFAULT_PROMPT_LENGTH,
    DEFAULT_STEPS,
    Formatter,
    dtype_option,
    int_in,
    model_argument,
)
from .compaction import check_window_capacity, describe, option_dict, rewrite
from .messages import CLIError, progress
from .opt import diagnostics, first_error, run_opt, verify_ir
from .result import Result, emit
from .sources import load_source


def add_parser(commands, common_options, compaction):
    p = commands.add_parser(
        "ledger", parents=[common_options, compaction], formatter_class=Formatter,
        help="the persistent K/V cache ledger of the rewritten model",
        description="Rewrite MODEL.mlir with snapkv-compress-kv-cache and print snapkv-opt "
                    "--snapkv-report-cache for a prompt of --prompt-length tokens followed by "
                    "--generated decoded tokens: per layer, the bytes of the native full "
                    "cache (2*B*Hkv*(L+g)*D*e) and of the compacted one "
                    "(2*B*Hc*(min(L,C)+g)*D*e, Hc = Hq for gqa expand, Hkv for mean/max; "
                    "docs/semantics.md). A module that already holds snapkv.select (the "
                    "output of `snapkv compile`) is reported as it is. Weights and "
                    "temporaries are not counted. Byte counts that do not fit in 64 bits are "
                    "an error.",
        epilog="examples:\n"
               "  snapkv ledger\n"
               "  snapkv ledger --prompt-length 4096 --generated 256 --capacity 512 "
               "--gqa mean\n"
               "  snapkv ledger --prompt-length 16384 --generated 512 --json")
    model_argument(p, checkpoints=True)
    dtype_option(p)
    p.add_argument("--prompt-length", "-L", type=int_in(1, "the prompt length"),
                   default=DEFAULT_PROMPT_LENGTH, metavar="L", help="prompt length L")
    p.add_argument("--prompt-len", type=int_in(1, "the prompt length"),
                   dest="prompt_length", help=argparse.SUPPRESS)
    p.add_argument("--generated", "-g", type=int_in(0, "the generated count"),
                   default=DEFAULT_STEPS, metavar="G",
                   help="decoded tokens whose K/V have been appended")
    p.add_argument("--json", action="store_true",
                   help="print the ledger as one JSON object instead of a table")
    p.set_defaults(func=run)


def _report_cache(text: str, prompt_length: int, generated: int, form: str) -> str:
    """The stdout of snapkv-opt --snapkv-report-cache in `form` (table or json)."""
    done = run_opt([f"--snapkv-report-cache=prompt-length={prompt_length} "
                    f"generated={generated} format={form}", "-o", os.devnull], text=text)
    if done.returncode != 0:
        raise CLIError(first_error(done.stderr))
    return done.stdout


def ledger_text(text: str, prompt_length: int, generated: int) -> str:
    """The ledger of the module `text` as the table snapkv-report-cache prints for people."""
    return _report_cache(text, prompt_length, generated, "table").rstrip("\n")


def ledger_data(text: str, prompt_length: int, generated: int) -> dict:
    """The ledger of the module `text` as {layers: [...], total: {...}}, from
    snapkv-report-cache format=json: each layer {layer, gqa, B, Hkv, Hc, D, e, row_bytes (D * e,
    or D + 4 with an i8 cache), kept, full,
    compacted, prefill_peak_rows, prefill_peak, decode_peak_rows, decode_peak}, the total
    {layers, full, compacted, ratio, prefill_peak, decode_peak} (ratio None when full is 0)."""
    out = _report_cache(text, prompt_length, generated, "json")
    try:
        report = json.loads(out)
        layers, total = report["layers"], report["total"]
        if (report["prompt_length"], report["generated"]) != (prompt_length, generated):
            raise ValueError("the ledger is for another prompt length or generated count")
        ratio = total["ratio"]
        # JSON writes a whole double such as 1.0 as 1: the ratio stays a float.
        total = dict(layers=total["layers"], full=total["full"], compacted=total["compacted"],
                     ratio=None if ratio is None else float(ratio),
                     prefill_peak=total["prefill_peak"], decode_peak=total["decode_peak"])
    except (ValueError, KeyError, TypeError) as error:
        raise CLIError(f"unexpected output of snapkv-opt --snapkv-report-cache ... format=json "
                       f"({error}):\n{out}") from None
    return dict(layers=layers, total=total)


def note(ledger: dict, prompt_length: int) -> Optional[str]:
    """A line explaining a ledger whose compacted cache is not smaller than the full one."""
    full, compact = ledger["total"]["full"], ledger["total"]["compacted"]
    if full == 0 or compact < full or not ledger["layers"]:
        return None
    expand = any(layer["gqa"] == "expand" for layer in ledger["layers"])
    if ledger["layers"][0]["kept"] >= prompt_length:
        return ("note: the compacted cache is not smaller here: the prompt is not longer than "
                "the capacity, so nothing is dropped" + (
                    ", and with gqa expand the cache holds Hq heads where the full cache holds "
                    "Hkv." if expand else "."))
    if not expand:
        return None
    return ("note: the compacted cache is not smaller here. With gqa expand it holds Hq heads "
            "where the full cache holds Hkv (docs/semantics.md), so it saves memory only when "
            "Hq*(min(L,C)+g) < Hkv*(L+g): use a longer prompt, a smaller --capacity, or "
            "--gqa mean/max (Hkv heads).")


@dataclass
class LedgerResult(Result):
    """The ledger of one model for a prompt and a generated count: snapkv-report-cache's
    numbers (`layers`, `total`, as :func:`ledger_data` reads them) and its own table, which
    the text shows as the tool prints it."""
    model: str
    compaction: Optional[dict]  # None: the module already held snapkv.select, as given
    prompt_length: int
    generated: int
    layers: List[dict]
    total: dict
    table: str

    @property
    def note(self) -> Optional[str]:
        return note(dict(layers=self.layers, total=self.total), self.prompt_length)

    def to_json(self) -> dict:
        return dict(model=self.model, compaction=self.compaction,
                    prompt_length=self.prompt_length, generated=self.generated,
                    layers=self.layers, total=self.total, note=self.note)

    def render_text(self) -> str:
        how = "as given (already rewritten)" if self.compaction is None else \
            f"rewritten with {describe(self.compaction)}"
        return "\n".join([f"model: {self.model}, {how}", self.table]
                         + ([self.note] if self.note else []))


def compute(args) -> LedgerResult:
    source = load_source(args.model, args, args.quiet, weights=False)
    path, text = source.path, source.text
    if verify_ir(path, text).select_count():
        progress(args.quiet, f"{source.label} already holds snapkv.select: reporting it as it is "
                             f"(the compaction options are not used)")
        module, options = text, None
    else:
        check_window_capacity(args)
        module, warnings, _ = rewrite(path, args)
        if warnings.strip():
            progress(False, diagnostics(warnings))
        options = option_dict(args)
    ledger = ledger_data(module, args.prompt_length, args.generated)
    return LedgerResult(source.label, options, args.prompt_length, args.generated,
                        ledger["layers"], ledger["total"],
                        ledger_text(module, args.prompt_length, args.generated))


def run(args) -> int:
    emit(compute(args), args.json)
    return 0
