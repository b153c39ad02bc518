"""Running snapkv-opt: a module parsed and verified, described, its layer functions found, and
snapkv-opt's diagnostics shown."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional, Sequence

from .. import interface, tools
from .locate import opt_path
from .messages import CLIError, read_text, show


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


def layer_functions(text: str):
    """The layer functions' names (see :func:`snapkv.hf.layer_functions`); None also for a
    module snapkv-opt rejects, whose diagnostics the command's own snapkv-opt run reports
    against the file."""
    from ..hf import layer_functions as find

    try:
        return find(text)
    except tools.ToolFailed:
        return None
