"""``snapkv export``: regenerate the tiny-Llama fixtures with torch-mlir."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..tools import ToolError
from . import common
from .common import CLIError, Formatter, progress


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


def export_models(out: Path, *, dynamic: bool, static: bool, check: bool, quiet: bool):
    missing = common.missing_frontend_packages()
    if missing:
        raise CLIError(f"`snapkv export` cannot run here: {common.frontend_hint(missing)}")
    from ..frontend import export  # imports torch

    out.mkdir(parents=True, exist_ok=True)
    spec = export.TinyLlamaSpec()
    texts = {}
    for wanted, name, flag in ((static, export.STATIC_FILE, False),
                               (dynamic, export.DYNAMIC_FILE, True)):
        if wanted:
            progress(quiet, f"exporting {name} (torch.export + torch-mlir FX importer) ...")
            texts[name] = export.export_text(spec, dynamic=flag)
    for name, text in texts.items():
        (out / name).write_text(text)
        print(f"wrote {out / name} ({len(text.encode()):,} bytes)")
    if dynamic and static:
        meta = json.dumps(export.metadata(spec, texts), indent=1) + "\n"
        (out / export.JSON_FILE).write_text(meta)
        print(f"wrote {out / export.JSON_FILE} ({len(meta.encode()):,} bytes)")
    else:
        print(f"{export.JSON_FILE} not written (it describes both modules; export both to "
              f"refresh it)")
    if check:
        _check(texts, spec, export, quiet)


def _check(texts, spec, export, quiet: bool):
    """What export.check does, for the modules written this time only."""
    from ..frontend import harness

    progress(quiet, "checking the modules against PyTorch (our lowering and upstream's) ...")
    failed = False
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
                diff = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
                shown = f"{diff:.3g}"
                failed |= diff > 1e-3
            except ToolError as error:
                shown = f"failed: {str(error).splitlines()[0]}"
                failed = True
            print(f"{name} via {pipeline}: max |mlir - torch| = {shown}")
    if failed:
        raise CLIError("the exported modules do not match PyTorch (see above)")


def export_checkpoint(args) -> int:
    from .. import hf

    if args.dynamic or args.static or args.check:
        raise CLIError("--dynamic, --static and --check are for the bundled fixtures, not --hf "
                       "(an --hf export always has dynamic shapes; `snapkv generate DIR` runs "
                       "it next to the original)")
    checkpoint = common.load_checkpoint(args.hf)
    out = args.out if args.out is not None else Path(f"{checkpoint.path.name}-mlir")
    progress(args.quiet, f"exporting {common.show(args.hf)}: {checkpoint.describe()} ...")
    try:
        exported = hf.export(checkpoint, hf.ExportOptions(args.attention, args.logits),
                             out=out, log=lambda m: progress(args.quiet, f"  {m}"))
    except hf.CheckpointError as error:
        raise CLIError(f"{common.show(args.hf)}: {error}") from None
    for note in exported.meta.get("notes", []):
        print(f"note: {note}")
    meta_path = exported.path.with_suffix(".json")
    print(f"wrote {exported.path} ({len(exported.text.encode()):,} bytes: "
          f"{len(exported.meta['weights'])} weights as arguments, "
          f"{exported.meta['config']['num_hidden_layers']} layers sharing one function each "
          f"for prefill and decode)")
    print(f"wrote {meta_path} (checkpoint {exported.meta['checkpoint']}, up to "
          f"{exported.meta['max_position_embeddings']:,} positions)")
    return 0


def run(args) -> int:
    if args.hf is not None:
        return export_checkpoint(args)
    if args.attention != "sdpa" or args.logits != "last":
        raise CLIError("--attention and --logits go with --hf (the bundled fixtures are eager "
                       "attention, all logits)")
    dynamic = args.dynamic or not args.static
    static = args.static or not args.dynamic
    export_models(args.out if args.out is not None else common.models_dir(), dynamic=dynamic,
                  static=static, check=args.check, quiet=args.quiet)
    return 0
