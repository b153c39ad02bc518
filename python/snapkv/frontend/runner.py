"""Ahead-of-time runner for exported model modules (``@prefill`` + ``@decode``).

:class:`CompiledModel` compiles a module's text once into a shared library and calls it in
process with ctypes, so a generation loop does not pay ``mlir-runner``'s JIT per call:

1. ``snapkv-opt --pass-pipeline="builtin.module(func.func(llvm-request-c-wrappers),
   snapkv-cpu-pipeline{asserts=report})"``: upstream's ``llvm-request-c-wrappers`` gives every
   function a C interface (``_mlir_ciface_<name>``), and the CPU pipeline (the lowering
   :mod:`.harness` uses) lowers run-time checks in *report* mode (below);
2. ``snapkv-translate`` (``mlir-translate --mlir-to-llvmir`` and ``llvm-split`` in one
   process, LLVM bitcode out): a lowered module over 48 KB of MLIR bytecode is split by
   function into one part per core (at most 4 parts of about equal size); then
   ``clang -O2 -march=native -fno-unroll-loops -fPIC`` compiles the parts at the same time
   and links them into a shared library with LLVM's ``libmlir_c_runner_utils.so`` (the
   lowered code calls its ``memrefCopy``) and libomp, with ``-Bsymbolic`` (a function named
   like a libc one, ``@select``, is still the one its C wrapper calls). The tools come from
   :mod:`snapkv.tools`;
3. the ``.so`` is cached (see *Cache*); ``from_cache`` says whether it was compiled.

Run-time checks: the compiled code's checks (an out-of-range token id in the embedding
gather, a prompt shorter than the SnapKV window, mismatched dynamic sizes, ...) never end the
process. A failed check makes the function return early and leaves its message where
``snapkv_last_error()`` (exported by the library) returns it; every call is followed by that
read, and a message becomes a :class:`CompiledCheckError` (no result is read or freed; buffers
the call allocated before the check failed are leaked). Calls into one library are serialised
with a lock, because the message slot is one per library.

Before a call, :class:`CompiledModel` refuses, with :class:`ResourceLimitError`, an input
whose largest intermediate tensor alone would exceed the memory available (MemAvailable in
``/proc/meminfo``, or a smaller cgroup limit): tensor types with dynamic dimensions are read
from the function, every ``?`` counts as the prompt (or cache) length, so
``tensor<1x4x?x?xf32>`` costs ``16 * L^2`` bytes. With ``max_positions`` (the model's
``max_position_embeddings``, see :func:`max_positions_of`), prompts and generations that would
reach past it are refused too.

Cache: the directory is ``$SNAPKV_RUNNER_CACHE``, else ``~/.cache/snapkv/runner`` (a temp
directory if that is not writable). A library is named by the sha256 of the LLVM bitcode
that clang compiles, clang's flags and version, and the CPU (for ``-march=native``), so
rebuilding snapkv-opt without changing its output recompiles nothing. So that loading a
cached model does not run snapkv-opt again, a small index file (``<sha256>.key``) maps the
sha256 of the module text, the pipeline, the bytes of snapkv-opt and snapkv-translate and the
LLVM version to that name. The cache is bounded: after a compile, the least recently used
libraries (each use refreshes a library's modification time) are deleted until the libraries
take at most ``$SNAPKV_RUNNER_CACHE_MB`` megabytes (default 1024); index files whose library
is gone go with them. Compiling the tiny fixture takes a few seconds, about half of it clang ``-O2``
(``docs/benchmarks.md``, "Compile time").

Calling convention (``_mlir_ciface_<name>``): every tensor argument is passed as a pointer to a
ranked memref descriptor ``{allocated, aligned, offset, sizes[rank], strides[rank]}``; the
results come back through a pointer, passed as the FIRST parameter, to a struct holding one
such descriptor per result, in order.

Result ownership: the pipeline bufferizes with ``bufferize-function-boundaries`` and runs
``buffer-deallocation-pipeline``, whose function-boundary ABI makes every returned memref owned
by the caller: results are fresh allocations (a returned argument or constant is cloned first;
checked on this toolchain). They are ``malloc``'d by the library (``finalize-memref-to-llvm``
without aligned alloc), so the runner copies each result into a numpy array and then calls libc
``free`` on the descriptor's ``allocated`` pointer (not ``aligned``). The same allocation can
be returned more than once (returning one value twice gives two descriptors of one buffer),
so each distinct pointer is freed once; a pointer that falls inside an input array is never
freed. Input arrays are made contiguous and kept referenced until the call returns.

Shapes are never assumed: head counts and lengths come from the function signatures and from
the returned descriptors (after ``snapkv-compress-kv-cache`` the cache may hold ``Hq`` heads
and ``min(L, capacity)`` rows after prefill).

Needs numpy and the tools only (no torch). Command line::

    python -m snapkv.frontend.runner test/Models/tiny_llama_dynamic.mlir --prompt-length 16 \\
        --steps 8 -v
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import tools
from ..tools import ToolError
from .checkpoint import WeightRef, bind_layout

# Bumped when the way a library is built or called changes (part of the cache keys).
RUNNER_VERSION = 8
PIPELINE = ("builtin.module(func.func(llvm-request-c-wrappers),"
            "snapkv-cpu-pipeline{asserts=report})")
# -fno-unroll-loops: the pipeline already unrolls register tiles; LLVM unrolling their loops
# again doubles the code clang optimises (half its time) for no measured speed-up
# (docs/benchmarks.md, "Compile time").
DEFAULT_CFLAGS = ("-O2", "-march=native", "-fno-unroll-loops")
DEFAULT_CACHE_MB = 1024

_ELEMENTS = {
    "f32": (np.float32, ctypes.c_float), "f64": (np.float64, ctypes.c_double),
    "f16": (np.float16, ctypes.c_uint16), "bf16": (np.uint16, ctypes.c_uint16),  # bf16 bits
    "i64": (np.int64, ctypes.c_int64), "i32": (np.int32, ctypes.c_int32),
    "i16": (np.int16, ctypes.c_int16), "i8": (np.int8, ctypes.c_int8),
    "i1": (np.bool_, ctypes.c_bool),  # memref<i1> elements are one byte each
}


# ---------------------------------------------------------------------------------------------
# Signatures

@dataclass(frozen=True)
class TensorType:
    """A ranked tensor type; ``None`` for a dynamic dimension."""
    shape: Tuple[Optional[int], ...]
    elem: str

    @classmethod
    def parse(cls, text: str) -> "TensorType":
        match = re.fullmatch(r"\s*tensor<([^<>]*)>\s*", text)
        if not match:
            raise ValueError(f"unsupported type {text.strip()!r} (ranked tensors only)")
        parts = match.group(1).split("x")
        elem = parts[-1].strip()
        if elem not in _ELEMENTS:
            raise ValueError(f"unsupported element type {elem!r} in {text.strip()!r}")
        shape = tuple(None if p.strip() == "?" else int(p) for p in parts[:-1])
        return cls(shape, elem)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(_ELEMENTS[self.elem][0])

    def __str__(self):
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
        return f"tensor<{dims}{self.elem}>"


@dataclass(frozen=True)
class Signature:
    args: Tuple[TensorType, ...]
    results: Tuple[TensorType, ...]
    # Per argument, the checkpoint tensor it takes (its `snapkv.weight` attribute, and
    # `snapkv.transposed`), or None.
    weights: Tuple[Optional[WeightRef], ...] = ()

    @property
    def inputs(self) -> Tuple[TensorType, ...]:
        """The arguments that are not weights (weights come after them)."""
        return tuple(t for t, w in zip(self.args, self.weights or (None,) * len(self.args))
                     if w is None)

    @property
    def weight_args(self) -> List[Tuple[WeightRef, TensorType]]:
        """(the checkpoint tensor it takes, type) of each weight argument, in order."""
        return [(w, t) for t, w in zip(self.args, self.weights) if w is not None]


@dataclass(frozen=True)
class _Header:
    start: int          # offset of "func.func"
    body: int           # offset of the "{" that opens the body
    attributes: Optional[Tuple[int, int]]  # offsets of the attribute dict's "{" and "}"
    args: List[str]
    results: List[str]
    weights: List[Optional[WeightRef]]  # each argument's `snapkv.weight` attribute


_BRACKETS = {"(": ")", "<": ">", "[": "]", "{": "}"}
# What _close looks at: a string literal (skipped whole), an arrow (inside a type, not a
# closing ">") or a bracket; everything between is jumped over.
_BRACKET_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|->|[(<\[{)>\]}]')


def _close(text: str, start: int) -> int:
    """Offset of the bracket closing the one at `start` (any of (<[{ nested)."""
    stack = []
    for match in _BRACKET_TOKEN.finditer(text, start):
        c = match.group()
        if c in _BRACKETS:
            stack.append(_BRACKETS[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return match.start()
    raise ValueError(f"unbalanced {text[start]!r} at offset {start}")


def _split_top(text: str) -> List[str]:
    """Split at commas that are not nested in brackets."""
    parts, depth, last = [], 0, 0
    for i, c in enumerate(text):
        if c in "(<[{":
            depth += 1
        elif c in ")>]}" and not (c == ">" and i > 0 and text[i - 1] == "-"):
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[last:i])
            last = i + 1
    if text[last:].strip():
        parts.append(text[last:])
    return [p.strip() for p in parts]


def _strip_attrs(piece: str) -> str:
    """`%arg0: tensor<..> {attrs}` or `tensor<..> {attrs}` -> the type text."""
    if ":" in piece.split("<", 1)[0]:
        piece = piece.split(":", 1)[1]
    brace = piece.find("{")
    return (piece if brace < 0 else piece[:brace]).strip()


_WEIGHT_ATTR = re.compile(r'snapkv\.weight\s*=\s*"((?:[^"\\]|\\.)*)"')
_TRANSPOSED_ATTR = re.compile(r'\bsnapkv\.transposed\b(?!\s*=\s*false)')


def _weight_attr(piece: str) -> Optional[WeightRef]:
    """The `snapkv.weight = "name"` (and `snapkv.transposed`) of an argument's attribute
    dictionary, if any."""
    brace = piece.find("{")
    match = _WEIGHT_ATTR.search(piece[brace:]) if brace >= 0 else None
    if not match:
        return None
    return WeightRef(json.loads(f'"{match.group(1)}"'),
                     bool(_TRANSPOSED_ATTR.search(piece[brace:])))


def _header(text: str, name: str) -> _Header:
    pattern = re.compile(r"func\.func\s+(?:(?:public|private|nested)\s+)?@" + re.escape(name)
                         + r"\s*\(")
    match = pattern.search(text)
    if not match:
        raise ValueError(f"no func.func @{name} in the module")
    open_args = match.end() - 1
    close_args = _close(text, open_args)
    pieces = _split_top(text[open_args + 1:close_args])
    args = [_strip_attrs(p) for p in pieces]
    weights = [_weight_attr(p) for p in pieces]
    i = close_args + 1
    results: List[str] = []
    rest = text[i:]
    arrow = re.match(r"\s*->\s*", rest)
    if arrow:
        i += arrow.end()
        if text[i] == "(":
            close = _close(text, i)
            results = [_strip_attrs(p) for p in _split_top(text[i + 1:close])]
            i = close + 1
        else:
            end = re.compile(r"\s+attributes\s*\{|\s*\{").search(text, i)
            stop = end.start() if end else len(text)
            close_type = _close(text, text.index("<", i)) if "<" in text[i:stop] else stop - 1
            results = [text[i:close_type + 1].strip()]
            i = close_type + 1
    attributes = None
    attr = re.match(r"\s*attributes\s*\{", text[i:])
    if attr:
        open_attr = i + attr.end() - 1
        close_attr = _close(text, open_attr)
        attributes = (open_attr, close_attr)
        i = close_attr + 1
    body = re.match(r"\s*\{", text[i:])
    if not body:
        raise ValueError(f"@{name} has no body (a declaration?)")
    return _Header(match.start(), i + body.end() - 1, attributes, args, results, weights)


def signature(text: str, name: str) -> Signature:
    """Argument and result types of ``func.func @name`` in `text`, and which arguments are
    weights (``{snapkv.weight = "<tensor name>"}``, as ``snapkv export --hf`` writes them)."""
    header = _header(text, name)
    return Signature(tuple(TensorType.parse(a) for a in header.args),
                     tuple(TensorType.parse(r) for r in header.results),
                     tuple(header.weights))


_CALL = re.compile(r"\bcall @([\w.$-]+)\(")


def callees(text: str, name: str) -> List[str]:
    """The functions ``@name`` calls, directly or not (each once, in order of discovery)."""
    found: List[str] = []
    work = [name]
    while work:
        body = function_text(text, work.pop())
        for match in _CALL.finditer(body):
            if match.group(1) not in found and match.group(1) != name:
                found.append(match.group(1))
                work.append(match.group(1))
    return found


def function_text(text: str, name: str) -> str:
    """The text of ``func.func @name`` from its header to its closing brace."""
    header = _header(text, name)
    return text[header.start:_close(text, header.body) + 1]


# ---------------------------------------------------------------------------------------------
# Compiling

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
    try:
        done = subprocess.run([str(tool), "--version"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ToolError(f"cannot run {tool} --version: {error}") from None
    return done.stdout.strip()


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


@dataclass
class Library:
    path: Path
    from_cache: bool
    seconds: float      # compile time, or the time to find the cached library
    key: str
    # When compiled here: per step ("snapkv-opt", "snapkv-translate", "clang") its wall and CPU
    # seconds and the bytes it wrote; "input" holds the module's bytes.
    stats: Optional[dict] = None


def _log(verbose, message, end="\n"):
    if verbose:
        print(message, end=end, file=sys.stderr, flush=True)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _step(verbose, label, command, timeout, stats=None, output=None):
    """Run `command`; its wall seconds. With `stats`, ``stats[name]`` gets its wall and CPU
    seconds (the child's own, so a busy machine shows as wall > CPU) and the bytes of
    `output`."""
    shown = " ".join(shlex.quote(str(c)) for c in command)
    if len(shown) > 160:
        shown = shown[:157] + "..."
    _log(verbose, f"{label}: {shown} ...", end="")
    cpu = _children_cpu()
    start = time.perf_counter()
    try:
        done = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        _log(verbose, " timed out")
        raise ToolError(f"timed out after {timeout}s: {command[0]}") from None
    except FileNotFoundError:
        _log(verbose, " not found")
        raise ToolError(f"{command[0]} not found") from None
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        _log(verbose, f" failed after {elapsed:.1f} s")
        raise ToolError(f"{Path(str(command[0])).name} failed (exit {done.returncode}):\n"
                        f"{done.stderr[-4000:]}")
    _log(verbose, f" done in {elapsed:.1f} s")
    if stats is not None:
        stats[Path(str(command[0])).name] = dict(
            wall=elapsed, cpu=_children_cpu() - cpu,
            bytes=Path(output).stat().st_size if output else None)
    return elapsed


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


# A lowered module larger than this (MLIR bytecode; about a fifth of its LLVM IR text) is
# split into one part per core and the parts are compiled at the same time: clang -O2 is
# about half of a compile, and one clang uses one core.
SPLIT_BYTECODE_BYTES = 48 * 1024


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _clang(verbose, label, clang, cflags, sources, link, timeout, stats, output):
    """clang the bitcode files `sources` (at the same time) into the shared library `output`;
    its wall seconds."""
    common = [*cflags, "-fPIC", "-Wno-override-module"]
    if len(sources) == 1:
        return _step(verbose, f"compiling {label}: clang",
                     [clang, *common, "-shared", "-x", "ir", sources[0], "-x", "none", *link],
                     timeout, stats, output)
    cpu, start = _children_cpu(), time.perf_counter()
    _log(verbose, f"compiling {label}: clang, {len(sources)} parts in parallel ...", end="")
    running = [(subprocess.Popen([str(c) for c in (clang, *common, "-c", "-x", "ir", src,
                                                     "-o", f"{src}.o")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True),
                src) for src in sources]
    failed = None
    for process, src in running:
        try:
            _, err = process.communicate(timeout=max(1.0, timeout - (time.perf_counter()
                                                                      - start)))
        except subprocess.TimeoutExpired:
            for other, _ in running:
                other.kill()
            raise ToolError(f"timed out after {timeout}s: {clang}") from None
        if process.returncode != 0 and failed is None:
            failed = f"clang failed (exit {process.returncode}) on {src.name}:\n{err[-4000:]}"
    if failed:
        _log(verbose, " failed")
        raise ToolError(failed)
    _log(verbose, " done")
    _step(verbose, f"compiling {label}: link",
          [clang, *common, "-shared", *(f"{src}.o" for src in sources), *link], timeout)
    elapsed = time.perf_counter() - start
    stats["clang"] = dict(wall=elapsed, cpu=_children_cpu() - cpu,
                          bytes=Path(output).stat().st_size, parts=len(sources))
    return elapsed


def compile_library(text: str, *, cache_dir: Optional[os.PathLike] = None,
                    verbose: bool = False, cflags: Sequence[str] = DEFAULT_CFLAGS,
                    timeout: int = 1800, label: str = "module",
                    pipeline: str = PIPELINE) -> Library:
    """Compile `text` into a cached ``.so`` whose every function has a C interface and whose
    run-time checks report (``snapkv_last_error``) instead of aborting. `pipeline` replaces
    ``PIPELINE`` (for other options of ``snapkv-cpu-pipeline``; it must keep
    ``llvm-request-c-wrappers`` and ``asserts=report``)."""
    start = time.perf_counter()
    opt = tools.require(tools.snapkv_opt(), "snapkv-opt")
    translate = tools.require(tools.snapkv_translate(), "snapkv-translate")
    clang = tools.require(tools.clang(), "clang")
    libdir = tools.llvm_lib_dir()
    runtime = tools.require(libdir / "libmlir_c_runner_utils.so")
    cache = _writable_cache(cache_dir)

    # Fast path: the index of this text, pipeline and these tools names a library.
    # clang's version stands for the LLVM libraries the two tools load.
    source_key = _sha256(f"runner {RUNNER_VERSION}", pipeline, _file_digest(opt.resolve()),
                         _file_digest(translate.resolve()), _version_of(clang),
                         " ".join(cflags), text)
    index = cache / f"{source_key}.key"
    try:
        name = index.read_text().strip()
    except OSError:
        name = ""
    if name and _touch(cache / name):
        _log(verbose, f"compiling {label}: cached {cache / name}")
        return Library(cache / name, True, time.perf_counter() - start, name[:-3])

    with tempfile.TemporaryDirectory(prefix="snapkv-runner-") as tmp:
        # The lowered module goes to snapkv-translate as MLIR bytecode, and from there to
        # clang as LLVM bitcode: printing and parsing text took a tenth of the compile.
        source, lowered = Path(tmp) / "in.mlir", Path(tmp) / "lowered.mlirbc"
        source.write_text(text)
        stats = {"input": dict(bytes=source.stat().st_size)}
        times = {"snapkv-opt": _step(verbose, f"compiling {label}: snapkv-opt",
                                     [opt, f"--pass-pipeline={pipeline}", "--emit-bytecode",
                                      source, "-o", lowered], timeout, stats, lowered)}
        parts = min(_cores(), 4) if lowered.stat().st_size >= SPLIT_BYTECODE_BYTES else 1
        prefix = Path(tmp) / "part"
        times["snapkv-translate"] = _step(
            verbose, f"compiling {label}: snapkv-translate",
            [translate, "--parts", str(parts), "-o", prefix if parts > 1 else f"{prefix}0",
             lowered], timeout, stats)
        bitcode = [Path(f"{prefix}{i}") for i in range(parts)]
        stats["snapkv-translate"]["bytes"] = sum(b.stat().st_size for b in bitcode)
        key_parts = [f"runner {RUNNER_VERSION}", " ".join(cflags), _version_of(clang),
                     str(runtime.resolve()), platform.machine()]
        if any(f.startswith(("-march=native", "-mcpu=native")) for f in cflags):
            key_parts.append(_cpu())
        key = _sha256(*key_parts, *(b.read_bytes() for b in bitcode))
        target = cache / f"{key}.so"
        from_cache = _touch(target)
        if from_cache:
            _log(verbose, f"compiling {label}: the same LLVM IR is cached: {target}")
        else:
            partial = Path(tmp) / "module.so"
            link = ["-o", partial, f"-L{libdir}", "-lmlir_c_runner_utils",
                    # --snapkv-cpu-pipeline's parallel loops call libomp.
                    "-lomp", f"-Wl,-rpath,{libdir}",
                    # The module's calls to its own functions stay inside it: else a
                    # function named like one of libc's (@select) calls libc's.
                    "-Wl,-Bsymbolic"]
            times["clang"] = _clang(verbose, label, clang, cflags, bitcode, link, timeout,
                                    stats, partial)
            _write_atomic(target, partial.read_bytes())
            meta = {"key": key, "key_parts": key_parts, "cflags": list(cflags),
                    "seconds": times, "stats": stats}
            _write_atomic(target.with_suffix(".json"),
                          (json.dumps(meta, indent=1) + "\n").encode())
    _write_atomic(index, target.name.encode())
    if not from_cache:
        evict(cache, cache_limit_bytes(), keep=[target])
    elapsed = time.perf_counter() - start
    _log(verbose, f"compiling {label}: {target} in {elapsed:.1f} s")
    return Library(target, from_cache, elapsed, key, stats)


# ---------------------------------------------------------------------------------------------
# Memory and positions

_TENSOR = re.compile(r"tensor<((?:(?:\d+|\?)x)+)(\w+)>")
_BYTES = {"i1": 1, "i8": 1, "i16": 2, "f16": 2, "bf16": 2, "i32": 4, "f32": 4, "i64": 8,
          "f64": 8, "index": 8}


class ResourceLimitError(ValueError):
    """An input the compiled code would need more memory (or positions) for than there is."""


class CompiledCheckError(RuntimeError):
    """A run-time check of the compiled code failed; ``message`` is the check's own text."""

    def __init__(self, function: str, message: str):
        super().__init__(f"@{function} stopped on a failed run-time check: {message}")
        self.function, self.message = function, message


def growth(text: str, name: str) -> dict:
    """{k: (bytes per unit, type)}: for tensor types in ``@name`` and the functions it calls
    with k dynamic dimensions, the largest product of the static dimensions and the element
    size."""
    terms = {}
    bodies = "\n".join(function_text(text, f) for f in [name, *callees(text, name)])
    for match in _TENSOR.finditer(bodies):
        dims = match.group(1).split("x")[:-1]
        elem = _BYTES.get(match.group(2))
        dynamic = dims.count("?")
        if not dynamic or elem is None:
            continue
        static = elem
        for d in dims:
            static *= 1 if d == "?" else int(d)
        if static > terms.get(dynamic, (0, ""))[0]:
            terms[dynamic] = (static, match.group(0))
    return terms


def largest_tensor(terms: dict, length: int) -> Tuple[int, str]:
    """(bytes, type) of the largest tensor when every dynamic dimension is `length`."""
    best = (0, "")
    for dynamic, (static, ttype) in terms.items():
        best = max(best, (static * length ** dynamic, ttype))
    return best


def available_memory() -> Optional[int]:
    """Bytes this process may still allocate: MemAvailable, or a smaller cgroup v2 limit."""
    found = []
    try:
        meminfo = Path("/proc/meminfo").read_text()
        match = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.M)
        if match:
            found.append(int(match.group(1)) * 1024)
    except OSError:
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit != "max":
            found.append(max(0, int(limit) - int(used)))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def _gigabytes(count: int) -> str:
    return f"{count / 1e9:,.1f} GB" if count >= 1e8 else f"{count / 1e6:,.1f} MB"


def check_memory(terms: dict, name: str, length: int, what: str):
    """Raise ResourceLimitError when the largest tensor of ``@name`` (`terms`, see
    :func:`growth`) at `length` alone needs more than the memory available. `what` names the
    length in the message."""
    need, ttype = largest_tensor(terms, length)
    have = available_memory()
    if have is not None and need > have:
        raise ResourceLimitError(
            f"@{name} on {what} needs at least {_gigabytes(need)} for one {ttype} alone "
            f"(each ? is {length:,}); {_gigabytes(have)} of memory is available")


def check_checkpoint(model_path: os.PathLike, weights):
    """When `weights` is a Checkpoint and ``<stem>.json`` next to the module records the
    architecture it was exported from, a CheckpointError unless they are the same."""
    from .checkpoint import Checkpoint

    if not isinstance(weights, Checkpoint):
        return
    try:
        expected = json.loads(Path(model_path).with_suffix(".json").read_text())["architecture"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    weights.check_architecture(expected, Path(model_path).name)


def checkpoint_of(model_path: os.PathLike):
    """The :class:`~snapkv.frontend.checkpoint.Checkpoint` that ``<stem>.json`` next to an
    exported module names (``snapkv export --hf`` writes it); ValueError if there is none."""
    from .checkpoint import Checkpoint

    path = Path(model_path)
    meta = path.with_suffix(".json")
    try:
        data = json.loads(meta.read_text())
        directory = data["checkpoint"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"{path} takes weights (snapkv.weight arguments), and {meta.name} "
                         f"next to it does not name the checkpoint they come from: pass the "
                         f"checkpoint directory") from None
    return Checkpoint(directory)


def max_positions_of(model_path: os.PathLike) -> Optional[Tuple[int, Path]]:
    """(max_position_embeddings, file it came from) for an exported model, from the JSON the
    exporter writes next to it (``tiny_llama.json`` lists the modules it describes under
    "files" and the config under "spec"), or from ``<stem>.json`` / ``config.json`` there (a
    HuggingFace config). None if no such file names it."""
    path = Path(model_path)
    candidates = [path.with_suffix(".json"), path.parent / "config.json",
                  *sorted(path.parent.glob("*.json"))]
    for candidate in candidates:
        try:
            data = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        files = data.get("files")
        describes = isinstance(files, dict) and path.name in files
        if candidate.name == "config.json" or candidate == path.with_suffix(".json") or \
                describes:
            for config in (data.get("spec"), data):
                if isinstance(config, dict) and \
                        isinstance(config.get("max_position_embeddings"), int):
                    return config["max_position_embeddings"], candidate
    return None


# ---------------------------------------------------------------------------------------------
# Calling

_DESCRIPTORS = {}


def descriptor_type(rank: int):
    """ctypes struct of a ranked memref descriptor (every field 8 bytes, no padding)."""
    if rank not in _DESCRIPTORS:
        fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                  ("offset", ctypes.c_int64)]
        if rank:
            fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
        _DESCRIPTORS[rank] = type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})
    return _DESCRIPTORS[rank]


_LIBC = ctypes.CDLL(None)
_FREE = _LIBC.free
_FREE.argtypes = [ctypes.c_void_p]
_FREE.restype = None


def _check_shape(array: np.ndarray, ttype: TensorType, what: str):
    if array.ndim != ttype.rank or any(
            d is not None and d != n for d, n in zip(ttype.shape, array.shape)):
        raise ValueError(f"{what}: shape {array.shape} does not fit {ttype}")


_LOCKS: dict = {}
_LOCKS_GUARD = threading.Lock()


def _library_lock(lib: ctypes.CDLL) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(lib._handle, threading.Lock())


class CompiledFunction:
    """``_mlir_ciface_<name>`` of a loaded library, called on numpy arrays.

    A failed run-time check of the compiled code raises :class:`CompiledCheckError` (the
    library's ``snapkv_last_error`` is read after every call)."""

    def __init__(self, lib: ctypes.CDLL, name: str, sig: Signature,
                 bound: Sequence[np.ndarray] = ()):
        """`bound`: arrays for the last ``len(bound)`` arguments (the weights), checked once
        and passed to every call as they are (never copied, never freed)."""
        self.name, self.signature = name, sig
        try:
            self._fn = getattr(lib, f"_mlir_ciface_{name}")
        except AttributeError:
            raise ToolError(f"_mlir_ciface_{name} not in {lib._name}") from None
        try:
            self._last_error = lib.snapkv_last_error
        except AttributeError:
            raise ToolError(f"snapkv_last_error not in {lib._name}: not compiled with "
                            f"snapkv-cpu-pipeline{{asserts=report}}") from None
        self._last_error.argtypes = []
        self._last_error.restype = ctypes.c_char_p
        self._lock = _library_lock(lib)
        self._result_type = type(f"{name}_results", (ctypes.Structure,), {"_fields_": [
            (f"r{i}", descriptor_type(t.rank)) for i, t in enumerate(sig.results)]})
        params = [ctypes.POINTER(descriptor_type(t.rank)) for t in sig.args]
        if sig.results:
            params.insert(0, ctypes.POINTER(self._result_type))
        self._fn.argtypes = params
        self._fn.restype = None
        first = len(sig.args) - len(bound)
        if first < 0:
            raise ValueError(f"@{name} takes {len(sig.args)} arguments, {len(bound)} bound")
        self._bound, self._bound_descriptors = [], []
        for i, array in enumerate(bound, start=first):
            kept, desc = self._descriptor(array, i, copy=False)
            self._bound.append(kept)
            self._bound_descriptors.append(desc)

    def _descriptor(self, array, index: int, copy: bool = True):
        ttype = self.signature.args[index]
        what = f"@{self.name} argument {index}"
        if not copy and (not isinstance(array, np.ndarray) or array.dtype != ttype.dtype
                         or not array.flags.c_contiguous):
            raise ValueError(f"{what}: a bound array must be a C-contiguous {ttype.dtype} "
                             f"array")
        array = np.ascontiguousarray(array, dtype=ttype.dtype)
        _check_shape(array, ttype, what)
        desc = descriptor_type(ttype.rank)()
        desc.allocated = desc.aligned = array.ctypes.data
        desc.offset = 0
        for d in range(ttype.rank):
            desc.sizes[d] = array.shape[d]
            desc.strides[d] = array.strides[d] // array.itemsize if array.itemsize else 0
        return array, desc

    def _prepare(self, arrays):
        sig = self.signature
        free = len(sig.args) - len(self._bound)
        if len(arrays) != free:
            extra = f" (and {len(self._bound)} bound weights)" if self._bound else ""
            raise ValueError(f"@{self.name} takes {free} arguments{extra}, got {len(arrays)}")
        inputs, descriptors = [], []
        for i, array in enumerate(arrays):
            array, desc = self._descriptor(array, i)
            inputs.append(array)
            descriptors.append(desc)
        return inputs + self._bound, descriptors + self._bound_descriptors

    def _invoke(self, descriptors):
        results = self._result_type()
        params = [ctypes.byref(d) for d in descriptors]
        if self.signature.results:
            params.insert(0, ctypes.byref(results))
        with self._lock:
            self._fn(*params)
            message = self._last_error()
        if message is not None:
            # The results are placeholders (null buffers): nothing to read or free.
            raise CompiledCheckError(self.name, message.decode(errors="replace"))
        return results

    def _results(self, results):
        return [getattr(results, f"r{i}") for i in range(len(self.signature.results))]

    def _release(self, results, inputs):
        """Free each distinct returned allocation once; never memory of an input."""
        spans = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in inputs]
        freed = set()
        for desc in self._results(results):
            ptr = desc.allocated
            if not ptr or ptr in freed:
                continue
            freed.add(ptr)
            if any(lo <= ptr < hi for lo, hi in spans):
                continue  # cannot happen under the ownership ABI; leak rather than corrupt
            _FREE(ptr)

    def __call__(self, *arrays) -> List[np.ndarray]:
        inputs, descriptors = self._prepare(arrays)
        results = self._invoke(descriptors)
        try:
            return [_to_numpy(desc, ttype, f"@{self.name} result {i}") for i, (desc, ttype)
                    in enumerate(zip(self._results(results), self.signature.results))]
        finally:
            self._release(results, inputs)

    def time_call(self, *arrays, repeat: int = 1) -> List[float]:
        """Seconds of each of `repeat` bare calls (results freed, not copied) on `arrays`."""
        inputs, descriptors = self._prepare(arrays)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            results = self._invoke(descriptors)
            times.append(time.perf_counter() - start)
            self._release(results, inputs)
        return times


