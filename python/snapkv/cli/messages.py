"""How a command talks to its user: one-message errors, progress lines on stderr, and
files named (and read) as the user knows them."""

from __future__ import annotations

import sys
from pathlib import Path


class CLIError(Exception):
    """A problem to report to the user as one message (no traceback), exit status 1."""


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


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise CLIError(f"{show(path)}: not a text file (expected MLIR)") from None
    except OSError as error:
        raise CLIError(f"{show(path)}: {error.strerror or error}") from None
