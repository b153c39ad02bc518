"""What the subcommands share: errors, locating models and tools, running snapkv-opt,
argument types, the option groups, prompts and the compiled models."""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from .. import interface, tools
from ..tools import REPO, ToolError

PROG = "snapkv"
FIXTURE = "tiny_llama_dynamic.mlir"
# The pass's own defaults (snapkv-compress-kv-cache; kernel 15 and gqa mean, not the published
# method's 5 and expand: docs/eval.md, "The defaults"); the demo passes its small sizes.
DEFAULTS = dict(window=32, capacity=1024, kernel=15, pooling="avg", gqa="mean",
                order="position", budget="uniform", pyramid_beta=20, floor=0, chunk=0,
                decode_interval=0, decode_capacity=0, block=1, staging=0,
                staging_scoring="sum")
DEFAULT_PROMPT_LENGTH, DEFAULT_STEPS, DEFAULT_SEED = 96, 16, 0
# --dtype: the element type a checkpoint is exported in (weights, activations, K/V caches).
DTYPES = ("f32", "bf16", "f16")
INT64_MAX = 2 ** 63 - 1
FRONTEND_PACKAGES = {"torch": "torch", "transformers": "transformers", "torch_mlir": "torch-mlir"}


class CLIError(Exception):
    """A problem to report to the user as one message (no traceback), exit status 1."""


# ---------------------------------------------------------------------------------------------
# Locating things

def repo_root() -> Path:
    """The source checkout: the one this package lives in, else the current directory or one
    of its parents that holds ``test/Models``."""
    for candidate in (REPO, Path.cwd(), *Path.cwd().parents):
        if (candidate / "test" / "Models").is_dir():
            return candidate
    return REPO


def models_dir() -> Path:
    return repo_root() / "test" / "Models"


def missing_frontend_packages() -> List[str]:
    return [pip for module, pip in FRONTEND_PACKAGES.items()
            if importlib.util.find_spec(module) is None]


def frontend_hint(missing) -> str:
    return (f"it needs {', '.join(missing)}: pip install torch transformers torch-mlir "
            f"(the versions the fixtures were made with: pip install -e 'python[frontend]')")


def default_model(quiet: bool = False) -> Path:
    """The bundled test/Models/tiny_llama_dynamic.mlir; exported first if it is missing."""
    from . import export

    path = models_dir() / FIXTURE
    if path.is_file():
        return path
    missing = missing_frontend_packages()
    if missing:
        raise CLIError(f"the bundled model {show(path)} is missing and cannot be made here: it is "
                       f"exported from PyTorch by `snapkv export`, and "
                       f"{frontend_hint(missing)}. Or pass a MODEL.mlir.")
    progress(quiet, f"the bundled model {show(path)} is missing: exporting it with torch-mlir "
                    f"(`snapkv export --out {path.parent}`) ...")
    written = export.export_models(path.parent, dynamic=True, static=True, check=False,
                                   quiet=quiet)
    progress(quiet, written.render_text())  # stderr: stdout is the command's own output
    if not path.is_file():
        raise CLIError(f"exporting did not produce {show(path)}")
    return path


def resolve_model(given: Optional[Path], quiet: bool = False) -> Path:
    if given is None:
        return default_model(quiet)
    if not given.exists():
        raise CLIError(f"{given}: no such file")
    if given.is_dir():
        raise CLIError(f"{given}: a directory; this command takes a MODEL.mlir file")
    if not given.is_file():
        raise CLIError(f"{given}: not a file")
    return given


@dataclass
class Source:
    """The module a command works on: its file and text, the checkpoint its weights come
    from (None for a module without weight arguments) and how to name it."""
    path: Path
    text: str
    checkpoint: object = None
    label: str = ""
    max_positions: Optional[int] = None


def load_checkpoint(directory: Path):
    from ..frontend.checkpoint import Checkpoint, CheckpointError

    try:
        return Checkpoint(directory)
    except CheckpointError as error:
        raise CLIError(str(error)) from None