def _to_numpy(desc, ttype: TensorType, what: str) -> np.ndarray:
    rank, dtype = ttype.rank, ttype.dtype
    shape = tuple(desc.sizes[d] for d in range(rank)) if rank else ()
    strides = tuple(desc.strides[d] for d in range(rank)) if rank else ()
    if any(d is not None and d != n for d, n in zip(ttype.shape, shape)):
        raise ToolError(f"{what}: returned sizes {list(shape)} do not fit {ttype}")
    if any(n == 0 for n in shape):
        return np.empty(shape, dtype)
    if any(s < 0 for s in strides):
        raise ToolError(f"{what}: negative strides {list(strides)}")
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    base = desc.aligned + desc.offset * dtype.itemsize
    flat = np.frombuffer((ctypes.c_char * (extent * dtype.itemsize)).from_address(base),
                         dtype=dtype, count=extent)
    view = np.lib.stride_tricks.as_strided(flat, shape, [s * dtype.itemsize for s in strides])
    return np.array(view, copy=True, order="C")


# ---------------------------------------------------------------------------------------------
# Entry points that only call: run by the runner, not compiled

_SSA = r"%[\w.$-]+(?:#\d+)?"
_GLUE_CALL = re.compile(rf"^(?:(%[\w.$-]+)(?::(\d+))?\s*=\s*)?(?:func\.)?call\s+@([\w.$-]+)"
                        rf"\(((?:{_SSA}(?:,\s*)?)*)\)\s*:")
