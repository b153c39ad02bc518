"""``snapkv compile``: ``snapkv-opt --snapkv-compress-kv-cache`` (and the CPU pipeline)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from . import common
from .common import REFUSED, CLIError, Formatter, progress, show


def add_parser(commands, common_options):
    p = commands.add_parser(
        "compile", parents=[common_options, common.compaction_parent(strict=True)],
        formatter_class=Formatter,
        help="rewrite a model for a SnapKV-compacted cache (snapkv-compress-kv-cache)",
        description="Run snapkv-opt --snapkv-compress-kv-cache on MODEL.mlir: prefill returns "
                    "the SnapKV-selected K/V of every layer ([B, Hc, min(L, C), D]) and "
                    "decode attends over that compacted cache with logical positions "
                    "(docs/model-rewrite.md). The pass's warnings are printed. A module it "
                    "does not recognise with certainty is left unchanged with a warning "
                    "(--strict: an error, non-zero exit). --lower also runs "
                    "--snapkv-cpu-pipeline (LLVM dialect, for mlir-translate / mlir-runner).",
        epilog="examples:\n"
               "  snapkv compile test/Models/tiny_llama_dynamic.mlir -o /tmp/compact.mlir\n"
               "  snapkv compile test/Models/tiny_llama_dynamic.mlir -o /tmp/compact.ll.mlir "
               "--gqa mean --lower --strict")
    common.model_argument(p, required=True)
    p.add_argument("-o", "--output", default="-", metavar="OUT.mlir",
                   help="output file ('-': stdout)")
    p.add_argument("--lower", action="store_true",
                   help="also lower the rewritten module to the LLVM dialect "
                        "(snapkv-opt --snapkv-cpu-pipeline)")
    p.add_argument("--prefill-func", metavar="NAME",
                   help="name of the prefill function (the pass's default: prefill)")
    p.add_argument("--decode-func", metavar="NAME",
                   help="name of the decode function (the pass's default: decode; \"\" "
                        "rewrites prefill only)")
    p.set_defaults(func=run)


def run(args) -> int:
    common.check_window_capacity(args)
    path = common.resolve_model(args.model, args.quiet)
    start = time.perf_counter()
    done = common.run_opt(
        [f"--snapkv-compress-kv-cache={common.pass_options(args, args.strict)}"], path=path)
    if done.stderr.strip():
        print(common.diagnostics(done.stderr), file=sys.stderr)
    if done.returncode != 0:
        if REFUSED in done.stderr:
            raise CLIError(f"the model rewrite refused {show(path)} and --strict was given; "
                           f"nothing was written (the reason is above)")
        raise CLIError(f"snapkv-opt failed on {show(path)} (exit {done.returncode}; its "
                       f"diagnostics are above); nothing was written")
    text = done.stdout
    refused = REFUSED in done.stderr
    selects = common.count_selects(text)
    if args.lower:
        progress(args.quiet, "lowering with --snapkv-cpu-pipeline (a few seconds) ...")
        lowered = common.run_opt(["--snapkv-cpu-pipeline"], text=text)
        if lowered.returncode != 0:
            raise CLIError(f"--snapkv-cpu-pipeline failed (exit {lowered.returncode}); nothing "
                           f"was written:\n{common.diagnostics(lowered.stderr)}")
        text = lowered.stdout
    seconds = time.perf_counter() - start
    if args.output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        where = "stdout"
    else:
        try:
            Path(args.output).write_text(text)
        except OSError as error:
            raise CLIError(f"cannot write {args.output}: {error.strerror or error}") from None
        where = f"{args.output} ({len(text.encode()):,} bytes)"
    if refused:
        progress(args.quiet, f"snapkv compile: the module was left unchanged (the warning "
                             f"above says why); --strict makes that an error. Wrote {where}.")
    else:
        lowered_note = ", lowered to the LLVM dialect" if args.lower else ""
        progress(args.quiet, f"snapkv compile: {selects} snapkv.select inserted "
                             f"({common.describe_options(args)}){lowered_note}; wrote {where} "
                             f"in {seconds:.2f} s")
    return 0