def export_checkpoint(directory: Path, args, quiet: bool) -> Source:
    """The exported module of checkpoint `directory` (from the export cache, or exported now
    with torch-mlir)."""
    from .. import hf

    checkpoint = load_checkpoint(directory)
    options = hf.ExportOptions(attention=getattr(args, "attention", None) or "sdpa",
                               extend=bool(getattr(args, "chunk", 0)
                                           or getattr(args, "decode_interval", 0)),
                               dtype=getattr(args, "dtype", None) or "f32")
    try:
        exported = hf.export(checkpoint, options, log=None if quiet else
                             lambda m: progress(quiet, f"  {m}"), cache_dir=None)
    except ToolError as error:
        raise CLIError(str(error)) from None
    except hf.CheckpointError as error:
        raise CLIError(f"{show(directory)}: {error}") from None
    for note in exported.meta.get("notes", []):
        progress(quiet, f"note: {note}")
    return Source(exported.path, exported.text, checkpoint, show(directory),
                  exported.meta.get("max_position_embeddings"))


def load_source(given: Optional[Path], args, quiet: bool = False,
                weights: bool = True) -> Source:
    """A MODEL argument: a module file (the bundled tiny model by default) or a checkpoint
    directory (exported first, cached). With `weights`, a module that takes weights gets its
    checkpoint from --checkpoint, else from the JSON next to it (what `snapkv export --hf`
    writes)."""
    if given is not None and given.is_dir():
        if getattr(args, "checkpoint", None) is not None:
            raise CLIError("--checkpoint goes with a MODEL.mlir; a checkpoint directory as "
                           "MODEL is its own checkpoint")
        progress(quiet, f"exporting the checkpoint {show(given)} (torch-mlir; a minute or "
                        f"more the first time, then cached) ...")
        return export_checkpoint(given, args, quiet)
    path = resolve_model(given, quiet)
    text = read_text(path)
    source = Source(path, text, None, show(path))
    verify_ir(path, text)  # before anything reads the module: diagnostics name the file
    check_dtype(path, text, getattr(args, "dtype", None))
    try:
        takes_weights = bool(runner_signature(text, "prefill").weight_args)
    except ValueError:
        takes_weights = False  # not a model module: signatures() says so later
    given_checkpoint = getattr(args, "checkpoint", None)
    if takes_weights and weights:
        if given_checkpoint is not None:
            from .. import runtime
            from ..frontend.checkpoint import CheckpointError

            source.checkpoint = load_checkpoint(given_checkpoint)
            try:
                runtime.check_checkpoint(path, source.checkpoint)
            except CheckpointError as error:
                raise CLIError(str(error)) from None
        else:
            from .. import runtime

            try:
                source.checkpoint = runtime.checkpoint_of(path)
            except ValueError as error:
                raise CLIError(f"{error} (--checkpoint DIR)") from None
            except Exception as error:  # CheckpointError: the named directory is unusable
                raise CLIError(f"{show(path)}: {error}") from None
    elif given_checkpoint is not None:
        raise CLIError(f"{show(path)} takes no weights (no snapkv.weight arguments: they are "
                       f"inside the module), so --checkpoint has nothing to bind")
    return source


def check_dtype(path: Path, text: str, dtype: Optional[str]):
    """A module file's element type is fixed by its export: --dtype must name it (a checkpoint
    directory is exported in the --dtype asked for instead)."""
    if dtype is None:
        return
    try:
        results = runner_signature(text, "prefill").results
    except ValueError:
        return  # not a model module: signatures() says so later
    held = results[1].elem if len(results) > 1 else None
    if held is not None and held != dtype:
        raise CLIError(f"--dtype {dtype}: {show(path)} computes in {held} (its K/V caches are "
                       f"{held}), and a module file keeps the element type it was exported "
                       f"in. Pass the checkpoint directory (or a model name) to export it in "
                       f"{dtype}, or `snapkv export --hf DIR --dtype {dtype}`")


def runner_signature(text: str, name: str):
    from .. import runtime

    return runtime.signature(text, name)


def layer_functions(text: str):
    """The layer functions' names (see :func:`snapkv.hf.layer_functions`); None also for a
    module snapkv-opt rejects, whose diagnostics the command's own snapkv-opt run reports
    against the file."""
    from ..hf import layer_functions as find

    try:
        return find(text)
    except tools.ToolFailed:
        return None


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise CLIError(f"{show(path)}: not a text file (expected MLIR)") from None
    except OSError as error:
        raise CLIError(f"{show(path)}: {error.strerror or error}") from None


