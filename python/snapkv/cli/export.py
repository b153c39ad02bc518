"""``snapkv export``: regenerate the tiny-Llama fixtures with torch-mlir."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from ..tools import ToolError
from . import locate
from .arguments import DTYPES, Formatter, int_in
from .locate import frontend_hint, load_checkpoint
from .messages import CLIError, progress, show
from .result import Result, emit


def add_parser(commands, common_options):
    p = commands.add_parser(
        "export", parents=[common_options], formatter_class=Formatter,
        help="export your own checkpoint (--hf DIR), or regenerate the tiny-Llama fixtures "
             "(needs torch)",
        description="With --hf DIR: export a local HuggingFace checkpoint (config.json and "
                    "safetensors as save_pretrained writes them; Llama, Mistral, Qwen2, Qwen3, "
                    "Phi-3, Gemma) to linalg-on-tensors MLIR with torch-mlir's FX importer: "
                    "OUT/model.mlir holds @prefill and @decode, which call one function per "
                    "layer kind, with the weights as function arguments (never inlined; the "
                    "runner maps them from the checkpoint), and OUT/model.json records the "
                    "checkpoint, the config, the weight names and the positions the module is "
                    "exact for. Nothing is downloaded; the architecture is built on the meta "
                    "device, so no weight is loaded.\n\n"
                    "Without --hf: export the bundled tiny random-weight HuggingFace Llama "
                    "(2 layers, 4 query heads, 2 kv heads, head dim 16, weights inlined): "
                    "@prefill and @decode in one module (docs/model-ir.md). Deterministic.\n\n"
                    "Needs: pip install torch transformers torch-mlir (the pinned versions: "
                    "pip install -e 'python[frontend]').",
        epilog="examples:\n  snapkv export --hf my-model --out my-model-mlir\n"
               "  snapkv export --out /tmp/models --dynamic")
    p.add_argument("--hf", type=Path, metavar="DIR",
                   help="a local HuggingFace checkpoint directory to export")
    p.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa",
                   help="with --hf: the HF attention implementation traced (sdpa is HF's "
                        "default; the rewrite accepts both)")
    p.add_argument("--logits", choices=("last", "all"), default="last",
                   help="with --hf: prefill returns the last row's logits [1, 1, V] (what "
                        "generation needs) or every row's [1, L, V]")
    p.add_argument("--extend", action="store_true",
                   help="with --hf: also export @extend (a prompt chunk over the caches so far), "
                        "which chunked prefill (--chunk of generate, compile and ledger) needs")
    p.add_argument("--batch", type=int_in(0, "--batch", 1024), default=0, metavar="N",
                   help="with --hf: also export @decode_batch, one decode step of N sequences "
                        "of different lengths (snapkv batch and serve use it)")
    p.add_argument("--dtype", choices=DTYPES, default="f32",
                   help="with --hf: the element type of the weights, activations and K/V "
                        "caches (matmul accumulation, softmax and RMSNorm stay f32, as in HF's "
                        "own model in that dtype; logits are f32)")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="where to write: with --hf, model.mlir and model.json (default: "
                        "<checkpoint name>-mlir in the current directory); otherwise "
                        "tiny_llama.mlir, tiny_llama_dynamic.mlir and tiny_llama.json "
                        "(default: the checkout's test/Models)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--dynamic", action="store_true",
                       help="only the dynamic-shape module (tiny_llama_dynamic.mlir: any "
                            "prompt length, a growing cache; what generate runs)")
    which.add_argument("--static", action="store_true",
                       help="only the static-shape module (tiny_llama.mlir: L = 64)")
    p.add_argument("--check", action="store_true",
                   help="compile and run the written modules (our lowering and upstream's) "
                        "and compare them with PyTorch")
    p.set_defaults(func=run)


@dataclass
class Check:
    """One written module compiled by one pipeline and compared with PyTorch (--check)."""
    module: str
    pipeline: str
    difference: Optional[float]  # max |mlir - torch|; None when it failed to run
    error: Optional[str] = None  # the first line of why

    @property
    def ok(self) -> bool:
        return self.error is None and not self.difference > 1e-3

    def render_text(self) -> str:
        shown = f"failed: {self.error}" if self.error is not None else f"{self.difference:.3g}"
        return f"{self.module} via {self.pipeline}: max |mlir - torch| = {shown}"


@dataclass
class FixturesResult(Result):
    """The tiny-Llama fixtures written (file names and bytes, in `directory`), the metadata
    JSON left unwritten when only one module was exported, and the --check comparisons."""
    directory: Path
    written: List[Tuple[str, int]]
    skipped: Optional[str]       # the metadata JSON's name when it was not written
    checks: List[Check]

    @property
    def failed(self) -> bool:
        return not all(check.ok for check in self.checks)

    def to_json(self) -> dict:
        return dict(directory=str(self.directory),
                    written=[dict(path=str(self.directory / name), bytes=size)
                             for name, size in self.written],
                    skipped=self.skipped,
                    checks=[dataclasses.asdict(check) for check in self.checks])

    def render_text(self) -> str:
        lines = [f"wrote {self.directory / name} ({size:,} bytes)" for name, size in self.written]
        if self.skipped is not None:
            lines.append(f"{self.skipped} not written (it describes both modules; export both "
                         f"to refresh it)")
        return "\n".join(lines + [check.render_text() for check in self.checks])


def export_models(out: Path, *, dynamic: bool, static: bool, check: bool,
                  quiet: bool) -> FixturesResult:
    missing = locate.missing_frontend_packages()
    if missing:
        raise CLIError(f"`snapkv export` cannot run here: {frontend_hint(missing)}")
    from ..frontend import export  # imports torch

    out.mkdir(parents=True, exist_ok=True)
    spec = export.TinyLlamaSpec()
    texts = {}
    for wanted, name, flag in ((static, export.STATIC_FILE, False),
                               (dynamic, export.DYNAMIC_FILE, True)):
        if wanted:
            progress(quiet, f"exporting {name} (torch.export + torch-mlir FX importer) ...")
            texts[name] = export.export_text(spec, dynamic=flag)
    written = []
    for name, text in texts.items():
        (out / name).write_text(text)
        written.append((name, len(text.encode())))
    skipped = export.JSON_FILE
    if dynamic and static:
        meta = json.dumps(export.metadata(spec, texts), indent=1) + "\n"
        (out / export.JSON_FILE).write_text(meta)
        written.append((export.JSON_FILE, len(meta.encode())))
        skipped = None
    return FixturesResult(out, written, skipped,
                          _check(texts, spec, export, quiet) if check else [])


def _check(texts, spec, export, quiet: bool) -> List[Check]:
    """What export.check does, for the modules written this time only."""
    from ..frontend import harness

    progress(quiet, "checking the modules against PyTorch (our lowering and upstream's) ...")
    checks = []
    for name, length in ((export.STATIC_FILE, spec.prefill_len),
                         (export.DYNAMIC_FILE, export.DYNAMIC_EXAMPLE_LEN)):
        if name not in texts:
            continue
        ids, token, position, prefill, decode = export._example(spec, length)
        want = [t.numpy() for t in prefill] + [t.numpy() for t in decode]
        for pipeline in ("snapkv", "upstream"):
            try:
                got = harness.run_prefill_decode(texts[name], ids.numpy(), int(token.item()),
                                                 int(position.item()), pipeline=pipeline)
                checks.append(Check(name, pipeline, max(float(np.max(np.abs(g - w)))
                                                        for g, w in zip(got, want))))
            except ToolError as error:
                checks.append(Check(name, pipeline, None, str(error).splitlines()[0]))
    return checks


@dataclass
class CheckpointExportResult(Result):
    """A checkpoint exported with --hf: the module and its JSON, with what they hold."""
    module: Path
    size: int                 # the module's bytes
    weights: int              # weights taken as function arguments
    layers: int
    meta: Path                # the JSON next to the module
    checkpoint: str
    max_positions: int
    notes: List[str]

    def to_json(self) -> dict:
        return dict(module=str(self.module), bytes=self.size, weights=self.weights,
                    layers=self.layers, meta=str(self.meta), checkpoint=self.checkpoint,
                    max_positions=self.max_positions, notes=self.notes)

    def render_text(self) -> str:
        return "\n".join(
            [f"note: {note}" for note in self.notes]
            + [f"wrote {self.module} ({self.size:,} bytes: {self.weights} weights as "
               f"arguments, {self.layers} layers sharing one function each for prefill and "
               f"decode)",
               f"wrote {self.meta} (checkpoint {self.checkpoint}, up to "
               f"{self.max_positions:,} positions)"])


def export_checkpoint(args) -> CheckpointExportResult:
    from .. import hf

    if args.dynamic or args.static or args.check:
        raise CLIError("--dynamic, --static and --check are for the bundled fixtures, not --hf "
                       "(an --hf export always has dynamic shapes; `snapkv generate DIR` runs "
                       "it next to the original)")
    checkpoint = load_checkpoint(args.hf)
    out = args.out if args.out is not None else Path(f"{checkpoint.path.name}-mlir")
    progress(args.quiet, f"exporting {show(args.hf)}: {checkpoint.describe()} ...")
    try:
        exported = hf.export(checkpoint, hf.ExportOptions(args.attention, args.logits,
                                                          args.extend, args.dtype, args.batch),
                             out=out, log=lambda m: progress(args.quiet, f"  {m}"))
    except hf.CheckpointError as error:
        raise CLIError(f"{show(args.hf)}: {error}") from None
    meta = exported.meta
    return CheckpointExportResult(
        exported.path, len(exported.text.encode()), len(meta["weights"]),
        meta["config"]["num_hidden_layers"], exported.path.with_suffix(".json"),
        meta["checkpoint"], meta["max_position_embeddings"], list(meta.get("notes", [])))


def run(args) -> int:
    if args.hf is not None:
        emit(export_checkpoint(args), as_json=False)
        return 0
    if args.attention != "sdpa" or args.logits != "last" or args.extend or \
            args.dtype != "f32" or args.batch:
        raise CLIError("--attention, --logits, --extend, --batch and --dtype go with --hf "
                       "(the bundled fixtures are eager attention, all logits, f32)")
    dynamic = args.dynamic or not args.static
    static = args.static or not args.dynamic
    result = export_models(args.out if args.out is not None else locate.models_dir(),
                           dynamic=dynamic, static=static, check=args.check, quiet=args.quiet)
    emit(result, as_json=False)
    if result.failed:
        raise CLIError("the exported modules do not match PyTorch (see above)")
    return 0
