"""Where the tools are: snapkv-opt, snapkv-translate, mlir-opt, mlir-runner, mlir-translate,
clang and LLVM's
library directory (``libmlir_runner_utils.so``, ``libmlir_c_runner_utils.so``).

Every other module asks this one. Each tool is looked up in this order:

1. its environment variable: ``SNAPKV_OPT``, ``SNAPKV_TRANSLATE``, ``MLIR_OPT``,
   ``MLIR_RUNNER``, ``MLIR_TRANSLATE``, ``CLANG``; the library directory ``MLIR_LIB_DIR``;
2. snapkv-opt and snapkv-translate: ``build/bin/<name>`` of the checkout this package lives
   in, then ``<name>`` on ``PATH``; LLVM tools: the directory ``llvm-config-22 --bindir`` prints
   (``--libdir`` for the libraries), then ``<name>-22`` on ``PATH`` (Debian's versioned links;
   an unversioned ``clang`` on ``PATH`` may be another LLVM version and is not used);
3. ``/usr/lib/llvm-22`` (where Debian's LLVM 22 packages install).

A path that is returned need not exist; :func:`require` raises :class:`ToolError` with a hint.

Every tool call goes through :func:`run` (and :func:`opt` for snapkv-opt): one place that
starts processes, one exception hierarchy (:class:`ToolError`, :class:`ToolFailed`,
:class:`RewriteRefused`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import List, Optional, Sequence

LLVM_MAJOR = 22
DEFAULT_PREFIX = Path(f"/usr/lib/llvm-{LLVM_MAJOR}")
REPO = Path(__file__).resolve().parents[2]

_ENV = {"snapkv-opt": "SNAPKV_OPT", "snapkv-translate": "SNAPKV_TRANSLATE",
        "mlir-opt": "MLIR_OPT", "mlir-runner": "MLIR_RUNNER",
        "mlir-translate": "MLIR_TRANSLATE", "clang": "CLANG"}
_HINTS = {"snapkv-opt": "run `make build` in the repository or set SNAPKV_OPT",
          "snapkv-translate": "run `make build` in the repository or set SNAPKV_TRANSLATE",
          "mlir-opt": "install mlir-22-tools or set MLIR_OPT",
          "mlir-runner": "install mlir-22-tools or set MLIR_RUNNER",
          "mlir-translate": "install mlir-22-tools or set MLIR_TRANSLATE",
          "clang": "install clang-22 or set CLANG"}


# snapkv-opt's exit status when `snapkv-compress-kv-cache strict=true` refused the model
# (the module records why in `snapkv.refusal`); any other failure exits with 1.
REFUSAL_EXIT = 3
# Seconds a snapkv-opt call may take by default (a 30-layer model's rewrite takes ~10).
OPT_TIMEOUT = 600


class ToolError(RuntimeError):
    """A tool is missing, or a compile/run step failed. Every error of a tool call is one."""


class ToolFailed(ToolError):
    """A tool exited with a non-zero status; ``stderr`` holds its diagnostics."""

    def __init__(self, message: str, *, command: List[str], returncode: int, stderr: str):
        super().__init__(message)
        self.command, self.returncode, self.stderr = command, returncode, stderr


class RewriteRefused(ToolFailed):
    """``snapkv-compress-kv-cache strict=true`` did not recognise the model (exit status
    :data:`REFUSAL_EXIT`); nothing was rewritten."""


def run(command: Sequence[str], *, input: Optional[str] = None, timeout: float,
        what: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run `command` (text in and out, both captured) and return what it did, whatever its
    exit status. A tool that cannot be started or runs past `timeout` seconds is a
    :class:`ToolError` naming `what` (default: the command's first word)."""
    command = [str(part) for part in command]
    what = what or Path(command[0]).name
    try:
        return subprocess.run(command, input=input, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError(f"{what} timed out after {timeout:g} s") from None
    except OSError as error:
        raise ToolError(f"cannot run {command[0]}: {error.strerror or error}") from None


def check(done: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    """`done` if it exited with 0; else :class:`RewriteRefused` (exit status
    :data:`REFUSAL_EXIT`) or :class:`ToolFailed`, with the end of its diagnostics."""
    if done.returncode == 0:
        return done
    kind = RewriteRefused if done.returncode == REFUSAL_EXIT else ToolFailed
    stderr = done.stderr.strip()
    tail = stderr if len(stderr) <= 4000 else "...\n" + stderr[-4000:]
    verb = "refused the model" if kind is RewriteRefused else f"failed (exit {done.returncode})"
    raise kind(f"{what} {verb}:\n{tail}", command=list(map(str, done.args)),
               returncode=done.returncode, stderr=done.stderr)


def opt(arguments: Sequence[str], *, text: Optional[str] = None,
        path: Optional[os.PathLike] = None, timeout: float = OPT_TIMEOUT,
        checked: bool = True) -> subprocess.CompletedProcess:
    """snapkv-opt with `arguments` on `path` or on `text` (stdin); diagnostics never print the
    module. With `checked`, a non-zero exit is raised (see :func:`check`)."""
    command = [require(snapkv_opt(), "snapkv-opt"), "--mlir-print-op-on-diagnostic=false",
               *arguments, path if path is not None else "-"]
    done = run(command, input=text, timeout=timeout, what="snapkv-opt")
    return check(done, f"snapkv-opt {' '.join(arguments)}") if checked else done


@functools.lru_cache(maxsize=None)
def _llvm_config(flag: str) -> Optional[Path]:
    config = shutil.which(f"llvm-config-{LLVM_MAJOR}")
    if not config:
        return None
    try:
        done = run([config, flag], timeout=30)
    except ToolError:
        return None
    out = done.stdout.strip()
    return Path(out) if done.returncode == 0 and out else None


def llvm_bin_dir() -> Path:
    return _llvm_config("--bindir") or DEFAULT_PREFIX / "bin"


def llvm_lib_dir() -> Path:
    """``$MLIR_LIB_DIR``, else ``llvm-config-22 --libdir``, else /usr/lib/llvm-22/lib."""
    if os.environ.get("MLIR_LIB_DIR"):
        return Path(os.environ["MLIR_LIB_DIR"])
    return _llvm_config("--libdir") or DEFAULT_PREFIX / "lib"


def find(name: str) -> Path:
    """The path of LLVM tool `name` (see the module docstring for the order)."""
    variable = _ENV.get(name)
    if variable and os.environ.get(variable):
        return Path(os.environ[variable])
    configured = _llvm_config("--bindir")
    if configured and (configured / name).is_file():
        return configured / name
    versioned = shutil.which(f"{name}-{LLVM_MAJOR}")
    if versioned:
        return Path(versioned)
    return DEFAULT_PREFIX / "bin" / name


def _ours(name: str) -> Path:
    """Its environment variable, else the checkout's build/bin/<name>, else <name> on PATH."""
    if os.environ.get(_ENV[name]):
        return Path(os.environ[_ENV[name]])
    built = REPO / "build" / "bin" / name
    if built.is_file():
        return built
    on_path = shutil.which(name)
    return Path(on_path) if on_path else built


def snapkv_opt() -> Path:
    """``$SNAPKV_OPT``, else the checkout's build/bin/snapkv-opt, else snapkv-opt on PATH."""
    return _ours("snapkv-opt")


def snapkv_translate() -> Path:
    """``$SNAPKV_TRANSLATE``, else the checkout's build/bin/snapkv-translate, else on PATH."""
    return _ours("snapkv-translate")


def mlir_opt() -> Path:
    return find("mlir-opt")


def mlir_runner() -> Path:
    return find("mlir-runner")


def mlir_translate() -> Path:
    return find("mlir-translate")


def clang() -> Path:
    return find("clang")


def runner_libs() -> List[Path]:
    """The libraries ``mlir-runner -shared-libs=`` needs: printing and memref copies, and
    libomp for the parallel loops of --snapkv-cpu-pipeline."""
    lib = llvm_lib_dir()
    return [lib / "libmlir_runner_utils.so", lib / "libmlir_c_runner_utils.so",
            lib / "libomp.so"]


def require(path: Path, name: Optional[str] = None) -> Path:
    """`path` if it is an executable file or found on PATH; else a ToolError with a hint."""
    if path.is_file():
        return path
    found = shutil.which(str(path)) if not path.is_absolute() else None
    if found:
        return Path(found)
    hint = _HINTS.get(name or path.name, "set MLIR_LIB_DIR" if path.suffix == ".so" else "")
    raise ToolError(f"{path} not found" + (f" ({hint})" if hint else ""))
