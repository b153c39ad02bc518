"""``snapkv compile``: ``snapkv-opt --snapkv-compress-kv-cache`` (and the CPU pipeline)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .. import interface, tools
from . import common
from .common import CLIError, Formatter, progress


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
                    "--snapkv-cpu-pipeline (LLVM dialect, for mlir-translate / mlir-runner).\n\n"
                    "MODEL may be a checkpoint directory: it is exported first (weights as "
                    "function arguments, one function per layer; cached), and the rewrite "
                    "names the layer functions itself. For a module that takes weights, "
                    "OUT.json is written next to -o OUT.mlir, naming the checkpoint (what "
                    "`python -m snapkv.runtime OUT.mlir` binds).",
        epilog="examples:\n"
               "  snapkv compile test/Models/tiny_llama_dynamic.mlir -o /tmp/compact.mlir\n"
               "  snapkv compile test/Models/tiny_llama_dynamic.mlir -o /tmp/compact.ll.mlir "
               "--gqa mean --lower --strict\n"
               "  snapkv compile my-model/ -o /tmp/my-model-compact.mlir --capacity 256   "
               "# a checkpoint directory")
    common.model_argument(p, required=True, checkpoints=True)
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
    source = common.load_source(args.model, args, args.quiet, weights=False)
    path = source.path
    start = time.perf_counter()
    common.verify_ir(path, source.text)
    options = common.pass_options(args, args.strict, source.text)
    done = common.run_opt([f"--snapkv-compress-kv-cache={options}"], path=path)
    if done.stderr.strip():
        print(common.diagnostics(done.stderr), file=sys.stderr)
    if done.returncode != 0:
        if done.returncode == tools.REFUSAL_EXIT:
            raise CLIError(f"the model rewrite refused {source.label} and --strict was given; "
                           f"nothing was written (the reason is above)")
        raise CLIError(f"snapkv-opt failed on {source.label} (exit {done.returncode}; its "
                       f"diagnostics are above); nothing was written")
    text = done.stdout
    described = interface.describe(text)
    refused = described.refusal is not None
    selects = described.select_count()
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
        sidecar = _write_sidecar(source, Path(args.output))
        if sidecar:
            where += f" and {sidecar} (the checkpoint of its weights)"
    if refused:
        progress(args.quiet, f"snapkv compile: the model was left unchanged (the warning "
                             f"above says why; the module records it as snapkv.refusal); "
                             f"--strict makes that an error. Wrote {where}.")
    else:
        lowered_note = ", lowered to the LLVM dialect" if args.lower else ""
        if common.layer_functions(source.text):
            selects = f"{selects} (in the layer function, which runs once per layer)"
        op = "snapkv.select_adaptive" if args.budget == "adaptive" else "snapkv.select"
        progress(args.quiet, f"snapkv compile: {selects} {op} inserted "
                             f"({common.describe_options(args)}){lowered_note}; wrote {where} "
                             f"in {seconds:.2f} s")
    return 0


def _write_sidecar(source, output: Path):
    """For a module that takes weights, ``<output stem>.json`` naming its checkpoint (the
    export's metadata when there is one), so the runner can bind it; the path written."""
    try:
        takes = bool(common.runner_signature(source.text, "prefill").weight_args)
    except ValueError:
        return None
    if not takes:
        return None
    meta_file = source.path.with_suffix(".json")
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError):
        meta = {}
    if "checkpoint" not in meta:
        return None  # nothing to point at: the runner will ask for the checkpoint
    sidecar = output.with_suffix(".json")
    if sidecar.resolve() == meta_file.resolve():
        return None
    try:
        sidecar.write_text(json.dumps(meta, indent=1) + "\n")
    except OSError as error:
        raise CLIError(f"cannot write {sidecar}: {error.strerror or error}") from None
    return sidecar