_GLUE_CAST = re.compile(rf"^(%[\w.$-]+)\s*=\s*tensor\.cast\s+({_SSA})\s*:\s*(tensor<[^>]*>)"
                        rf"\s+to\s+(tensor<[^>]*>)$")
_GLUE_RETURN = re.compile(rf"^(?:func\.)?return\s+((?:{_SSA}(?:,\s*)?)+)\s*:")


@dataclass(frozen=True)
class GlueFunction:
    """An entry point whose body is only ``func.call``, ``tensor.cast`` and ``return`` (what
    ``snapkv export --hf`` writes, before and after the model rewrite): its argument names and
    its operations, in order."""
    name: str
    args: Tuple[str, ...]
    ops: Tuple[tuple, ...]  # ("call", result, count, callee, operands) | ("cast", result,
    #                         operand, to) | ("return", operands)

    @property
    def callees(self) -> List[str]:
        return list(dict.fromkeys(op[3] for op in self.ops if op[0] == "call"))


def glue_function(text: str, name: str) -> Optional[GlueFunction]:
    """@name as a :class:`GlueFunction`, or None if its body holds anything else."""
    try:
        header = _header(text, name)
        body = text[header.body + 1:_close(text, header.body)]
    except ValueError:
        return None
    open_args = text.index("(", text.index("@" + name, header.start))
    pieces = _split_top(text[open_args + 1:_close(text, open_args)])
    args = tuple(piece.split(":", 1)[0].strip() for piece in pieces)
    ops = []
    for line in body.splitlines():
        line = line.strip()
        if not line:
            continue
        if (match := _GLUE_CALL.match(line)):
            result, count, callee, operands = match.groups()
            ops.append(("call", result, int(count or (1 if result else 0)), callee,
                        tuple(_split_top(operands)) if operands.strip() else ()))
        elif (match := _GLUE_CAST.match(line)):
            ops.append(("cast", match.group(1), match.group(2),
                        TensorType.parse(match.group(4))))
        elif (match := _GLUE_RETURN.match(line)):
            ops.append(("return", tuple(_split_top(match.group(1)))))
        else:
            return None
    if not ops or ops[-1][0] != "return":
        return None
    return GlueFunction(name, args, tuple(ops))


