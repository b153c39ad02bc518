"""The compile cache: where compiled libraries live, what names them (digests of what was
compiled and by which tools), and how it stays bounded (least recently used first).

The directory is ``$SNAPKV_RUNNER_CACHE``, else ``~/.cache/snapkv/runner`` (a temp directory
if that is not writable). A library is named by the sha256 of the LLVM bitcode that clang
compiles, clang's flags and version, and the CPU (for ``-march=native``), so rebuilding
snapkv-opt without changing its output recompiles nothing. So that loading a cached model does
not run snapkv-opt again, a small index file (``<sha256>.key``) maps the sha256 of the module
text, the pipeline, the bytes of snapkv-opt and snapkv-translate and the LLVM version to that
name (:func:`snapkv.runtime.build.compile_library` computes both keys). The cache is bounded:
after a compile, the least recently used libraries (each use refreshes a library's
modification time) are deleted until the libraries take at most ``$SNAPKV_RUNNER_CACHE_MB``
megabytes (default 1024); index files whose library is gone go with them.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import tempfile
import threading
from pathlib import Path
from typing import List, Optional, Sequence

from .. import tools
from ..tools import ToolError

DEFAULT_CACHE_MB = 1024


def default_cache_dir() -> Path:
    if os.environ.get("SNAPKV_RUNNER_CACHE"):
        return Path(os.environ["SNAPKV_RUNNER_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "snapkv" / "runner"


def cache_limit_bytes() -> int:
    """``$SNAPKV_RUNNER_CACHE_MB`` (default 1024) in bytes."""
    value = os.environ.get("SNAPKV_RUNNER_CACHE_MB", "")
    try:
        megabytes = float(value) if value else DEFAULT_CACHE_MB
    except ValueError:
        raise ToolError(f"SNAPKV_RUNNER_CACHE_MB must be a number of megabytes, got {value!r}") \
            from None
    return int(megabytes * 1024 * 1024)


def _file_digest(path: Path) -> str:
    """sha256 of a tool's bytes (the tools are small: they link libMLIR.so). Remembered per
    process while the file's size and modification time stay the same, so a tool rebuilt
    under a running process is hashed again."""
    stat = path.stat()
    return _digest_of(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _digest_of(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def _version_of(tool: Path) -> str:
    return tools.run([tool, "--version"], timeout=60, what=f"{tool} --version").stdout.strip()


def _cpu() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    model = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
    flags = re.search(r"^flags\s*:\s*(.*)$", info, re.M)
    return f"{model.group(1) if model else ''} | {flags.group(1) if flags else ''}"


def _sha256(*parts) -> str:
    """sha256 of `parts` (str or bytes), each followed by a NUL."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update((part.encode() if isinstance(part, str) else part) + b"\0")
    return digest.hexdigest()



def _writable_cache(cache_dir: Optional[os.PathLike]) -> Path:
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    try:
        cache.mkdir(parents=True, exist_ok=True)
        if not os.access(cache, os.W_OK):
            raise PermissionError(cache)
    except OSError:
        if cache_dir is not None:
            raise
        cache = Path(tempfile.gettempdir()) / f"snapkv-runner-{os.getuid()}"
        cache.mkdir(parents=True, exist_ok=True)
    return cache


def _write_atomic(path: Path, data: bytes):
    """Concurrent writers of one name write the same bytes; the rename makes it atomic."""
    staged = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    staged.write_bytes(data)
    os.replace(staged, path)


def _touch(path: Path) -> bool:
    """Mark `path` as used now (the LRU order); False if it is gone."""
    try:
        os.utime(path)
        return True
    except OSError:
        return False


def evict(cache: Path, limit: int, keep: Sequence[Path] = ()) -> List[Path]:
    """Delete the least recently used libraries in `cache` (``*.so``, oldest modification time
    first, with their ``.json``) until the libraries take at most `limit` bytes, never one in
    `keep`; then delete index files (``*.key``) whose library is gone. Returns what was
    deleted. Safe against concurrent use: a library another process has loaded stays mapped."""
    keep = {Path(p).resolve() for p in keep}
    libraries = []
    for path in cache.glob("*.so"):
        try:
            stat = path.stat()
        except OSError:
            continue
        libraries.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in libraries)
    deleted = []
    for _, size, path in sorted(libraries, key=lambda entry: entry[0]):
        if total <= limit:
            break
        if path.resolve() in keep:
            continue
        for victim in (path, path.with_suffix(".json")):
            try:
                victim.unlink()
                deleted.append(victim)
            except FileNotFoundError:
                pass
        total -= size
    for index in cache.glob("*.key"):
        try:
            if not (cache / index.read_text().strip()).is_file():
                index.unlink()
                deleted.append(index)
        except OSError:
            pass
    return deleted