def opt_path() -> Path:
    return tools.require(tools.snapkv_opt(), "snapkv-opt")


def show(path: Path) -> str:
    """`path` relative to the current directory when it is under it; a known model's
    converted checkpoint by its name (`snapkv models`)."""
    from .. import models

    name = models.name_of(path)
    if name is not None:
        return name
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def progress(quiet: bool, message: str):
    if not quiet:
        print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# snapkv-opt

def run_opt(arguments: Sequence[str], *, path: Optional[Path] = None,
            text: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run snapkv-opt on `path` or on `text` (stdin), whatever its exit status. Diagnostics
    never dump the module."""
    opt_path()  # a missing snapkv-opt: the CLI's hint
    return tools.opt(arguments, path=path, text=text, checked=False)


def diagnostics(stderr: str, limit: int = 6000) -> str:
    text = stderr.strip()
    if len(text) > limit:
        text = "...\n" + text[-limit:]
    return text


def first_error(stderr: str) -> str:
    """The message of snapkv-opt's first ``error:`` line, without its location."""
    for line in stderr.splitlines():
        _, marker, message = line.partition("error: ")
        if marker:
            return message.strip()
    return stderr.strip().splitlines()[0] if stderr.strip() else "no message"


def pass_options(args, strict: bool, text: str = "") -> str:
    """The pass's options; for a module with one function per layer (`snapkv export --hf`),
    prefill-func/decode-func name those functions unless given."""
    options = (f"window={args.window} capacity={args.capacity} kernel={args.kernel} "
               f"pooling={args.pooling} gqa={args.gqa} order={args.order}")
    if args.budget == "adaptive":
        options += f" budget=adaptive floor={args.floor}"
    elif args.budget != "uniform":
        options += f" budget={args.budget} pyramid-beta={args.pyramid_beta}"
    if getattr(args, "block", 1) != 1:
        options += f" block={args.block}"
    layers = layer_functions(text) if text else None
    prefill = getattr(args, "prefill_func", None)
    decode = getattr(args, "decode_func", None)
    if prefill is None and layers:
        prefill = layers[0]
    if decode is None and layers:
        decode = layers[1]
    if prefill is not None:
        options += f" prefill-func={prefill}"
    if decode is not None:
        options += f" decode-func={decode}"
    chunk, interval = getattr(args, "chunk", 0), getattr(args, "decode_interval", 0)
    decode_capacity = getattr(args, "decode_capacity", 0)
    if chunk or interval:
        from ..hf import extend_function

        try:
            extend = extend_function(text) if text else None
        except tools.ToolFailed:
            extend = None
        options += (f" chunk={chunk}" if chunk else "") + \
            (f" decode-interval={interval}" if interval else "") + \
            (f" decode-capacity={decode_capacity}" if decode_capacity else "") + \
            f" extend-func={extend or 'extend'}"
    if getattr(args, "staging", 0):
        options += f" staging={args.staging} staging-scoring={args.staging_scoring}"
    return options + (" strict=true" if strict else "")


def describe_options(args) -> str:
    return describe(option_dict(args))


def describe(options: dict) -> str:
    """The compaction options (:func:`option_dict`) as the commands print them: results keep
    the dict and render this text from it."""
    budget = "" if options["budget"] == "uniform" else \
        f", budget adaptive (floor {options['floor']}; capacity is the heads' mean)" \
        if options["budget"] == "adaptive" else \
        f", budget {options['budget']} (beta {options['pyramid_beta']}; capacity is the " \
        f"layers' mean)"
    if options.get("block", 1) != 1:
        budget += f", whole blocks of {options['block']} positions"
    chunk = f", chunked prefill ({options['chunk']} tokens a chunk)" \
        if options.get("chunk") else ""
    if options.get("staging"):
        chunk += f" staged at {options['staging']} rows by {options['staging_scoring']}"
    if options.get("decode_interval"):
        chunk += f", decode-time compression every {options['decode_interval']} tokens"
        if options.get("decode_capacity"):
            chunk += f" back to {options['decode_capacity']} rows"
    return (f"window {options['window']}, capacity {options['capacity']}, kernel "
            f"{options['kernel']}, pooling {options['pooling']}, gqa {options['gqa']}, order "
            f"{options['order']}{budget}{chunk}")


def option_dict(args) -> dict:
    return {name: getattr(args, name, DEFAULTS[name]) for name in DEFAULTS}


def rewrite(path: Path, args, *, strict: bool = True, extra: Sequence[str] = ()):
    """(rewritten text, snapkv-opt's stderr, seconds) of the model rewrite of `path`.

    With `strict`, a refusal is a CLIError naming the reason."""
    start = time.perf_counter()
    done = run_opt([f"--snapkv-compress-kv-cache={pass_options(args, strict, read_text(path))}",
                    *extra], path=path)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        if done.returncode == tools.REFUSAL_EXIT:
            raise CLIError(f"the model rewrite (snapkv-compress-kv-cache) refused {show(path)}; "
                           f"nothing was changed. snapkv-opt says:\n"
                           f"{diagnostics(done.stderr)}")
        raise CLIError(f"snapkv-opt failed on {show(path)} (exit {done.returncode}):\n"
                       f"{diagnostics(done.stderr)}")
    return done.stdout, done.stderr, seconds


def verify_ir(path: Path, text: Optional[str] = None) -> "interface.ModuleInterface":
    """Parse and verify `path` with snapkv-opt (its diagnostics become the error); the
    module's interface."""
    try:
        return interface.describe(read_text(path) if text is None else text, path=path)
    except tools.ToolFailed as error:
        raise CLIError(f"{show(path)} is not valid MLIR; snapkv-opt says:\n"
                       f"{diagnostics(error.stderr)}") from None


def count_selects(text: str) -> int:
    return interface.describe(text).select_count()


# ---------------------------------------------------------------------------------------------
# Argument parsing

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


def compaction_parent(strict: bool = False) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group(
        "compaction", "The options of snapkv-compress-kv-cache and snapkv.select, with the "
        "pass's defaults (docs/semantics.md defines them). The bundled tiny model is meant "
        "for short prompts: `make demo-mechanics` runs it with --window 8 --capacity 24.")
    group.add_argument("--window", "-W", type=int_in(1, "the window"),
                       default=DEFAULTS["window"], metavar="W",
                       help="observation window: the last W prompt queries vote for the "
                            "earlier positions, and the W window positions are always kept")
    group.add_argument("--capacity", "-C", type=int_in(2, "the capacity"),
                       default=DEFAULTS["capacity"], metavar="C",
                       help="prompt positions kept per cache head, window included (C > W); "
                            "a prompt shorter than C is kept whole")
    group.add_argument("--kernel", "--kernel-size", "-k", type=odd_kernel, dest="kernel",
                       default=DEFAULTS["kernel"], metavar="K",
                       help="pooling kernel over neighbouring positions (odd, >= 1)")
    group.add_argument("--pooling", choices=("avg", "max"), default=DEFAULTS["pooling"],
                       help="pooling of the votes: avg (zero padding, divides by K) or max")
    group.add_argument("--gqa", choices=("expand", "mean", "max"), default=DEFAULTS["gqa"],
                       help="GQA policy: expand = one selection per query head (the cache "
                            "holds Hq heads); mean/max = votes of a kv head's query heads "
                            "averaged/maximised, one selection per kv head (Hkv heads)")
    group.add_argument("--order", choices=("position", "score"), default=DEFAULTS["order"],
                       help="order of the kept positions in the cache: ascending position, "
                            "or prefix by descending score then the window")
    group.add_argument("--budget",
                       choices=("uniform", "pyramid", "inverted-pyramid", "adaptive"),
                       default=DEFAULTS["budget"],
                       help="uniform = every layer keeps C; pyramid = PyramidKV: more in lower "
                            "layers, fewer in upper ones, C - W prefix positions per layer on "
                            "average (never more in all); inverted-pyramid = the same the other "
                            "way up; adaptive = Ada-KV: a layer's heads share Hc x (C - W) "
                            "prefix positions, ranked together (a ragged cache, the same bytes)")
    group.add_argument("--floor", type=int_in(0, "--floor"), default=DEFAULTS["floor"],
                       metavar="F",
                       help="with --budget adaptive: prefix positions every head keeps at least "
                            "(Ada-KV's safeguard, at most C - W)")
    group.add_argument("--pyramid-beta", type=int_in(1, "--pyramid-beta"),
                       default=DEFAULTS["pyramid_beta"], metavar="BETA",
                       help="with --budget pyramid: the top layer keeps (C - W) / BETA prefix "
                            "positions (at least 1), the bottom one twice the mean less that")
    group.add_argument("--chunk", type=int_in(0, "--chunk"), default=DEFAULTS["chunk"],
                       metavar="N",
                       help="chunked prefill: feed the prompt N tokens at a time (N >= W) and "
                            "compact the cache back to C after each chunk, so that the K/V held "
                            "stay near C + N rows per head (docs/semantics.md, \"Chunked "
                            "prefill\"); needs --gqa mean or max and --budget uniform. 0 (the "
                            "default): one-shot prefill")
    group.add_argument("--staging", type=int_in(0, "--staging"), default=DEFAULTS["staging"],
                       metavar="M",
                       help="with --chunk: two-level chunked prefill: the chunks before the "
                            "last are compacted to M rows (M >= C) ranked by "
                            "--staging-scoring, and the last chunk's selection keeps C by the "
                            "prompt's last W queries (which hold the question), so that the K/V "
                            "held stay near M + N rows per head. 0 (the default): off")
    group.add_argument("--staging-scoring", choices=("sum", "norm_sum", "votes", "prefix_votes"),
                       default=DEFAULTS["staging_scoring"],
                       help="with --staging: what ranks a staged chunk's rows: sum = "
                            "accumulated attention of all the chunk's queries (H2O, "
                            "OpenVINO's SUM), norm_sum = that divided by the queries that "
                            "see the row, votes = the chunk's last W queries")
    group.add_argument("--decode-interval", type=int_in(0, "--decode-interval"),
                       default=DEFAULTS["decode_interval"], metavar="K",
                       help="decode-time compression: every K generated tokens, caches holding "
                            "more than C rows (--decode-capacity M: M) are compacted back to "
                            "C (M), the last W generated tokens voting, so that decoding holds "
                            "at most C + K (M + K) rows per head; "
                            "needs --gqa mean or max and --budget uniform. 0 (the default): off")
    group.add_argument("--decode-capacity", type=int_in(0, "--decode-capacity"),
                       default=DEFAULTS["decode_capacity"], metavar="M",
                       help="with --decode-interval: compact back to M rows (M > W) instead of "
                            "C, so that decoding holds at most M + K rows per head once it "
                            "compacted. 0 (the default): C")
    group.add_argument("--block", type=int_in(1, "--block"), default=DEFAULTS["block"],
                       metavar="B",
                       help="block-granular selection: keep whole blocks of B consecutive "
                            "prefix positions, ranked by the sum of their pooled scores "
                            "(docs/semantics.md, \"Blocks\"); C - W (and M - W with "
                            "--decode-capacity M) must be a multiple of B; needs --budget "
                            "uniform. 1 (the default): single positions")
    if strict:
        group.add_argument("--strict", action="store_true",
                           help="a module the rewrite does not recognise with certainty is "
                                "an error (non-zero exit, nothing written) instead of a "
                                "warning with the module left unchanged")
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
                             "own model in that dtype; logits are f32. Default f32 (bf16 "
                             "prefill is not faster yet, its decode steps are: "
                             "docs/user-guide.md)"
                             + (". With a MODEL.mlir: the element type it was exported in "
                                "(checked)" if module_files else ""))


