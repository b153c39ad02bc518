"""``snapkv compile``: ``snapkv-opt --snapkv-compress-kv-cache`` (and the CPU pipeline), or the
whole model compiled by ``iree-compile`` for a GPU (``--device cuda``, snapkv.iree_device)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .. import interface, iree_device, tools
from .arguments import (
    Formatter,
    checkpoint_option,
    dtype_option,
    model_argument,
    weights_option,
)
from .compaction import (
    check_window_capacity,
    compaction_parent,
    describe,
    option_dict,
    pass_options,
)
from .messages import CLIError, progress
from .opt import diagnostics, layer_functions, run_opt, verify_ir
from .result import Result
from .running import check_weights, stored_weights
from .sources import load_source, runner_signature


def add_parser(commands, common_options):
    p = commands.add_parser(
        "compile", parents=[common_options, compaction_parent(strict=True)],
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
                    "`python -m snapkv.runtime OUT.mlir` binds).\n\n"
                    "--device cuda compiles the rewritten model (--full-cache: the original) "
                    "with iree-compile for a GPU instead: -o OUT.vmfb, and OUT.json, the "
                    "manifest snapkv.iree_device.load() runs it from (on a machine with the "
                    "IREE runtime and no MLIR tools; docs/gpu.md). --device iree-cpu is the "
                    "same for IREE's llvm-cpu (this CPU), the stand-in without a GPU.",
        epilog="examples:\n"
               "  snapkv compile test/Models/tiny_llama_dynamic.mlir -o /tmp/compact.mlir\n"
               "  snapkv compile test/Models/tiny_llama_dynamic.mlir -o /tmp/compact.ll.mlir "
               "--gqa mean --lower --strict\n"
               "  snapkv compile my-model/ -o /tmp/my-model-compact.mlir --capacity 256   "
               "# a checkpoint directory\n"
               "  snapkv compile models/retrieval-llama -o /tmp/snapkv.vmfb --device cuda "
               "--window 16 --capacity 256")
    model_argument(p, required=True, checkpoints=True)
    checkpoint_option(p)
    dtype_option(p)
    weights_option(p)
    p.add_argument("-o", "--output", default="-", metavar="OUT.mlir",
                   help="output file ('-': stdout; with --device cuda/iree-cpu: OUT.vmfb, "
                        "and the manifest goes to OUT.json)")
    p.add_argument("--lower", action="store_true",
                   help="also lower the rewritten module to the LLVM dialect "
                        "(snapkv-opt --snapkv-cpu-pipeline)")
    p.add_argument("--prefill-func", metavar="NAME",
                   help="name of the prefill function (the pass's default: prefill)")
    p.add_argument("--decode-func", metavar="NAME",
                   help="name of the decode function (the pass's default: decode; \"\" "
                        "rewrites prefill only)")
    device = p.add_argument_group("device (IREE)")
    device.add_argument("--device", choices=DEVICES, default="cpu",
                        help="cpu: the rewritten module as MLIR (--lower: our CPU pipeline); "
                             "cuda: a .vmfb compiled by iree-compile for a CUDA GPU; iree-cpu: "
                             "the same for IREE's llvm-cpu on this CPU (the stand-in)")
    device.add_argument("--cuda-arch", metavar="SM",
                        help=f"with --device cuda: the GPU architecture, one of "
                             f"{', '.join(iree_device.CUDA_ARCHS)} (iree-compile 3.13 has no "
                             f"sm_90; sm_80 PTX runs on Hopper) "
                             f"(default: {iree_device.DEFAULT_CUDA_ARCH})")
    device.add_argument("--full-cache", action="store_true",
                        help="with --device cuda/iree-cpu: compile the original model (full "
                             "KV cache, no rewrite), the baseline the compacted one is "
                             "compared with")
    device.add_argument("--dump-executables", type=Path, metavar="DIR",
                        help="with --device cuda/iree-cpu: write iree-compile's executable "
                             "sources (DIR/sources) and binaries (DIR/binaries: PTX for cuda), "
                             "replacing those two folders")
    p.set_defaults(func=run)


# --device -> the IREE target (cpu: our own CPU pipeline, no IREE).
DEVICES = ("cpu", "cuda", "iree-cpu")


@dataclass
class CompileResult(Result):
    """The rewritten (or, with --lower, lowered) module and what was written: the summary
    goes to stderr, since stdout may be the module itself."""
    model: str
    output: str                 # the -o argument ("-": stdout)
    module: str = field(repr=False)
    sidecar: Optional[Path]     # OUT.json naming the checkpoint of the module's weights
    refused: bool               # the rewrite left the module unchanged (snapkv.refusal)
    selects: int
    in_layer_function: bool     # one select in the layer function, run once per layer
    compaction: dict
    lowered: bool
    seconds: float
    device: str = "cpu"
    # --device cuda/iree-cpu: the target, OUT.json next to OUT.vmfb, the vmfb's size and
    # how many executables (dispatches compiled for the device) it holds.
    target: Optional[str] = None
    manifest: Optional[Path] = None
    vmfb_bytes: Optional[int] = None
    executables: Optional[int] = None

    @property
    def size(self) -> int:
        return self.vmfb_bytes if self.vmfb_bytes is not None else len(self.module.encode())

    def to_json(self) -> dict:
        return dict(model=self.model, output=self.output, bytes=self.size,
                    sidecar=None if self.sidecar is None else str(self.sidecar),
                    refused=self.refused, selects=self.selects,
                    in_layer_function=self.in_layer_function, compaction=self.compaction,
                    lowered=self.lowered, seconds=self.seconds, device=self.device,
                    target=self.target,
                    manifest=None if self.manifest is None else str(self.manifest),
                    vmfb_bytes=self.vmfb_bytes, executables=self.executables)

    def render_text(self) -> str:
        if self.output == "-":
            where = "stdout"
        else:
            where = f"{self.output} ({self.size:,} bytes)"
            if self.sidecar:
                where += f" and {self.sidecar} (the checkpoint of its weights)"
        if self.refused:
            return (f"snapkv compile: the model was left unchanged (the warning above says why; "
                    f"the module records it as snapkv.refusal); --strict makes that an error. "
                    f"Wrote {where}.")
        selects = f"{self.selects} (in the layer function, which runs once per layer)" \
            if self.in_layer_function else f"{self.selects}"
        op = "snapkv.select_adaptive" if self.compaction["budget"] == "adaptive" else \
            "snapkv.select"
        lowered = ", lowered to the LLVM dialect" if self.lowered else ""
        rewrite = f"{selects} {op} inserted ({describe(self.compaction)})"
        if self.manifest is not None:
            if self.selects == 0:
                rewrite = "the original model (full cache)"
            return (f"snapkv compile: {rewrite}, compiled by iree-compile for {self.target} "
                    f"({self.executables} executables); wrote {where} and {self.manifest} "
                    f"(the manifest) in {self.seconds:.2f} s")
        return (f"snapkv compile: {rewrite}{lowered}; wrote {where} in {self.seconds:.2f} s")


def _check_device_options(args):
    if args.device == "cpu":
        for flag, given in (("--cuda-arch", args.cuda_arch), ("--full-cache", args.full_cache),
                            ("--dump-executables", args.dump_executables),
                            ("--checkpoint", args.checkpoint)):
            if given:
                raise CLIError(f"{flag} goes with --device cuda or iree-cpu")
        return None
    if args.output == "-":
        raise CLIError(f"--device {args.device} writes a .vmfb and its manifest: give -o "
                       f"OUT.vmfb")
    if args.lower:
        raise CLIError(f"--lower is our CPU pipeline; --device {args.device} compiles with "
                       f"iree-compile")
    for flag, value, default in (("--chunk", args.chunk, 0),
                                 ("--decode-interval", args.decode_interval, 0),
                                 ("--budget", args.budget, "uniform")):
        if value != default:
            raise CLIError(f"{flag} {value}: the IREE module has one-shot prefill and a "
                           f"uniform budget only (IreeModel has no @extend and no ragged "
                           f"cache)")
    if args.kv_dtype != "same":
        raise CLIError(f"--kv-dtype {args.kv_dtype}: the IREE route keeps the cache in the "
                       f"model's type (the i8 cache runs on --device cpu)")
    if args.cuda_arch and args.device != "cuda":
        raise CLIError("--cuda-arch goes with --device cuda")
    try:
        return iree_device.Target("cuda" if args.device == "cuda" else "llvm-cpu",
                                  args.cuda_arch)
    except iree_device.DeviceModelError as error:
        raise CLIError(str(error)) from None


def _compile_for_device(args, source, text: str, target, start: float) -> CompileResult:
    """--device cuda/iree-cpu: `text` compiled by iree-compile, written with its manifest."""
    from ..tools import ToolError

    progress(args.quiet, f"compiling with iree-compile for {target.describe()} (a minute or "
                         f"more) ...")
    options = None if args.full_cache else option_dict(args)
    try:
        module = iree_device.compile_module(
            text, target, dtype=getattr(args, "dtype", None) or "f32", compaction=options,
            checkpoint=source.checkpoint, max_positions=source.max_positions,
            label=source.label, dump_dir=args.dump_executables)
    except (ToolError, iree_device.DeviceModelError) as error:
        raise CLIError(f"{source.label}: {error}") from None
    try:
        manifest = module.write(Path(args.output))
    except OSError as error:
        raise CLIError(f"cannot write {args.output}: {error.strerror or error}") from None
    selects = 0 if args.full_cache else interface.describe(text).select_count()
    layered = bool(selects and layer_functions(source.text))
    return CompileResult(source.label, args.output, module.lowered, None, False, selects,
                         layered, option_dict(args), False,
                         time.perf_counter() - start, args.device, target.describe(),
                         manifest, len(module.vmfb), len(module.manifest["executables"]))


def compute(args) -> CompileResult:
    """Rewrite (and lower) MODEL and write -o OUT (with its sidecar); -o - is left to
    :func:`run`, which writes the module to stdout."""
    target = _check_device_options(args)
    check_weights(args)
    if not args.full_cache:
        check_window_capacity(args)
    source = load_source(args.model, args, args.quiet, weights=target is not None)
    path = source.path
    start = time.perf_counter()
    verify_ir(path, source.text)
    if args.full_cache:
        return _compile_for_device(args, source, source.text, target, start)
    options = pass_options(args, args.strict, source.text)
    done = run_opt([f"--snapkv-compress-kv-cache={options}"], path=path)
    if done.stderr.strip():
        print(diagnostics(done.stderr), file=sys.stderr)
    if done.returncode != 0:
        if done.returncode == tools.REFUSAL_EXIT:
            raise CLIError(f"the model rewrite refused {source.label} and --strict was given; "
                           f"nothing was written (the reason is above)")
        raise CLIError(f"snapkv-opt failed on {source.label} (exit {done.returncode}; its "
                       f"diagnostics are above); nothing was written")
    text = done.stdout
    if target is not None:
        if args.weights != "f32":
            raise CLIError(f"--weights {args.weights} goes with --device cpu")
        return _compile_for_device(args, source, text, target, start)
    (text,), _ = stored_weights(source, args, [text])
    described = interface.describe(text)
    if args.lower:
        progress(args.quiet, "lowering with --snapkv-cpu-pipeline (a few seconds) ...")
        lowered = run_opt(["--snapkv-cpu-pipeline"], text=text)
        if lowered.returncode != 0:
            raise CLIError(f"--snapkv-cpu-pipeline failed (exit {lowered.returncode}); nothing "
                           f"was written:\n{diagnostics(lowered.stderr)}")
        text = lowered.stdout
    seconds = time.perf_counter() - start
    sidecar = None
    if args.output != "-":
        try:
            Path(args.output).write_text(text)
        except OSError as error:
            raise CLIError(f"cannot write {args.output}: {error.strerror or error}") from None
        sidecar = _write_sidecar(source, Path(args.output))
    refused = described.refusal is not None
    return CompileResult(source.label, args.output, text, sidecar, refused,
                         described.select_count(),
                         not refused and bool(layer_functions(source.text)),
                         option_dict(args), args.lower, seconds)


def run(args) -> int:
    result = compute(args)
    if result.output == "-":
        sys.stdout.write(result.module)
        sys.stdout.flush()
    progress(args.quiet, result.render_text())
    return 0


def _write_sidecar(source, output: Path):
    """For a module that takes weights, ``<output stem>.json`` naming its checkpoint (the
    export's metadata when there is one), so the runner can bind it; the path written."""
    try:
        takes = bool(runner_signature(source.text, "prefill").weight_args)
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
