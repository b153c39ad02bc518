"""Locating things: the source checkout and its bundled model, snapkv-opt, the frontend
packages exporting needs, and checkpoint directories."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import List

from .. import tools
from ..tools import REPO
from .messages import CLIError

FIXTURE = "tiny_llama_dynamic.mlir"
FRONTEND_PACKAGES = {"torch": "torch", "transformers": "transformers", "torch_mlir": "torch-mlir"}


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


def opt_path() -> Path:
    return tools.require(tools.snapkv_opt(), "snapkv-opt")


def load_checkpoint(directory: Path):
    from ..frontend.checkpoint import Checkpoint, CheckpointError

    try:
        return Checkpoint(directory)
    except CheckpointError as error:
        raise CLIError(str(error)) from None