def checkpoint_option(parser):
    parser.add_argument("--checkpoint", type=Path, metavar="DIR",
                        help="for a MODEL.mlir written by `snapkv export --hf`: the checkpoint "
                             "its weights come from (default: the one its JSON names)")


def check_window_capacity(args):
    if args.capacity <= args.window:
        raise CLIError(f"--capacity ({args.capacity}) must be greater than --window "
                       f"({args.window}): the capacity counts the window")
    floor = getattr(args, "floor", 0)
    if floor and getattr(args, "budget", "uniform") != "adaptive":
        raise CLIError("--floor is the per-head minimum of --budget adaptive")
    if floor > args.capacity - args.window:
        raise CLIError(f"--floor ({floor}) must be at most --capacity - --window "
                       f"({args.capacity - args.window})")
    chunk = getattr(args, "chunk", 0)
    if chunk and chunk < args.window:
        raise CLIError(f"--chunk ({chunk}) must be at least --window ({args.window}): a "
                       f"chunk's last W queries vote")
    staging = getattr(args, "staging", 0)
    if staging and not chunk:
        raise CLIError("--staging is what the chunks before the last are compacted to: it "
                       "needs --chunk")
    if staging and staging < args.capacity:
        raise CLIError(f"--staging ({staging}) must be at least --capacity ({args.capacity}): "
                       f"the final selection keeps C of the staged rows")
    decode_capacity = getattr(args, "decode_capacity", 0)
    if decode_capacity and not getattr(args, "decode_interval", 0):
        raise CLIError("--decode-capacity is what decode-time compression compacts to: it "
                       "needs --decode-interval")
    if decode_capacity and decode_capacity <= args.window:
        raise CLIError(f"--decode-capacity ({decode_capacity}) must be greater than --window "
                       f"({args.window}): the generated window is always kept")
    block = getattr(args, "block", 1)
    if block != 1:
        if getattr(args, "budget", "uniform") != "uniform":
            raise CLIError("--block needs --budget uniform (a per-layer or per-head budget "
                           "need not be a multiple of the block)")
        for name, kept in (("--capacity", args.capacity), ("--decode-capacity",
                                                           decode_capacity)):
            if kept and (kept - args.window) % block:
                raise CLIError(f"--block ({block}) must divide {name} - --window "
                               f"({kept - args.window} = {kept} - {args.window}): whole "
                               f"blocks fill the kept prefix")
    for name, value in (("--chunk", chunk), ("--decode-interval",
                                             getattr(args, "decode_interval", 0))):
        if value and args.gqa == "expand":
            raise CLIError(f"{name} needs --gqa mean or max (with expand the caches the "
                           f"extend function extends would hold Hq heads)")
        if value and getattr(args, "budget", "uniform") != "uniform":
            raise CLIError(f"{name} needs --budget uniform")