def without_glue(text: str, glue: Sequence[GlueFunction]) -> str:
    """`text` without the glue functions, and the functions they call made public (their C
    interfaces are what the runner calls)."""
    spans = sorted(((h := _header(text, g.name)).start, _close(text, h.body) + 1) for g in glue)
    for start, end in reversed(spans):
        text = text[:start] + text[end:]
    for callee in {c for g in glue for c in g.callees}:
        text = re.sub(rf"func\.func\s+private\s+@{re.escape(callee)}\s*\(",
                      f"func.func @{callee}(", text, count=1)
    return text


class GlueRunner:
    """Runs a :class:`GlueFunction` on numpy arrays: each call goes to the compiled callee
    (:class:`CompiledFunction`), casts are checked against the shapes, weights (the trailing
    arguments) are bound once. Same interface as :class:`CompiledFunction`."""

    def __init__(self, glue: GlueFunction, sig: Signature, functions: dict,
                 bound: Sequence[np.ndarray] = ()):
        self.name, self.glue, self.signature = glue.name, glue, sig
        self._functions = functions
        free = len(sig.args) - len(bound)
        self._bound = dict(zip(glue.args[free:], bound))
        self._free = glue.args[:free]

    def _run(self, arrays, timed=None):
        if len(arrays) != len(self._free):
            raise ValueError(f"@{self.name} takes {len(self._free)} arguments (and "
                             f"{len(self._bound)} bound weights), got {len(arrays)}")
        env = dict(self._bound)
        for i, (name, array, ttype) in enumerate(zip(self._free, arrays, self.signature.args)):
            array = np.ascontiguousarray(array, dtype=ttype.dtype)
            _check_shape(array, ttype, f"@{self.name} argument {i}")
            env[name] = array
        for op in self.glue.ops:
            if op[0] == "call":
                _, result, count, callee, operands = op
                outs = self._functions[callee](*(env[o] for o in operands))
                if count == 1:
                    env[result] = outs[0]
                for k in range(count if count > 1 else 0):
                    env[f"{result}#{k}"] = outs[k]
            elif op[0] == "cast":
                _, result, operand, to = op
                _check_shape(env[operand], to, f"@{self.name}: tensor.cast to {to}")
                env[result] = env[operand]
            else:
                return [env[o] for o in op[1]]
        raise AssertionError("unreachable: a glue function ends in return")

    def __call__(self, *arrays) -> List[np.ndarray]:
        return self._run(arrays)

    def time_call(self, *arrays, repeat: int = 1) -> List[float]:
        """Seconds of each of `repeat` runs (results copied out, as every call is)."""
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            self._run(arrays)
            times.append(time.perf_counter() - start)
        return times


