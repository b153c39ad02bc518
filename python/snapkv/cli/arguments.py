"""Argument parsing: the parser (one-line errors with suggestions), argument types, the help
formatter, and the options several subcommands share (output, prompt, MODEL, --dtype,
--checkpoint)."""

from __future__ import annotations

import argparse
import difflib
import re
import textwrap
from pathlib import Path
from typing import List

from .locate import FIXTURE

PROG = "snapkv"
DEFAULT_PROMPT_LENGTH, DEFAULT_STEPS, DEFAULT_SEED = 96, 16, 0
# --dtype: the element type a checkpoint is exported in (weights, activations, K/V caches).
DTYPES = ("f32", "bf16", "f16")
INT64_MAX = 2 ** 63 - 1


class ArgumentParser(argparse.ArgumentParser):
    """Errors are one line (with "did you mean" for a mistyped subcommand or option) and
    exit status 2."""

    def error(self, message):
        message = _suggest(self, message)
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the "
                     f"options)\n")


def _suggest(parser: argparse.ArgumentParser, message: str) -> str:
    choice = re.match(r"argument (\S+): invalid choice: '([^']*)'", message)
    if choice:
        for action in parser._actions:
            if action.choices and choice.group(1) in (action.dest, action.metavar,
                                                      *action.option_strings):
                close = difflib.get_close_matches(choice.group(2), list(action.choices), 1)
                if close:
                    return (f"{message.split(' (choose from')[0]}; did you mean "
                            f"'{close[0]}'?")
        return message
    unknown = re.match(r"unrecognized arguments: (.*)", message)
    if unknown:
        known = [s for a in parser._actions for s in a.option_strings
                 if a.help != argparse.SUPPRESS]
        hints = []
        for word in unknown.group(1).split():
            if word.startswith("-"):
                close = difflib.get_close_matches(word.split("=")[0], known, 1)
                if close:
                    hints.append(f"{word}: did you mean {close[0]}?")
        if hints:
            return f"{message} ({'; '.join(hints)})"
    return message


def int_in(low: int, what: str, high: int = INT64_MAX):
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {value!r}") \
                from None
        if number < low:
            raise argparse.ArgumentTypeError(f"{what} must be >= {low}, got {number}")
        if number > high:
            raise argparse.ArgumentTypeError(f"{what} must be <= {high}, got {number}")
        return number
    return parse


def odd_kernel(value: str) -> int:
    number = int_in(1, "the kernel size")(value)
    if number % 2 == 0:
        raise argparse.ArgumentTypeError(f"the kernel size must be odd, got {number}")
    return number


def token_ids(value: str) -> List[int]:
    pieces = [p for p in re.split(r"[\s,]+", value.strip()) if p]
    if not pieces:
        raise argparse.ArgumentTypeError("the prompt is empty")
    try:
        return [int(p) for p in pieces]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"the prompt must be token ids (integers separated by spaces or commas), "
            f"got {value!r}") from None