# ---------------------------------------------------------------------------------------------
# Prompts and models for running

def prompt_length(args) -> int:
    if args.prompt is not None:
        return len(args.prompt)
    return args.prompt_length or DEFAULT_PROMPT_LENGTH


def check_limits(text: str, path: Path, args, length: int, steps: int):
    """Refuse, before anything is allocated, a prompt (plus `steps` generated tokens) past
    the model's max_position_embeddings or one whose largest intermediate tensor alone needs
    more memory than there is."""
    from .. import runtime

    limit, source = args.max_positions, "--max-positions"
    if limit is None:
        found = runtime.max_positions_of(path)
        if found:
            limit, source = found[0], show(found[1])
    last = length + steps - 1
    if limit is not None and last >= limit:
        raise CLIError(f"the prompt ({length:,} tokens)"
                       + (f" and {steps:,} generated tokens reach" if steps else " reaches")
                       + f" position {last:,}, past the model's "
                       f"max_position_embeddings ({limit:,}, from {source}): the model was "
                       f"not built for positions beyond {limit - 1:,}")
    try:
        runtime.check_memory(runtime.growth(text, "prefill"), "prefill", length,
                             f"a {length:,}-token prompt")
        if steps:
            runtime.check_memory(runtime.growth(text, "decode"), "decode", length + steps,
                                 f"a cache of up to {length + steps:,} rows")
    except runtime.ResourceLimitError as error:
        raise CLIError(str(error)) from None
    except ValueError:
        pass  # not a prefill/decode module: signatures() says so