# ---------------------------------------------------------------------------------------------
# The model

def check_token_ids(ids: np.ndarray, vocab: Optional[int]):
    """Raise ValueError unless every id is in [0, vocab) (no check when vocab is None)."""
    if vocab is not None and ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(f"token ids must be in [0, {vocab}), got {ids.min()}..{ids.max()}")


class CompiledModel:
    """A model module (``@prefill``, ``@decode``, see docs/model-ir.md) compiled to a ``.so``.

    ``prefill(ids)`` -> ``(logits [1, L, V], caches)``; ``decode(token, position, caches)`` ->
    ``(logits [1, 1, V], caches)``. ``caches`` is the list of per-layer K/V arrays
    ``[k0, v0, k1, v1, ...]``, each ``[1, H, T, D]`` as the module returns them (H and T are
    whatever the module produces: after ``snapkv-compress-kv-cache`` prefill returns
    ``min(L, capacity)`` rows and, with ``gqa=expand``, Hq heads).

    Errors are exceptions, never a dead process: a failed run-time check of the compiled
    code raises :class:`CompiledCheckError` (for example a prompt shorter than the SnapKV
    window), an input that would need more memory than is available, or positions past
    `max_positions` (the model's ``max_position_embeddings``, when given; see
    :func:`max_positions_of`), raises :class:`ResourceLimitError` before the call.
    """

    def __init__(self, text: str, *, cache_dir: Optional[os.PathLike] = None,
                 verbose: bool = False, cflags: Sequence[str] = DEFAULT_CFLAGS,
                 timeout: int = 1800, max_positions: Optional[int] = None,
                 weights=None, split_entry_points: bool = True):
        """`weights`: for a module whose entry points take weights (arguments with
        ``{snapkv.weight = "<name>"}``, written by ``snapkv export --hf``), where they come
        from: a :class:`~snapkv.frontend.checkpoint.Checkpoint` (tensors mapped from its
        safetensors files, no copy; f16/bf16 converted once to f32 where the module takes
        f32) or a mapping {name: numpy array}. Each is checked against the module's
        argument type before anything is compiled.

        `split_entry_points`: when ``@prefill`` and ``@decode`` only call other functions
        (``func.call``, ``tensor.cast``, ``return``: one function per layer, as ``snapkv
        export --hf`` writes them), compile the callees alone and make the calls from here
        (:class:`GlueRunner`): the compiled code holds one copy of each layer, and no
        function takes every weight (hundreds of memref descriptors, which clang compiles
        slowly). False compiles the module as it is."""
        self.prefill_signature = signature(text, "prefill")
        self.decode_signature = signature(text, "decode")
        self._check_signatures()
        self.weights, self.weight_notes = self._bind(weights)
        # Where a text prompt's tokenizer is (generate(text=...)): the checkpoint's directory.
        self.checkpoint_dir = getattr(weights, "path", None)
        self.max_positions = max_positions
        self._growth = {name: growth(text, name) for name in ("prefill", "decode")}
        glue = [glue_function(text, name) for name in ("prefill", "decode")] \
            if split_entry_points else [None]
        self.split = all(glue)
        if self.split:
            # The entry points only call the layer functions: compile those alone and run the
            # calls from here (one copy of each layer's code, small C interfaces).
            compiled = without_glue(text, glue)
            label = f"the functions {', '.join('@' + c for c in glue[0].callees)}"
        else:
            compiled, label = text, "prefill/decode"
        self.library = compile_library(compiled, cache_dir=cache_dir, verbose=verbose,
                                       cflags=cflags, timeout=timeout, label=label)
        self._lib = ctypes.CDLL(str(self.library.path))
        bound = {name: [self.weights[n] for n, _ in sig.weight_args] for name, sig in
                 (("prefill", self.prefill_signature), ("decode", self.decode_signature))}
        if self.split:
            functions = {callee: CompiledFunction(self._lib, callee, signature(compiled, callee))
                         for callee in dict.fromkeys(glue[0].callees + glue[1].callees)}
            self._prefill = GlueRunner(glue[0], self.prefill_signature, functions,
                                       bound["prefill"])
            self._decode = GlueRunner(glue[1], self.decode_signature, functions,
                                      bound["decode"])
        else:
            self._prefill = CompiledFunction(self._lib, "prefill", self.prefill_signature,
                                             bound["prefill"])
            self._decode = CompiledFunction(self._lib, "decode", self.decode_signature,
                                            bound["decode"])

    @classmethod
    def from_file(cls, path: os.PathLike, **kwargs) -> "CompiledModel":
        """The module at `path`; `max_positions` defaults to what :func:`max_positions_of`
        finds next to it, and `weights` (for a module that takes weights) to the checkpoint
        that the JSON next to it (``<stem>.json``, written by ``snapkv export --hf``) names."""
        if "max_positions" not in kwargs:
            found = max_positions_of(path)
            kwargs["max_positions"] = found[0] if found else None
        text = Path(path).read_text()
        if kwargs.get("weights") is None and signature(text, "prefill").weight_args:
            kwargs["weights"] = checkpoint_of(path)
        else:
            check_checkpoint(path, kwargs.get("weights"))
        return cls(text, **kwargs)

    def _bind(self, source):
        """{name: array} for every weight argument of @prefill and @decode, and notes."""
        wanted = {}
        for sig, fn in ((self.prefill_signature, "prefill"), (self.decode_signature, "decode")):
            for name, ttype in sig.weight_args:
                if any(d is None for d in ttype.shape):
                    raise ValueError(f"@{fn} weight '{name}' has a dynamic shape {ttype}")
                if name in wanted and wanted[name] != ttype:
                    raise ValueError(f"weight '{name}' is {wanted[name]} in one function and "
                                     f"{ttype} in the other")
                wanted[name] = ttype
        if not wanted:
            if source is not None:
                raise ValueError("the module takes no weights (no snapkv.weight arguments), "
                                 "but weights were given")
            return {}, []
        if source is None:
            raise ValueError(f"the module takes {len(wanted)} weights (arguments with "
                             f"snapkv.weight) but none were given: pass the checkpoint it "
                             f"was exported from")
        from .checkpoint import Checkpoint, weight_arrays

        if isinstance(source, Checkpoint):
            return weight_arrays(source, {n: (t.shape, t.elem) for n, t in wanted.items()})
        arrays, problems = {}, []
        for ref, ttype in wanted.items():
            if ref.name not in source:
                problems.append(f"{ref.name}: missing")
                continue
            array = np.asarray(source[ref.name])
            shape = array.shape[::-1] if ref.transposed else array.shape
            if array.dtype != ttype.dtype or tuple(shape) != tuple(ttype.shape):
                problems.append(f"{ref}: {array.dtype} {list(array.shape)} given, the module "
                                f"takes {ttype}")
                continue
            arrays[ref] = np.ascontiguousarray(bind_layout(ref, array))
        if problems:
            raise ValueError("the weights do not fit the module: " + "; ".join(problems[:4])
                             + (f" (and {len(problems) - 4} more)" if len(problems) > 4 else ""))
        return arrays, []

    def check_limits(self, length: int, steps: int = 0):
        """Raise ResourceLimitError if a `length`-token prompt followed by `steps` decode steps
        would run past ``max_positions`` or needs more memory than is available, before
        anything is allocated."""
        if length < 1 or steps < 0:
            raise ValueError(f"need a prompt of >= 1 tokens and steps >= 0, got {length} and "
                             f"{steps}")
        last = length + steps - 1  # the logical position of the last token fed
        if self.max_positions is not None and last >= self.max_positions:
            raise ResourceLimitError(
                f"a {length:,}-token prompt" + (f" and {steps:,} decode steps" if steps else "")
                + f" reach position {last:,}, past the model's max_position_embeddings "
                f"({self.max_positions:,}: positions 0..{self.max_positions - 1:,})")
        check_memory(self._growth["prefill"], "prefill", length, f"a {length:,}-token prompt")
        if steps:
            rows = length + steps  # an upper bound of the cache rows decode sees
            check_memory(self._growth["decode"], "decode", rows,
                         f"a cache of up to {rows:,} rows")

    @property
    def from_cache(self) -> bool:
        return self.library.from_cache

    @property
    def num_caches(self) -> int:
        return len(self.prefill_signature.results) - 1

    @property
    def vocab_size(self) -> Optional[int]:
        return self.prefill_signature.results[0].shape[-1]

    @property
    def cache_types(self) -> Tuple[TensorType, ...]:
        """Types of decode's cache arguments (head count and head dim, length usually ?)."""
        return self.decode_signature.inputs[2:]

    def _check_signatures(self):
        p, d = self.prefill_signature, self.decode_signature
        problems = []
        for sig, fn in ((p, "prefill"), (d, "decode")):
            flags = [w is not None for w in sig.weights]
            if flags != sorted(flags):
                problems.append(f"@{fn} has weight arguments before other arguments")
        pa, da = p.inputs, d.inputs
        if len(pa) != 1 or pa[0].rank != 2 or pa[0].elem != "i64":
            problems.append(f"@prefill takes {list(map(str, pa))}, expected one [B, L] i64")
        if len(p.results) < 1 or p.results[0].rank != 3:
            problems.append("@prefill's first result is not [B, L, V] logits")
        if len(da) < 2 or da[0].rank != 2 or da[1].rank != 1 or \
                da[0].elem != "i64" or da[1].elem != "i64":
            problems.append("@decode does not start with (id [B, 1] i64, position [1] i64)")
        caches = len(p.results) - 1
        if len(da) - 2 != caches or len(d.results) - 1 != caches:
            problems.append(f"@prefill returns {caches} caches but @decode takes "
                            f"{len(da) - 2} and returns {len(d.results) - 1}")
        if any(t.rank != 4 for t in (*p.results[1:], *da[2:], *d.results[1:])):
            problems.append("cache tensors are not all [B, H, T, D]")
        if problems:
            raise ValueError("not a prefill/decode model module: " + "; ".join(problems))

    def _check_ids(self, ids: np.ndarray):
        # The compiled embedding gather checks too, but says less ("index must be smaller
        # than dim size").
        check_token_ids(ids, self.vocab_size)

    def prefill(self, ids) -> Tuple[np.ndarray, List[np.ndarray]]:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None]
        self._check_ids(ids)
        if ids.ndim == 2 and ids.shape[1]:
            self.check_limits(ids.shape[1])
        out = self._prefill(ids)
        return out[0], out[1:]

    def decode(self, token: int, position: int, caches: Sequence[np.ndarray]) \
            -> Tuple[np.ndarray, List[np.ndarray]]:
        ids = np.array([[int(token)]], dtype=np.int64)
        self._check_ids(ids)
        if self.max_positions is not None and position >= self.max_positions:
            raise ResourceLimitError(f"position {position:,} is past the model's "
                                     f"max_position_embeddings ({self.max_positions:,})")
        rows = max((c.shape[2] for c in caches if np.ndim(c) == 4), default=0) + 1
        check_memory(self._growth["decode"], "decode", rows, f"a cache of {rows:,} rows")
        out = self._decode(ids, np.array([int(position)], dtype=np.int64), *caches)
        return out[0], out[1:]

    def time_decode(self, token: int, position: int, caches: Sequence[np.ndarray],
                    repeat: int = 1) -> List[float]:
        """Seconds of `repeat` bare ``_mlir_ciface_decode`` calls (no copy of the results)."""
        ids = np.array([[int(token)]], dtype=np.int64)
        self._check_ids(ids)
        return self._decode.time_call(ids, np.array([int(position)], dtype=np.int64), *caches,
                                      repeat=repeat)

    @staticmethod
    def _physical(caches):
        lengths = {c.shape[2] for c in caches}
        if len(lengths) != 1:
            raise ValueError(f"caches of different lengths {[c.shape[2] for c in caches]}")
        return lengths.pop()

    def generate(self, ids=None, steps: int = 16, *, text: Optional[str] = None,
                 chat: bool = False) -> dict:
        """Greedy decoding: prefill, then `steps` decode steps.

        The prompt is `ids` or `text`, tokenised with the checkpoint's own tokenizer (exactly
        ``AutoTokenizer.from_pretrained(dir)(text).input_ids``; `chat` applies its chat
        template first; :mod:`snapkv.tokenizer`); with `text` the result also holds
        ``text`` (the decoded continuation) and ``ids`` (the prompt's ids).

        Token 0 is the argmax of prefill's last logits row. Decode step ``g`` (1-based) feeds
        token ``g - 1`` at logical position ``L + g - 1`` (L = prompt length; ``g - 1`` tokens
        have been appended to the cache before it) and yields token ``g``.

        Returns a dict:

        * ``tokens``: ``steps + 1`` generated ids (the prompt not included);
        * ``logits``: float32 ``[steps + 1, V]``: row 0 is prefill's last row (``logits[0,
          L-1]``), row ``g`` is decode step ``g``'s ``logits[0, 0]``; ``tokens[i] ==
          argmax(logits[i])`` (first index on ties, like ``np.argmax``);
        * ``positions``: the ``steps`` logical positions fed to decode (``L .. L+steps-1``);
        * ``logical_lengths``: ``steps + 1`` tokens processed, after prefill (``L``) and after
          each decode step (``L + g``): what RoPE and masks must count;
        * ``physical_lengths``: ``steps + 1`` cache rows (dim 2 of the cache tensors, checked
          equal across layers) after prefill and after each decode step; equal to
          ``logical_lengths`` for an unmodified module, ``min(L, capacity) + g`` after
          ``snapkv-compress-kv-cache``;
        * ``cache_shapes``: the shape of the first cache tensor at the end;
        * ``caches``: the caches after the last step.
        """
        if (ids is None) == (text is None):
            raise ValueError("give the prompt as ids or as text (one of them)")
        if text is not None:
            if self.checkpoint_dir is None:
                raise ValueError("a text prompt needs the checkpoint's tokenizer: this model "
                                 "was not loaded from a checkpoint")
            from .. import tokenizer

            prompt = tokenizer.encode(self.checkpoint_dir, text, chat=chat)
            out = self.generate(prompt, steps)
            out["ids"] = prompt
            out["text"] = tokenizer.decode(self.checkpoint_dir, out["tokens"])
            return out
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None]
        if steps < 0:
            raise ValueError("steps must be >= 0")
        length = ids.shape[1]
        self.check_limits(length, steps)
        logits, caches = self.prefill(ids)
        rows = [logits[0, -1]]
        tokens = [int(np.argmax(rows[-1]))]
        logical, physical, positions = [length], [self._physical(caches)], []
        for g in range(steps):
            position = length + g
            step_logits, caches = self.decode(tokens[-1], position, caches)
            positions.append(position)
            rows.append(step_logits[0, 0])
            tokens.append(int(np.argmax(rows[-1])))
            logical.append(length + g + 1)
            physical.append(self._physical(caches))
        return dict(tokens=tokens, logits=np.stack(rows), positions=positions,
                    logical_lengths=logical, physical_lengths=physical,
                    cache_shapes=tuple(caches[0].shape) if caches else None, caches=caches)


# ---------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path, help="MLIR file with @prefill and @decode")
    parser.add_argument("--ids", help="comma-separated prompt ids (default: random)")
    parser.add_argument("--prompt-length", "--prompt-len", type=int, default=16,
                        dest="prompt_length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    try:
        model = CompiledModel.from_file(args.module, cache_dir=args.cache_dir,
                                        verbose=args.verbose)
        if args.ids:
            ids = np.array([[int(x) for x in args.ids.split(",")]], dtype=np.int64)
        else:
            model.check_limits(args.prompt_length, args.steps)  # before drawing the ids
            ids = np.random.default_rng(args.seed).integers(0, model.vocab_size or 2,
                                                            (1, args.prompt_length))
        start = time.perf_counter()
        out = model.generate(ids, args.steps)
    except (OSError, ValueError, ToolError, CompiledCheckError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - start
    print(f"library: {model.library.path} ({'cached' if model.from_cache else 'compiled'})")
    print(f"prompt:  {ids[0].tolist()}")
    print(f"tokens:  {out['tokens']}")
    print(f"logical lengths:  {out['logical_lengths']}")
    print(f"physical lengths: {out['physical_lengths']}")
    print(f"cache shape: {out['cache_shapes']}; generate took {elapsed * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