def layer_list(value: str) -> List[int]:
    try:
        layers = [int(p) for p in value.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--layers takes layer numbers like 0,1; got {value!r}") from None
    if not layers or min(layers) < 0:
        raise argparse.ArgumentTypeError(f"--layers takes layer numbers >= 0; got {value!r}")
    return layers


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Wraps each prose paragraph of a description, keeps pre-formatted ones (examples) as
    they are, and shows each option's default."""

    def _fill_text(self, text, width, indent):
        paragraphs = []
        for paragraph in text.split("\n\n"):
            if paragraph.startswith("example") or "\n  " in paragraph:
                paragraphs.append(paragraph)
            else:
                paragraphs.append(textwrap.fill(" ".join(paragraph.split()), min(width, 88),
                                                initial_indent=indent, subsequent_indent=indent))
        return "\n\n".join(paragraphs)

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if "%(default)" not in text and action.option_strings and default is not None \
                and default is not False and default is not argparse.SUPPRESS:
            text += " (default: %(default)s)"
        return text


def common_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("output")
    group.add_argument("-q", "--quiet", action="store_true",
                       help="no progress lines on stderr")
    return parent


def add_prompt_options(parser: argparse.ArgumentParser, text: bool = False):
    group = parser.add_argument_group("prompt")
    exclusive = group.add_mutually_exclusive_group()
    if text:
        exclusive.add_argument("--text", metavar='"TEXT"',
                               help="the prompt as text, tokenised with the checkpoint's own "
                                    "tokenizer exactly as AutoTokenizer.from_pretrained(DIR)"
                                    "(TEXT).input_ids does (BOS as HF adds it)")
        exclusive.add_argument("--prompt-file", type=Path, metavar="FILE",
                               help="the prompt as text read from FILE (UTF-8), tokenised "
                                    "like --text")
        group.add_argument("--chat", action="store_true",
                           help="with --text/--prompt-file: apply the checkpoint's chat "
                                "template (one user turn, generation prompt added) first")
    exclusive.add_argument("--prompt-length", "-L", type=int_in(1, "the prompt length"),
                           dest="prompt_length", metavar="L",
                           help=f"a prompt of L random token ids drawn with --seed "
                                f"(default: {DEFAULT_PROMPT_LENGTH})")
    # The old spelling, kept working but not advertised.
    exclusive.add_argument("--prompt-len", type=int_in(1, "the prompt length"),
                           dest="prompt_length", help=argparse.SUPPRESS)
    exclusive.add_argument("--prompt", type=token_ids, metavar='"IDS"',
                           help='the prompt as token ids, e.g. "5 17 42 ..." or "5,17,42" '
                                "(each in [0, vocabulary size))")
    group.add_argument("--seed", type=int_in(0, "the seed"), default=DEFAULT_SEED,
                       help="seed of the random prompt (numpy default_rng)")
    group.add_argument("--max-positions", type=int_in(1, "--max-positions"), metavar="N",
                       help="the model's max_position_embeddings: prompts (and generations) "
                            "that reach position N are refused (default: read from the JSON "
                            "next to the model, e.g. test/Models/tiny_llama.json; no limit "
                            "if there is none)")


def model_argument(parser, required=False, checkpoints=False):
    """MODEL: a module file; with `checkpoints`, also a HuggingFace checkpoint directory."""
    metavar = "MODEL" if checkpoints else "MODEL.mlir"
    what = ("a module imported by torch-mlir with @prefill and @decode (docs/model-ir.md)"
            + (", or a local HuggingFace checkpoint directory (config.json + safetensors from "
               "save_pretrained), exported first with weights as arguments and cached "
               "(docs/user-guide.md, \"Your own model\")" if checkpoints else ""))
    if required:
        parser.add_argument("model", type=Path, metavar=metavar, help=what)
    else:
        parser.add_argument("model", type=Path, nargs="?", metavar=metavar,
                            help=f"{what}; default: the bundled test/Models/{FIXTURE} "
                                 f"(exported first if missing, which needs torch)")


def dtype_option(parser, module_files: bool = True):
    """--dtype; `module_files`: the command also takes a MODEL.mlir, whose type is fixed."""
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="element type of the weights, activations and K/V caches (full "
                             "and compacted) when a checkpoint is exported: matmuls "
                             "accumulate, and softmax and RMSNorm compute, in f32 as in HF's "
                             "own model in that dtype; logits are f32; bf16 matmuls use "
                             "AVX512_BF16's vdpbf16ps where the CPU has it (-v says). "
                             "Default f32 (docs/user-guide.md)"
                             + (". With a MODEL.mlir: the element type it was exported in "
                                "(checked)" if module_files else ""))


def weights_option(parser):
    """--weights: how a checkpoint's weights are held (frontend/quantized.py)."""
    parser.add_argument("--weights", choices=("f32", "as-stored"), default="f32",
                        help="f32 (default): the checkpoint's tensors in the --dtype; "
                             "as-stored: a checkpoint converted from a GGUF file whose "
                             "projections are Q8_0 or Q4_1 (`snapkv import-gguf`; the shipped "
                             "smollm2-135m-instruct is Q4_1) keeps them as the file does, "
                             "int8 values and a scale per 32 (Q8_0) or 4-bit values, a scale "
                             "and a min per 32 (Q4_1), dequantized inside the matmuls; other "
                             "checkpoints fall back to f32 (-v says why). Needs --dtype f32 or "
                             "bf16 (docs/user-guide.md)")
    parser.add_argument("--activations", choices=("float", "i8"), default="float",
                        help="with --weights as-stored: the activations of the Q8_0 and "
                             "Q4_1 products. float (default): as computed (--dtype); i8: each "
                             "row (a decode step's, a prompt's; Q4_1: a decode step's) "
                             "quantized per block of 32 to int8 (scale max|x|/127) and "
                             "multiplied as integers, llama.cpp's form (AVX512_VNNI's vpdpbusd "
                             "where the CPU has it, Q8_0 weights bound packed by 4 rows); "
                             "changes the numerics")


def checkpoint_option(parser):
    parser.add_argument("--checkpoint", type=Path, metavar="DIR",
                        help="for a MODEL.mlir written by `snapkv export --hf`: the checkpoint "
                             "its weights come from (default: the one its JSON names)")