def text_prompt(args, checkpoint) -> Optional[str]:
    """--text / --prompt-file tokenised into args.prompt (ids); returns the text (None when
    the prompt is not text). Refuses text for a model without a checkpoint's tokenizer."""
    text = getattr(args, "text", None)
    if getattr(args, "prompt_file", None) is not None:
        try:
            text = args.prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CLIError(f"--prompt-file {args.prompt_file}: {error}") from None
    if text is None:
        if getattr(args, "chat", False):
            raise CLIError("--chat goes with --text or --prompt-file")
        return None
    if not text:
        raise CLIError("the prompt text is empty")
    if checkpoint is None:
        raise CLIError("a text prompt needs the model's tokenizer: give a checkpoint "
                       "directory or a known model (`snapkv models`) as MODEL")
    from .. import tokenizer

    try:
        args.prompt = tokenizer.encode(checkpoint.path, text, chat=args.chat).tolist()
    except tokenizer.TokenizerError as error:
        raise CLIError(str(error)) from None
    if not args.prompt:
        raise CLIError("the prompt text has no tokens")
    return text


def prompt(args, vocab: Optional[int]) -> tuple:
    """(ids int64 [1, L], description)."""
    if args.prompt is not None:
        ids = np.array(args.prompt, dtype=np.int64)
        where = "text" if getattr(args, "text", None) is not None or \
            getattr(args, "prompt_file", None) is not None else "given"
    else:
        length = prompt_length(args)
        ids = np.random.default_rng(args.seed).integers(0, vocab or 2, length, dtype=np.int64)
        where = f"random ids, seed {args.seed}"
    if vocab is not None and (ids.min() < 0 or ids.max() >= vocab):
        bad = [int(i) for i in ids if i < 0 or i >= vocab]
        raise CLIError(f"token ids must be in [0, {vocab}) for this model; got {bad[:8]}")
    return ids[None], where


