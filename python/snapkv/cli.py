"""The ``snapkv`` command line: compile a model with a SnapKV-compacted KV cache, run it, and
see what it keeps and what it saves.

Subcommands (``snapkv COMMAND --help`` explains every option):

* ``export``    -- regenerate the tiny-Llama fixtures (needs torch, transformers, torch-mlir);
* ``compile``   -- ``snapkv-opt --snapkv-compress-kv-cache`` (and ``--lower``: the CPU pipeline);
* ``generate``  -- greedy generation with the compacted cache and with the full cache, side by
  side: tokens, per-step agreement, logical vs physical lengths, the ledger, times;
* ``ledger``    -- the persistent K/V ledger (``--snapkv-report-cache``) of the rewritten model;
* ``visualize`` -- one PNG per layer: votes, pooled scores and kept positions of every head,
  computed by the compiled model itself.

Errors (bad arguments, missing files or tools, invalid IR, a rewrite the pass refuses) are
reported as one clear message on stderr and a non-zero exit status, never a traceback
(``SNAPKV_DEBUG=1`` shows the traceback of an unexpected internal error).

Needs numpy and the built tools (``make build``); ``visualize`` also needs matplotlib and
``export`` needs torch, transformers and torch-mlir.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from .mlirgen import REPO, ToolError, snapkv_opt_path

PROG = "snapkv"
FIXTURE = "tiny_llama_dynamic.mlir"
# Defaults sized for the bundled tiny model (the pass's own defaults, window 32 and capacity
# 1024, are meant for real prompts and would keep every position of a 48-token prompt).
DEFAULTS = dict(window=8, capacity=24, kernel_size=5, pooling="avg", gqa="expand",
                order="position")
DEFAULT_PROMPT_LEN, DEFAULT_STEPS, DEFAULT_SEED = 96, 16, 0
FRONTEND_PACKAGES = {"torch": "torch", "transformers": "transformers", "torch_mlir": "torch-mlir"}
REFUSED = "left the module unchanged"
OPT_TIMEOUT = 600


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


def _missing_frontend_packages() -> List[str]:
    return [pip for module, pip in FRONTEND_PACKAGES.items()
            if importlib.util.find_spec(module) is None]


def _frontend_hint(missing) -> str:
    return (f"it needs {', '.join(missing)}: pip install torch transformers torch-mlir "
            f"(the versions the fixtures were made with: pip install -e 'python[frontend]')")


def default_model(quiet: bool = False) -> Path:
    """The bundled test/Models/tiny_llama_dynamic.mlir; exported first if it is missing."""
    path = models_dir() / FIXTURE
    if path.is_file():
        return path
    missing = _missing_frontend_packages()
    if missing:
        raise CLIError(f"the bundled model {_show(path)} is missing and cannot be made here: it is "
                       f"exported from PyTorch by `snapkv export`, and "
                       f"{_frontend_hint(missing)}. Or pass a MODEL.mlir.")
    _progress(quiet, f"the bundled model {_show(path)} is missing: exporting it with torch-mlir "
                     f"(`snapkv export --out {path.parent}`) ...")
    _export(path.parent, dynamic=True, static=True, check=False, quiet=quiet)
    if not path.is_file():
        raise CLIError(f"exporting did not produce {_show(path)}")
    return path


def resolve_model(given: Optional[Path], quiet: bool = False) -> Path:
    if given is None:
        return default_model(quiet)
    if not given.exists():
        raise CLIError(f"{given}: no such file")
    if not given.is_file():
        raise CLIError(f"{given}: not a file")
    return given


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise CLIError(f"{_show(path)}: not a text file (expected MLIR)") from None
    except OSError as error:
        raise CLIError(f"{_show(path)}: {error.strerror or error}") from None


def opt_path() -> Path:
    path = snapkv_opt_path()
    if not path.is_file():
        raise CLIError(f"snapkv-opt not found at {_show(path)}: run `make build` in the repository "
                       f"(or set SNAPKV_OPT to a built snapkv-opt)")
    return path


def _show(path: Path) -> str:
    """`path` relative to the current directory when it is under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _progress(quiet: bool, message: str):
    if not quiet:
        print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# snapkv-opt

