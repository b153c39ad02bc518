"""The module a command works on: a MODEL argument as a module file (the bundled tiny model
by default, exported first if missing) or a checkpoint directory (exported, cached), with the
checkpoint its weights come from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .. import hf
from ..tools import ToolError
from . import export, locate
from .locate import FIXTURE, load_checkpoint
from .messages import CLIError, progress, read_text, show
from .opt import verify_ir


def default_model(quiet: bool = False) -> Path:
    """The bundled test/Models/tiny_llama_dynamic.mlir; exported first if it is missing."""
    path = locate.models_dir() / FIXTURE
    if path.is_file():
        return path
    missing = locate.missing_frontend_packages()
    if missing:
        raise CLIError(f"the bundled model {show(path)} is missing and cannot be made here: it is "
                       f"exported from PyTorch by `snapkv export`, and "
                       f"{locate.frontend_hint(missing)}. Or pass a MODEL.mlir.")
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


def export_checkpoint(directory: Path, args, quiet: bool) -> Source:
    """The exported module of checkpoint `directory` (from the export cache, or exported now
    with torch-mlir)."""
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