def signatures(text: str, path: Path):
    from .. import runtime

    try:
        prefill = runtime.signature(text, "prefill")
        decode = runtime.signature(text, "decode")
    except ValueError as error:
        raise CLIError(f"{show(path)}: not a prefill/decode model module ({error}); see "
                       f"docs/model-ir.md for what `snapkv generate` runs") from None
    return prefill, decode


def check_runnable(text: str, path: Path, length: int, window: int, decode: bool = True):
    """Refuse, with a reason, what the compiled code's run-time checks would stop on (the
    same checks then report from the compiled code, but only after compiling)."""
    prefill_sig, decode_sig = signatures(text, path)
    inputs = prefill_sig.inputs
    if len(inputs) != 1 or inputs[0].rank != 2:
        raise CLIError(f"{show(path)}: @prefill does not take one [B, L] array of token ids")
    static_len = inputs[0].shape[1]
    if static_len is not None and static_len != length:
        raise CLIError(f"{show(path)}: @prefill takes exactly {static_len} tokens "
                       f"(static shapes); use --prompt-length {static_len} or the dynamic "
                       f"export (test/Models/{FIXTURE})")
    if decode and len(decode_sig.args) > 2 and decode_sig.args[2].rank == 4 and \
            decode_sig.args[2].shape[2] is not None:
        rows = decode_sig.args[2].shape[2]
        raise CLIError(f"{show(path)}: @decode takes a cache of exactly {rows} "
                       f"rows (static shapes), so it cannot run on a cache that grows or is "
                       f"compacted; use the dynamic export (test/Models/{FIXTURE})")
    if length < window:
        raise CLIError(f"the prompt has {length} tokens, fewer than the window ({window}); "
                       f"SnapKV needs L >= W (the compiled prefill would stop on its check)")
    return prefill_sig


def compile_model(text: str, label: str, args, weights=None):
    from ..runtime import CompiledModel

    progress(args.quiet, f"compiling the {label}: snapkv-opt --snapkv-cpu-pipeline, "
                         f"snapkv-translate, clang (seconds to a minute the first time, then "
                         f"cached) ...")
    try:
        model = CompiledModel(text, verbose=getattr(args, "verbose", False), weights=weights)
    except ToolError as error:
        raise CLIError(f"compiling the {label} failed: {error}") from None
    except ValueError as error:  # CheckpointError too: weights that do not fit
        raise CLIError(f"cannot run the {label}: {error}") from None
    how = "cached library" if model.from_cache else "compiled"
    progress(args.quiet, f"  {how} in {model.library.seconds:.1f} s: {model.library.path}")
    for note in model.weight_notes:
        progress(args.quiet, f"  {note}")
    return model


def ids_text(ids) -> str:
    return " ".join(str(int(i)) for i in ids)
