"""``snapkv ledger``: the persistent K/V ledger (``--snapkv-report-cache``) of a model."""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Optional

from . import common
from .common import DEFAULT_PROMPT_LENGTH, DEFAULT_STEPS, CLIError, Formatter, progress

_ROW = re.compile(r"^(\d+)\s+(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d,]+)\s+"
                  r"([\d,]+)$", re.M)
_TOTAL = re.compile(r"^total: (\d+) layers, full ([\d,]+) B, compacted ([\d,]+) B", re.M)
_COLUMNS = ("layer", "gqa", "B", "Hkv", "Hc", "D", "e", "kept", "full", "compacted")


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
    common.model_argument(p, checkpoints=True)
    p.add_argument("--prompt-length", "-L", type=common.int_in(1, "the prompt length"),
                   default=DEFAULT_PROMPT_LENGTH, metavar="L", help="prompt length L")
    p.add_argument("--prompt-len", type=common.int_in(1, "the prompt length"),
                   dest="prompt_length", help=argparse.SUPPRESS)
    p.add_argument("--generated", "-g", type=common.int_in(0, "the generated count"),
                   default=DEFAULT_STEPS, metavar="G",
                   help="decoded tokens whose K/V have been appended")
    p.add_argument("--json", action="store_true",
                   help="print the ledger as one JSON object instead of a table")
    p.set_defaults(func=run)


def ledger_text(text: str, prompt_length: int, generated: int) -> str:
    done = common.run_opt([f"--snapkv-report-cache=prompt-length={prompt_length} "
                           f"generated={generated}", "-o", os.devnull], text=text)
    if done.returncode != 0:
        raise CLIError(common.first_error(done.stderr))
    return done.stdout.rstrip("\n")


def parse(ledger: str) -> dict:
    """The table of snapkv-report-cache as {layers: [...], total: {...}}."""
    layers = []
    for match in _ROW.finditer(ledger):
        values = [int(v.replace(",", "")) if v.replace(",", "").isdigit() else v
                  for v in match.groups()]
        layers.append(dict(zip(_COLUMNS, values)))
    total = _TOTAL.search(ledger)
    if not total:
        raise CLIError(f"unexpected output of snapkv-opt --snapkv-report-cache:\n{ledger}")
    full, compacted = (int(g.replace(",", "")) for g in total.groups()[1:])
    return dict(layers=layers, total=dict(layers=int(total.group(1)), full=full,
                                          compacted=compacted,
                                          ratio=compacted / full if full else None))


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


def run(args) -> int:
    source = common.load_source(args.model, args, args.quiet, weights=False)
    path, text = source.path, source.text
    if common.count_selects(text):
        progress(args.quiet, f"{source.label} already holds snapkv.select: reporting it as it is "
                             f"(the compaction options are not used)")
        module, options = text, None
        how = "as given (already rewritten)"
    else:
        common.check_window_capacity(args)
        module, warnings, _ = common.rewrite(path, args)
        if warnings.strip():
            progress(False, common.diagnostics(warnings))
        options = common.option_dict(args)
        how = f"rewritten with {common.describe_options(args)}"
    table = ledger_text(module, args.prompt_length, args.generated)
    ledger = parse(table)
    explained = note(ledger, args.prompt_length)
    if args.json:
        print(json.dumps(dict(model=source.label, compaction=options,
                              prompt_length=args.prompt_length, generated=args.generated,
                              **ledger, note=explained), indent=1))
        return 0
    print(f"model: {source.label}, {how}")
    print(table)
    if explained:
        print(explained)
    return 0