def run_opt(arguments: Sequence[str], *, path: Optional[Path] = None,
            text: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run snapkv-opt on `path` or on `text` (stdin). Diagnostics never dump the module."""
    command = [str(opt_path()), "--mlir-print-op-on-diagnostic=false", *arguments,
               str(path) if path is not None else "-"]
    try:
        return subprocess.run(command, input=text, capture_output=True, text=True,
                              timeout=OPT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise CLIError(f"snapkv-opt timed out after {OPT_TIMEOUT} s") from None
    except OSError as error:
        raise CLIError(f"cannot run {command[0]}: {error}") from None


def _diagnostics(stderr: str, limit: int = 6000) -> str:
    text = stderr.strip()
    if len(text) > limit:
        text = "...\n" + text[-limit:]
    return text


def pass_options(args, strict: bool) -> str:
    options = (f"window={args.window} capacity={args.capacity} kernel-size={args.kernel_size} "
               f"pooling={args.pooling} gqa={args.gqa} order={args.order}")
    if getattr(args, "prefill_func", None) is not None:
        options += f" prefill-func={args.prefill_func}"
    if getattr(args, "decode_func", None) is not None:
        options += f" decode-func={args.decode_func}"
    return options + (" strict=true" if strict else "")


def describe_options(args) -> str:
    return (f"window {args.window}, capacity {args.capacity}, kernel {args.kernel_size}, "
            f"pooling {args.pooling}, gqa {args.gqa}, order {args.order}")


def rewrite(path: Path, args, *, strict: bool = True, extra: Sequence[str] = ()):
    """(rewritten text, snapkv-opt's stderr, seconds) of the model rewrite of `path`.

    With `strict`, a refusal is a CLIError naming the reason."""
    start = time.perf_counter()
    done = run_opt([f"--snapkv-compress-kv-cache={pass_options(args, strict)}", *extra],
                   path=path)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        if REFUSED in done.stderr:
            raise CLIError(f"the model rewrite (snapkv-compress-kv-cache) refused {_show(path)}; "
                           f"nothing was changed. snapkv-opt says:\n"
                           f"{_diagnostics(done.stderr)}")
        raise CLIError(f"snapkv-opt failed on {_show(path)} (exit {done.returncode}):\n"
                       f"{_diagnostics(done.stderr)}")
    return done.stdout, done.stderr, seconds


def verify_ir(path: Path):
    """Parse and verify `path` with snapkv-opt; its diagnostics become the error."""
    done = run_opt(["-o", os.devnull], path=path)
    if done.returncode != 0:
        raise CLIError(f"{_show(path)} is not valid MLIR; snapkv-opt says:\n"
                       f"{_diagnostics(done.stderr)}")


def count_selects(text: str) -> int:
    return len(re.findall(r"=\s*snapkv\.select\b", text))


def ledger_note(ledger: str) -> Optional[str]:
    """A line explaining a ledger whose compacted cache is not smaller than the full one."""
    total = re.search(r"full ([\d,]+) B, compacted ([\d,]+) B", ledger)
    if not total:
        return None
    full, compact = (int(g.replace(",", "")) for g in total.groups())
    if full == 0 or compact < full:
        return None
    expand = re.search(r"^\d+\s+expand\s", ledger, re.M) is not None
    length = re.search(r"\bL=(\d+)", ledger)
    kept = re.search(r"^\d+\s+\w+\s+(?:\d+\s+){5}(\d+)\s", ledger, re.M)
    if length and kept and int(kept.group(1)) >= int(length.group(1)):
        return ("note: the compacted cache is not smaller here: the prompt is not longer than "
                "the capacity, so nothing is dropped" + (
                    ", and with gqa expand the cache holds Hq heads where the full cache holds "
                    "Hkv." if expand else "."))
    if not expand:
        return None
    return ("note: the compacted cache is not smaller here. With gqa expand it holds Hq heads "
            "where the full cache holds Hkv (SPEC section 4), so it saves memory only when "
            "Hq*(min(L,C)+g) < Hkv*(L+g): use a longer prompt, a smaller --capacity, or "
            "--gqa mean/max (Hkv heads).")


def ledger_text(text: str, prompt_length: int, generated: int) -> str:
    done = run_opt([f"--snapkv-report-cache=prompt-length={prompt_length} "
                    f"generated={generated}", "-o", os.devnull], text=text)
    if done.returncode != 0:
        raise CLIError(f"snapkv-opt --snapkv-report-cache failed (exit {done.returncode}):\n"
                       f"{_diagnostics(done.stderr)}")
    return done.stdout.rstrip("\n")


# ---------------------------------------------------------------------------------------------
# Argument types and shared options

def _int_at_least(low: int, what: str):
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {value!r}")
        if number < low:
            raise argparse.ArgumentTypeError(f"{what} must be >= {low}, got {number}")
        return number
    return parse


def _odd_kernel(value: str) -> int:
    number = _int_at_least(1, "the kernel size")(value)
    if number % 2 == 0:
        raise argparse.ArgumentTypeError(f"the kernel size must be odd, got {number}")
    return number


def _token_ids(value: str) -> List[int]:
    pieces = [p for p in re.split(r"[\s,]+", value.strip()) if p]
    if not pieces:
        raise argparse.ArgumentTypeError("the prompt is empty")
    try:
        return [int(p) for p in pieces]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"the prompt must be token ids (integers separated by spaces or commas), "
            f"got {value!r}") from None


class _Formatter(argparse.RawDescriptionHelpFormatter):
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


def _common_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("output")
    group.add_argument("-q", "--quiet", action="store_true",
                       help="no progress lines on stderr")
    return parent


def _compaction_parent(strict: bool = False) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group(
        "compaction", "The options of snapkv-compress-kv-cache and snapkv.select (SPEC "
        "section 2). The defaults suit the bundled tiny model; the pass's own defaults "
        "(window 32, capacity 1024) are meant for real prompts.")
    group.add_argument("--window", "-W", type=_int_at_least(1, "the window"),
                       default=DEFAULTS["window"], metavar="W",
                       help="observation window: the last W prompt queries vote for the "
                            "earlier positions, and the W window positions are always kept")
    group.add_argument("--capacity", "-C", type=_int_at_least(2, "the capacity"),
                       default=DEFAULTS["capacity"], metavar="C",
                       help="prompt positions kept per cache head, window included (C > W); "
                            "a prompt shorter than C is kept whole")
    group.add_argument("--kernel-size", "-k", type=_odd_kernel,
                       default=DEFAULTS["kernel_size"], metavar="K",
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
    if strict:
        group.add_argument("--strict", action="store_true",
                           help="a module the rewrite does not recognise with certainty is "
                                "an error (non-zero exit, nothing written) instead of a "
                                "warning with the module left unchanged")
    return parent


def _add_prompt_options(parser: argparse.ArgumentParser):
    group = parser.add_argument_group("prompt")
    exclusive = group.add_mutually_exclusive_group()
    exclusive.add_argument("--prompt-len", "-L", type=_int_at_least(1, "the prompt length"),
                           metavar="L",
                           help=f"a prompt of L random token ids drawn with --seed "
                                f"(default: {DEFAULT_PROMPT_LEN})")
    exclusive.add_argument("--prompt", type=_token_ids, metavar='"IDS"',
                           help='the prompt as token ids, e.g. "5 17 42 ..." or "5,17,42" '
                                "(each in [0, vocabulary size))")
    group.add_argument("--seed", type=int, default=DEFAULT_SEED,
                       help="seed of the random prompt (numpy default_rng)")


def _model_argument(parser, required=False):
    if required:
        parser.add_argument("model", type=Path, metavar="MODEL.mlir",
                            help="a module imported by torch-mlir with @prefill and @decode "
                                 "(docs/model-ir.md)")
    else:
        parser.add_argument("model", type=Path, nargs="?", metavar="MODEL.mlir",
                            help=f"a module imported by torch-mlir with @prefill and @decode "
                                 f"(docs/model-ir.md); default: the bundled "
                                 f"test/Models/{FIXTURE} (exported first if missing, which "
                                 f"needs torch)")


def _check_window_capacity(args):
    if args.capacity <= args.window:
        raise CLIError(f"--capacity ({args.capacity}) must be greater than --window "
                       f"({args.window}): the capacity counts the window")


# ---------------------------------------------------------------------------------------------
# export

def _export(out: Path, *, dynamic: bool, static: bool, check: bool, quiet: bool):
    missing = _missing_frontend_packages()
    if missing:
        raise CLIError(f"`snapkv export` cannot run here: {_frontend_hint(missing)}")
    from .frontend import export  # imports torch

    out.mkdir(parents=True, exist_ok=True)
    spec = export.TinyLlamaSpec()
    texts = {}
    for wanted, name, flag in ((static, export.STATIC_FILE, False),
                               (dynamic, export.DYNAMIC_FILE, True)):
        if wanted:
            _progress(quiet, f"exporting {name} (torch.export + torch-mlir FX importer) ...")
            texts[name] = export.export_text(spec, dynamic=flag)
    for name, text in texts.items():
        (out / name).write_text(text)
        print(f"wrote {out / name} ({len(text.encode()):,} bytes)")
    if dynamic and static:
        import json

        meta = json.dumps(export.metadata(spec, texts), indent=1) + "\n"
        (out / export.JSON_FILE).write_text(meta)
        print(f"wrote {out / export.JSON_FILE} ({len(meta.encode()):,} bytes)")
    else:
        print(f"{export.JSON_FILE} not written (it describes both modules; export both to "
              f"refresh it)")
    if check:
        _progress(quiet, "checking the modules against PyTorch (snapkv-opt + mlir-runner) ...")
        from .frontend import harness

        failed = False
        for name, length in ((export.STATIC_FILE, spec.prefill_len),
                             (export.DYNAMIC_FILE, export.DYNAMIC_EXAMPLE_LEN)):
            if name not in texts:
                continue
            # What export.check does, for the modules written this time only.
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


def cmd_export(args) -> int:
    dynamic = args.dynamic or not args.static
    static = args.static or not args.dynamic
    _export(args.out if args.out is not None else models_dir(), dynamic=dynamic, static=static,
            check=args.check, quiet=args.quiet)
    return 0


# ---------------------------------------------------------------------------------------------
# compile

def cmd_compile(args) -> int:
    _check_window_capacity(args)
    path = resolve_model(args.model, args.quiet)
    start = time.perf_counter()
    done = run_opt([f"--snapkv-compress-kv-cache={pass_options(args, args.strict)}"], path=path)
    if done.stderr.strip():
        print(_diagnostics(done.stderr), file=sys.stderr)
    if done.returncode != 0:
        if REFUSED in done.stderr:
            raise CLIError(f"the model rewrite refused {_show(path)} and --strict was given; "
                           f"nothing was written (the reason is above)")
        raise CLIError(f"snapkv-opt failed on {_show(path)} (exit {done.returncode}; its "
                       f"diagnostics are above); nothing was written")
    text = done.stdout
    refused = REFUSED in done.stderr
    selects = count_selects(text)
    if args.lower:
        _progress(args.quiet, "lowering with --snapkv-cpu-pipeline (a few seconds) ...")
        lowered = run_opt(["--snapkv-cpu-pipeline"], text=text)
        if lowered.returncode != 0:
            raise CLIError(f"--snapkv-cpu-pipeline failed (exit {lowered.returncode}); nothing "
                           f"was written:\n{_diagnostics(lowered.stderr)}")
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
        _progress(args.quiet, f"snapkv compile: the module was left unchanged (the warning "
                              f"above says why); --strict makes that an error. Wrote {where}.")
    else:
        lowered_note = ", lowered to the LLVM dialect" if args.lower else ""
        _progress(args.quiet, f"snapkv compile: {selects} snapkv.select inserted "
                              f"({describe_options(args)}){lowered_note}; wrote {where} "
                              f"in {seconds:.2f} s")
    return 0


# ---------------------------------------------------------------------------------------------
# Prompts and models for running

def _prompt(args, vocab: Optional[int]) -> tuple:
    """(ids int64 [1, L], description)."""
    if args.prompt is not None:
        ids = np.array(args.prompt, dtype=np.int64)
        where = "given"
    else:
        length = args.prompt_len or DEFAULT_PROMPT_LEN
        ids = np.random.default_rng(args.seed).integers(0, vocab or 2, length, dtype=np.int64)
        where = f"random ids, seed {args.seed}"
    if vocab is not None and (ids.min() < 0 or ids.max() >= vocab):
        bad = [int(i) for i in ids if i < 0 or i >= vocab]
        raise CLIError(f"token ids must be in [0, {vocab}) for this model; got {bad[:8]}")
    return ids[None], where


def _signatures(text: str, path: Path):
    from .frontend import runner

    try:
        prefill = runner.signature(text, "prefill")
        decode = runner.signature(text, "decode")
    except ValueError as error:
        raise CLIError(f"{_show(path)}: not a prefill/decode model module ({error}); see "
                       f"docs/model-ir.md for what `snapkv generate` runs") from None
    return prefill, decode


def _check_runnable(text: str, path: Path, length: int, window: int, decode: bool = True):
    """Refuse, with a reason, what the compiled code would abort on (its cf.asserts)."""
    prefill_sig, decode_sig = _signatures(text, path)
    if len(prefill_sig.args) != 1 or prefill_sig.args[0].rank != 2:
        raise CLIError(f"{_show(path)}: @prefill does not take one [B, L] array of token ids")
    static_len = prefill_sig.args[0].shape[1]
    if static_len is not None and static_len != length:
        raise CLIError(f"{_show(path)}: @prefill takes exactly {static_len} tokens "
                       f"(static shapes); use --prompt-len {static_len} or the dynamic export "
                       f"(test/Models/{FIXTURE})")
    if decode and len(decode_sig.args) > 2 and decode_sig.args[2].rank == 4 and \
            decode_sig.args[2].shape[2] is not None:
        rows = decode_sig.args[2].shape[2]
        raise CLIError(f"{_show(path)}: @decode takes a cache of exactly {rows} "
                       f"rows (static shapes), so it cannot run on a cache that grows or is "
                       f"compacted; use the dynamic export (test/Models/{FIXTURE})")
    if length < window:
        raise CLIError(f"the prompt has {length} tokens, fewer than the window ({window}); "
                       f"SnapKV needs L >= W (the compiled prefill would abort)")
    return prefill_sig


def _compile_model(text: str, label: str, args):
    from .frontend.runner import CompiledModel

    _progress(args.quiet, f"compiling the {label}: snapkv-opt --snapkv-cpu-pipeline, "
                          f"mlir-translate, clang -O2 (about 15-30 s the first time, then "
                          f"cached) ...")
    try:
        model = CompiledModel(text, verbose=getattr(args, "verbose", False))
    except ToolError as error:
        raise CLIError(f"compiling the {label} failed: {error}") from None
    except ValueError as error:
        raise CLIError(f"cannot run the {label}: {error}") from None
    how = "cached library" if model.from_cache else "compiled"
    _progress(args.quiet, f"  {how} in {model.library.seconds:.1f} s: {model.library.path}")
    return model


def _greedy(model, ids, steps: int, *, forced: Optional[Sequence[int]] = None,
            label: str = "", quiet: bool = True):
    """Prefill then `steps` decode steps. Feeds its own argmax, or `forced[g]` at step g.
    Returns dict(tokens, logits, physical, caches, prefill_s, decode_s)."""
    length = ids.shape[1]
    start = time.perf_counter()
    logits, caches = model.prefill(ids)
    prefill_s = time.perf_counter() - start
    rows = [logits[0, -1]]
    tokens = [int(np.argmax(rows[0]))]
    physical = [caches[0].shape[2] if caches else 0]
    decode_s, last_report = 0.0, time.perf_counter()
    for g in range(steps):
        feed = tokens[-1] if forced is None else int(forced[g])
        t0 = time.perf_counter()
        step_logits, caches = model.decode(feed, length + g, caches)
        decode_s += time.perf_counter() - t0
        rows.append(step_logits[0, 0])
        tokens.append(int(np.argmax(rows[-1])))
        physical.append(caches[0].shape[2] if caches else 0)
        if time.perf_counter() - last_report > 2.0:
            _progress(quiet, f"  {label}: decode step {g + 1}/{steps}")
            last_report = time.perf_counter()
    return dict(tokens=tokens, logits=np.stack(rows), physical=physical, caches=caches,
                prefill_s=prefill_s, decode_s=decode_s)


def _ids_text(ids) -> str:
    return " ".join(str(int(i)) for i in ids)


# ---------------------------------------------------------------------------------------------
# generate

def cmd_generate(args) -> int:
    _check_window_capacity(args)
    path = resolve_model(args.model, args.quiet)
    text = read_text(path)
    verify_ir(path)
    if count_selects(text):
        raise CLIError(f"{_show(path)} already holds snapkv.select (a rewritten model?): `snapkv "
                       f"generate` rewrites the ORIGINAL model itself and runs both")
    prefill_sig, _ = _signatures(text, path)
    vocab = prefill_sig.results[0].shape[-1] if prefill_sig.results else None
    ids, where = _prompt(args, vocab)
    length, steps = ids.shape[1], args.steps
    _check_runnable(text, path, length, args.window)

    _progress(args.quiet, f"rewriting {_show(path)} with snapkv-compress-kv-cache "
                          f"({describe_options(args)}) ...")
    rewritten, warnings, rewrite_s = rewrite(path, args)
    if warnings.strip():
        print(_diagnostics(warnings), file=sys.stderr)
    compact = _compile_model(rewritten, "compacted-cache model", args)
    full = _compile_model(text, "full-cache model (the original module)", args)

    _progress(args.quiet, f"generating {steps} tokens after a {length}-token prompt, "
                          f"with each cache ...")
    try:
        ref = _greedy(full, ids, steps, label="full cache", quiet=args.quiet)
        got = _greedy(compact, ids, steps, label="compacted cache", quiet=args.quiet)
        forced = _greedy(compact, ids, steps, forced=ref["tokens"],
                         label="compacted cache, teacher-forced", quiet=args.quiet)
    except ValueError as error:
        raise CLIError(str(error)) from None
    ledger = ledger_text(rewritten, length, steps)

    kept = min(length, args.capacity)
    print(f"snapkv generate: {_show(path)}")
    print(f"prompt: {length} tokens ({where}): {_ids_text(ids[0])}")
    print(f"compaction: {describe_options(args)} -> {kept} of {length} prompt positions "
          f"cached per head")
    print()
    print(f"full-cache tokens:      {_ids_text(ref['tokens'])}")
    print(f"compacted-cache tokens: {_ids_text(got['tokens'])}")
    print()
    print("step  fed at  full  compacted  same  logical  physical rows (full / compacted)")
    for g in range(steps + 1):
        fed = "prefill" if g == 0 else f"{length + g - 1:>7}"
        same = "yes" if ref["tokens"][g] == got["tokens"][g] else "NO"
        print(f"{g:>4}  {fed:>7}  {ref['tokens'][g]:>4}  {got['tokens'][g]:>9}  {same:>4}  "
              f"{length + g:>7}  {ref['physical'][g]:>8} / {got['physical'][g]}")
    agree = sum(a == b for a, b in zip(ref["tokens"], got["tokens"]))
    first = next((g for g, (a, b) in enumerate(zip(ref["tokens"], got["tokens"])) if a != b),
                 None)
    print()
    print(f"greedy agreement: {agree} of {steps + 1} tokens"
          + (" (identical sequences)" if first is None else
             f" (first difference at step {first}; after it the two runs continue from "
             f"different tokens)"))
    same_next = sum(a == b for a, b in zip(ref["tokens"][1:], forced["tokens"][1:]))
    diff = float(np.max(np.abs(forced["logits"][1:] - ref["logits"][1:]))) if steps else 0.0
    print(f"teacher-forced (the full run's tokens fed to both): same next token at "
          f"{same_next} of {steps} decode steps, max |logit difference| {diff:.3g}")
    print("step 0 comes from prefill's logits, which the rewrite leaves unchanged; decode "
          "step g runs at logical position L+g-1 over min(L, C)+g-1 cached rows")
    if first is not None and path.name == FIXTURE:
        print("the bundled model has random weights: its attention is spread almost evenly "
              "over the prompt (docs/gallery), so dropping positions changes its predictions; "
              "with --capacity >= the prompt length both runs agree exactly, and the compiled "
              "compacted model matches the PyTorch SnapKV reference "
              "(python/tests/test_model_rewrite.py)")
    print()
    print(ledger)
    if ledger_note(ledger):
        print(ledger_note(ledger))
    full_bytes = sum(c.nbytes for c in ref["caches"])
    compact_bytes = sum(c.nbytes for c in got["caches"])
    shape_full = tuple(ref["caches"][0].shape) if ref["caches"] else ()
    shape_compact = tuple(got["caches"][0].shape) if got["caches"] else ()
    print(f"measured after the runs: full cache {full_bytes:,} B "
          f"({len(ref['caches'])} x {list(shape_full)}), compacted {compact_bytes:,} B "
          f"({len(got['caches'])} x {list(shape_compact)})")
    print()

    def compile_note(model):
        return f"{model.library.seconds:.1f} s" + (" (cached)" if model.from_cache else "")

    print(f"times: rewrite {rewrite_s:.2f} s; compile compacted {compile_note(compact)}, "
          f"full {compile_note(full)}; prefill full {ref['prefill_s'] * 1e3:.1f} ms, "
          f"compacted {got['prefill_s'] * 1e3:.1f} ms; {steps} decode steps full "
          f"{ref['decode_s'] * 1e3:.1f} ms, compacted {got['decode_s'] * 1e3:.1f} ms")
    return 0


# ---------------------------------------------------------------------------------------------
# ledger

def cmd_ledger(args) -> int:
    path = resolve_model(args.model, args.quiet)
    text = read_text(path)
    if count_selects(text):
        _progress(args.quiet, f"{_show(path)} already holds snapkv.select: reporting it as it is "
                              f"(the compaction options are not used)")
        module = text
        how = "as given (already rewritten)"
    else:
        _check_window_capacity(args)
        module, warnings, _ = rewrite(path, args)
        if warnings.strip():
            print(_diagnostics(warnings), file=sys.stderr)
        how = f"rewritten with {describe_options(args)}"
    print(f"model: {_show(path)}, {how}")
    ledger = ledger_text(module, args.prompt_length, args.generated)
    print(ledger)
    if ledger_note(ledger):
        print(ledger_note(ledger))
    return 0


# ---------------------------------------------------------------------------------------------
# visualize: the compiled model's own scores

_SELECT = re.compile(
    r"^(?P<indent>[ \t]*)(?P<results>%[^=\n]+?)\s*=\s*snapkv\.select\s+(?P<operands>[^\n]+?)\s+"
    r"(?P<clauses>window\s[^\n:]*?)\s*:\s*\((?P<in_types>[^\n]*)\)\s*->\s*"
    r"\((?P<out_types>[^\n]*)\)\s*$", re.M)
_RETURN = re.compile(r"^(?P<indent>[ \t]*)(?:func\.)?return\s+(?P<values>[^\n:]*?)\s*:\s*"
                     r"(?P<types>[^\n]*?)\s*$", re.M)
_CLAUSE_ORDER_SCORE = ("window", "kernel", "pooling", "gqa", "scale")


def _dims(tensor_type: str):
    match = re.fullmatch(r"tensor<([^<>]*)>", tensor_type.strip())
    if not match:
        raise CLIError(f"unexpected type {tensor_type!r} around snapkv.select")
    parts = match.group(1).split("x")
    return parts[:-1], parts[-1]


def instrument_scores(text: str, function: str = "prefill"):
    """`text` with @function also returning, for each snapkv.select in it, the select's
    queries, full keys, indices, and the votes and pooled scores of a ``snapkv.score`` with
    the same clauses on the same operands. Returns (text, layers, original result count);
    layers holds each select's clauses as a dict."""
    from .frontend.runner import _close, _header, _split_top

    try:
        header = _header(text, function)
    except ValueError as error:
        raise CLIError(f"cannot instrument @{function}: {error}") from None
    body_open = header.body
    body_close = _close(text, body_open)
    body = text[body_open:body_close]
    selects = list(_SELECT.finditer(body))
    if not selects:
        raise CLIError(f"no snapkv.select in @{function} after the rewrite")
    returns = list(_RETURN.finditer(body))
    if len(returns) != 1:
        raise CLIError(f"@{function} has {len(returns)} return ops; expected one")
    layers, insertions, added_values, added_types = [], [], [], []
    for number, match in enumerate(selects):
        results = [r.strip() for r in match.group("results").split(",")]
        operands = [o.strip() for o in match.group("operands").split(",")]
        in_types = _split_top(match.group("in_types"))
        out_types = _split_top(match.group("out_types"))
        if len(results) != 3 or len(operands) != 3 or len(in_types) != 3 or len(out_types) != 3:
            raise CLIError(f"unexpected snapkv.select form: {match.group(0).strip()}")
        words = match.group("clauses").split()
        clauses = dict(zip(words[0::2], words[1::2]))
        window = int(clauses["window"])
        (batch, heads, _), _ = _dims(out_types[2])
        key_dims, _ = _dims(in_types[1])
        prefix = "?" if key_dims[2] == "?" else str(int(key_dims[2]) - window)
        score_t = f"tensor<{batch}x{heads}x{prefix}xf32>"
        votes, pooled = f"%snapkv_viz_votes{number}", f"%snapkv_viz_pooled{number}"
        score_clauses = " ".join(f"{name} {clauses[name]}" for name in _CLAUSE_ORDER_SCORE
                                 if name in clauses)
        line = (f"\n{match.group('indent')}{votes}, {pooled} = snapkv.score {operands[0]}, "
                f"{operands[1]} {score_clauses} : ({in_types[0]}, {in_types[1]}) -> "
                f"({score_t}, {score_t})")
        insertions.append((match.end(), line))
        added_values += [operands[0], operands[1], results[2], votes, pooled]
        added_types += [in_types[0], in_types[1], out_types[2], score_t, score_t]
        layers.append(clauses)
    ret = returns[0]
    new_return = (f"{ret.group('indent')}return {ret.group('values')}, "
                  f"{', '.join(added_values)} : {ret.group('types')}, {', '.join(added_types)}")
    edits = insertions + [(ret.start(), None)]
    new_body = body
    for offset, line in sorted(edits, key=lambda e: e[0], reverse=True):
        if line is None:
            new_body = new_body[:ret.start()] + new_return + new_body[ret.end():]
        else:
            new_body = new_body[:offset] + line + new_body[offset:]
    # The signature: results become the old ones plus the added ones.
    results = ", ".join([*header.results, *added_types])
    args_open = text.index("(", text.index("@" + function, header.start))
    args_close = _close(text, args_open)
    head = text[args_close + 1:body_open]
    arrow = re.match(r"\s*->\s*", head)
    if arrow:
        at = args_close + 1 + arrow.end()
        end = _close(text, at) + 1 if text[at] == "(" else _close(text, text.index("<", at)) + 1
        new_head = text[args_close + 1:at].rstrip() + f" ({results})" + text[end:body_open]
    else:
        new_head = f" -> ({results})" + head
    new_text = text[:args_close + 1] + new_head + new_body + text[body_close:]
    return new_text, layers, len(header.results)


def _compile_scores(rewritten: str, args):
    """Compiled @prefill of `rewritten`, instrumented; (function, layers, original count)."""
    from .frontend import runner

    instrumented, layers, base = instrument_scores(rewritten)
    for layer in args.layers or ():
        if layer >= len(layers):
            raise CLIError(f"--layers: the model has {len(layers)} layers (0..{len(layers) - 1})")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CLIError(f"cannot create {args.out}: {error.strerror or error}") from None
    # Keep @prefill only (decode is not needed), and let snapkv-opt verify the edit.
    done = run_opt(["--symbol-privatize=exclude=prefill", "--symbol-dce"], text=instrumented)
    if done.returncode != 0:
        raise CLIError("the instrumented prefill (snapkv.score added next to each "
                       "snapkv.select) does not verify; this is a bug in `snapkv visualize`:\n"
                       + _diagnostics(done.stderr))
    text = done.stdout
    _progress(args.quiet, "compiling the rewritten prefill with snapkv.score outputs "
                          "(about 10-20 s the first time, then cached) ...")
    try:
        library = runner.compile_library(text, ("prefill",), verbose=args.verbose)
        function = runner.CompiledFunction(ctypes.CDLL(str(library.path)), "prefill",
                                           runner.signature(text, "prefill"))
    except ToolError as error:
        raise CLIError(f"compiling the instrumented prefill failed: {error}") from None
    _progress(args.quiet, f"  {'cached library' if library.from_cache else 'compiled'} in "
                          f"{library.seconds:.1f} s")
    return function, layers, base


def _plot_layer(out: Path, layer: int, votes, pooled, indices, clauses, length: int,
                heads_are_query: bool, group: int, title_route: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads, prefix = votes.shape
    window = int(clauses["window"])
    capacity = int(clauses["capacity"])
    fig, axes = plt.subplots(heads, 1, figsize=(9, 1.55 * heads + 1.3), sharex=True,
                             squeeze=False)
    x = np.arange(prefix)
    for h in range(heads):
        ax = axes[h, 0]
        ax.bar(x, votes[h], width=0.8, color="#9ecae1", label="votes")
        ax.plot(x, pooled[h], color="#08519c", linewidth=1.4,
                label=f"pooled ({clauses.get('pooling', 'avg')}, kernel "
                      f"{clauses.get('kernel', '5')})")
        kept = np.array(sorted(int(i) for i in indices[h] if i < prefix), dtype=np.int64)
        if kept.size:
            ax.scatter(kept, pooled[h][kept], s=16, color="#d62728", zorder=3,
                       label="kept")
            ax.scatter(kept, np.zeros(kept.size), marker="|", s=60, color="#d62728", zorder=3)
        ax.axvspan(prefix - 0.5, length - 0.5, color="#fdae6b", alpha=0.35,
                   label="window (always kept)")
        name = f"q head {h} (kv {h // group})" if heads_are_query else f"kv head {h}"
        ax.set_ylabel(name, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlim(-0.5, length - 0.5)
        top = max(float(np.max(votes[h], initial=0)), float(np.max(pooled[h], initial=0)))
        if np.isfinite(top) and top > 0:
            ax.set_ylim(0, top * 1.08)
    axes[-1, 0].set_xlabel("prompt position", fontsize=8)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    height = fig.get_figheight()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=7,
               frameon=False, bbox_to_anchor=(0.5, 1 - 0.45 / height))
    gqa = clauses.get("gqa", "expand")
    fig.suptitle(f"layer {layer}: L={length}, W={window}, C={capacity}, "
                 f"gqa {gqa}, order {clauses.get('order', 'position')} "
                 f"(keeps {min(length, capacity)} per head)\n{title_route}", fontsize=9,
                 y=1 - 0.05 / height, va="top")
    fig.subplots_adjust(left=0.08, right=0.985, bottom=0.5 / height, top=1 - 0.85 / height,
                        hspace=0.18)
    target = out / f"layer{layer}.png"
    fig.savefig(target, dpi=80)
    plt.close(fig)
    return target


def cmd_visualize(args) -> int:
    if importlib.util.find_spec("matplotlib") is None:
        raise CLIError("`snapkv visualize` needs matplotlib: pip install matplotlib")
    from . import reference

    path = resolve_model(args.model, args.quiet)
    text = read_text(path)
    verify_ir(path)
    prefill_sig, _ = _signatures(text, path)
    vocab = prefill_sig.results[0].shape[-1] if prefill_sig.results else None
    ids, where = _prompt(args, vocab)
    length = ids.shape[1]
    if count_selects(text):
        _progress(args.quiet, f"{_show(path)} already holds snapkv.select: using its selects "
                              f"as they "
                              f"are (the compaction options are not used)")
        rewritten = text
        window = min(int(m.group("clauses").split()[1]) for m in _SELECT.finditer(text))
        _check_runnable(text, path, length, window, decode=False)
    else:
        _check_window_capacity(args)
        _check_runnable(text, path, length, args.window, decode=False)
        _progress(args.quiet, f"rewriting {_show(path)} ({describe_options(args)}) ...")
        rewritten, warnings, _ = rewrite(path, args)
        if warnings.strip():
            print(_diagnostics(warnings), file=sys.stderr)
    function, layers, base = _compile_scores(rewritten, args)
    try:
        outputs = function(ids)
    except ValueError as error:
        raise CLIError(str(error)) from None
    wanted = range(len(layers)) if args.layers is None else args.layers
    route = ("scores: the compiled model's own snapkv.score (same operands and clauses as its "
             "snapkv.select); kept: the compiled select's indices")
    print(f"snapkv visualize: {_show(path)}; prompt {length} tokens ({where})")
    for layer in wanted:
        clauses = layers[layer]
        q, k, indices, votes, pooled = outputs[base + 5 * layer: base + 5 * layer + 5]
        window, capacity = int(clauses["window"]), int(clauses["capacity"])
        options = dict(kernel=int(clauses.get("kernel", 5)), pooling=clauses.get("pooling", "avg"),
                       gqa=clauses.get("gqa", "expand"), order=clauses.get("order", "position"))
        if "scale" in clauses:
            options["scale"] = float(clauses["scale"])
        ref = reference.select(q, k, k, window, capacity, **options)
        same = np.array_equal(ref.indices, indices)
        if length >= capacity:
            votes_diff = float(np.max(np.abs(ref.votes - votes))) if votes.size else 0.0
            pooled_diff = float(np.max(np.abs(ref.pooled - pooled))) if pooled.size else 0.0
            check = (f"numpy reference on the compiled Q/K: "
                     f"{'same kept positions' if same else 'DIFFERENT kept positions'}, "
                     f"max |votes diff| {votes_diff:.2g}, max |pooled diff| {pooled_diff:.2g}")
        else:
            check = (f"L < C: nothing is dropped (numpy reference: "
                     f"{'same' if same else 'DIFFERENT'} indices)")
        heads_are_query = options["gqa"] == "expand"
        group = q.shape[1] // k.shape[1]
        target = _plot_layer(args.out, layer, votes[0], pooled[0], indices[0], clauses, length,
                             heads_are_query, group, route)
        print(f"layer {layer}: wrote {_show(target)} ({target.stat().st_size:,} bytes); {check}")
        prefix = length - window
        for h in range(indices.shape[1]):
            kept = [int(i) for i in indices[0, h] if i < prefix]
            print(f"  head {h}: kept prefix positions {kept} + window {prefix}..{length - 1}")
    return 0


# ---------------------------------------------------------------------------------------------
# The parser

EPILOG = """\
examples:
  snapkv generate                                  # the bundled tiny Llama, 96-token prompt
  snapkv generate --prompt-len 128 --capacity 32 --gqa mean --steps 32
  snapkv compile test/Models/tiny_llama_dynamic.mlir -o /tmp/compact.mlir --capacity 32
  snapkv ledger --prompt-length 16384 --generated 512 --window 32 --capacity 1024
  snapkv visualize --out /tmp/snapkv-plots

Docs: docs/user-guide.md (CLI), docs/model-rewrite.md (the pass), ../shared/SPEC.md.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=_Formatter, epilog=EPILOG,
        description="SnapKV KV-cache compression for models imported with torch-mlir: "
                    "rewrite a model so that prefill caches the SnapKV-selected K/V, compile "
                    "and run it, and see what it keeps and saves.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    common, compaction = _common_parent(), _compaction_parent()

    p = commands.add_parser(
        "export", parents=[common], formatter_class=_Formatter,
        help="regenerate the tiny-Llama model fixtures (needs torch)",
        description="Export the tiny random-weight HuggingFace Llama (2 layers, 4 query heads, "
                    "2 kv heads, head dim 16) with torch-mlir's FX importer to "
                    "linalg-on-tensors MLIR: @prefill and @decode in one module "
                    "(docs/model-ir.md). Deterministic; nothing is downloaded.\n\n"
                    "Needs: pip install torch transformers torch-mlir (the versions the "
                    "committed fixtures were made with: pip install -e 'python[frontend]').",
        epilog="example:\n  snapkv export --out /tmp/models --dynamic")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="where to write tiny_llama.mlir, tiny_llama_dynamic.mlir and "
                        "tiny_llama.json (default: the checkout's test/Models)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--dynamic", action="store_true",
                       help="only the dynamic-shape module (tiny_llama_dynamic.mlir: any "
                            "prompt length, a growing cache; what generate runs)")
    which.add_argument("--static", action="store_true",
                       help="only the static-shape module (tiny_llama.mlir: L = 64)")
    p.add_argument("--check", action="store_true",
                   help="compile and run the written modules (snapkv-opt + mlir-runner) and "
                        "compare them with PyTorch")
    p.set_defaults(func=cmd_export)

    p = commands.add_parser(
        "compile", parents=[common, _compaction_parent(strict=True)],
        formatter_class=_Formatter,
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
    _model_argument(p, required=True)
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
    p.set_defaults(func=cmd_compile)

    p = commands.add_parser(
        "generate", parents=[common, compaction], formatter_class=_Formatter,
        help="generate tokens with the compacted cache and with the full cache, side by side",
        description="Rewrite MODEL.mlir with snapkv-compress-kv-cache, compile the rewritten "
                    "and the original module ahead of time (cached under "
                    "~/.cache/snapkv/runner, or $SNAPKV_RUNNER_CACHE), then greedily generate "
                    "with each: prefill on the prompt, then --steps decode steps. Prints both "
                    "token sequences, per-step agreement, the logical length (what RoPE "
                    "counts) next to the physical cache rows, a teacher-forced comparison "
                    "(the full run's tokens fed to the compacted model), the cache ledger "
                    "(snapkv-opt --snapkv-report-cache on the rewritten module) with the bytes "
                    "the runs actually held, and compile and run times. Progress goes to "
                    "stderr.",
        epilog="examples:\n"
               "  snapkv generate\n"
               "  snapkv generate --prompt-len 128 --capacity 32 --gqa mean --steps 32\n"
               "  snapkv generate --prompt \"5 17 42 7 99 3 64 12 250 1 8 33\" --window 4 "
               "--capacity 8 --steps 4")
    _model_argument(p)
    _add_prompt_options(p)
    p.add_argument("--steps", "-n", type=_int_at_least(0, "the number of steps"),
                   default=DEFAULT_STEPS, metavar="N", help="decode steps (tokens generated "
                                                            "after the first)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show each compile step (snapkv-opt, mlir-translate, clang)")
    p.set_defaults(func=cmd_generate)

    p = commands.add_parser(
        "ledger", parents=[common, compaction], formatter_class=_Formatter,
        help="the persistent K/V cache ledger of the rewritten model",
        description="Rewrite MODEL.mlir with snapkv-compress-kv-cache and print snapkv-opt "
                    "--snapkv-report-cache for a prompt of --prompt-length tokens followed by "
                    "--generated decoded tokens: per layer, the bytes of the native full "
                    "cache (2*B*Hkv*(L+g)*D*e) and of the compacted one "
                    "(2*B*Hc*(min(L,C)+g)*D*e, Hc = Hq for gqa expand, Hkv for mean/max; "
                    "SPEC section 4). A module that already holds snapkv.select (the output "
                    "of `snapkv compile`) is reported as it is. Weights and temporaries are "
                    "not counted.",
        epilog="examples:\n"
               "  snapkv ledger\n"
               "  snapkv ledger --prompt-length 4096 --generated 256 --capacity 512 "
               "--gqa mean")
    _model_argument(p)
    p.add_argument("--prompt-length", "-L", type=_int_at_least(1, "the prompt length"),
                   default=DEFAULT_PROMPT_LEN, metavar="L", help="prompt length L")
    p.add_argument("--generated", "-g", type=_int_at_least(0, "the generated count"),
                   default=DEFAULT_STEPS, metavar="G",
                   help="decoded tokens whose K/V have been appended")
    p.set_defaults(func=cmd_ledger)

    p = commands.add_parser(
        "visualize", parents=[common, compaction], formatter_class=_Formatter,
        help="plot votes, pooled scores and kept positions per layer (PNG)",
        description="Writes DIR/layer<i>.png for each layer: for every cache head, the votes "
                    "(bars) and pooled scores (line) along the prompt, the positions the "
                    "selection keeps (red) and the window (shaded). Everything plotted comes "
                    "from the COMPILED model: the rewritten prefill is extended, at the text "
                    "level, with a snapkv.score next to each snapkv.select (same queries, "
                    "keys and clauses) and made to return its votes and pooled scores, the "
                    "select's indices and its Q/K; that prefill is compiled with the CPU "
                    "pipeline and run on the prompt. The numpy reference "
                    "(snapkv.reference.select) is run on the returned Q/K as a check. Needs "
                    "matplotlib.",
        epilog="examples:\n"
               "  snapkv visualize --out /tmp/snapkv-plots\n"
               "  snapkv visualize --out /tmp/plots --gqa mean --pooling max --kernel-size 3 "
               "--layers 0")
    _model_argument(p)
    _add_prompt_options(p)
    p.add_argument("--out", "-o", type=Path, required=True, metavar="DIR",
                   help="directory for the PNGs (created if needed)")
    p.add_argument("--layers", type=_layer_list, metavar="I,J",
                   help="only these layers (comma-separated; default: all)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show each compile step (snapkv-opt, mlir-translate, clang)")
    p.set_defaults(func=cmd_visualize)
    return parser


def _layer_list(value: str) -> List[int]:
    try:
        layers = [int(p) for p in value.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--layers takes layer numbers like 0,1; got {value!r}")
    if not layers or min(layers) < 0:
        raise argparse.ArgumentTypeError(f"--layers takes layer numbers >= 0; got {value!r}")
    return layers


def _version() -> str:
    try:
        import importlib.metadata

        return importlib.metadata.version("snapkv")
    except Exception:  # not installed: running from the checkout
        return "(from source)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args)
    except CLIError as error:
        print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return 1
    except ToolError as error:
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


if __name__ == "__main__":
    sys.exit(main())
