"""Ahead-of-time runner for exported model modules (``@prefill`` + ``@decode``).

:class:`CompiledModel` compiles a module's text once into a shared library and calls it in
process with ctypes, so a generation loop does not pay ``mlir-runner``'s JIT per call:

1. ``llvm.emit_c_interface`` is added to ``@prefill`` and ``@decode`` (textually, in the
   function headers; nothing else in the module changes);
2. ``snapkv-opt --snapkv-cpu-pipeline`` (the same lowering :mod:`.harness` uses), then
   ``mlir-translate --mlir-to-llvmir``, then ``clang -O2 -march=native -shared -fPIC``, linked
   against LLVM's ``libmlir_c_runner_utils.so`` (the lowered code calls its ``memrefCopy``);
3. the ``.so`` is kept in a cache directory under a name that is the sha256 of the module text,
   the tool paths (with their sizes and modification times, so a rebuilt ``snapkv-opt``
   recompiles), the flags and the CPU; a second :class:`CompiledModel` on the same text loads
   it without compiling (``from_cache`` says which happened). The directory is
   ``$SNAPKV_RUNNER_CACHE``, else ``~/.cache/snapkv/runner`` (a temp directory if that is not
   writable); nothing is evicted (each rebuild of ``snapkv-opt`` adds entries), delete it to
   clean up. Compiling the tiny fixture takes about 15 s, most of it clang ``-O2``.

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

A failed ``cf.assert`` in the compiled code (e.g. an out-of-range token id in the embedding
gather) prints a message and aborts the process; :meth:`CompiledModel.prefill` and
:meth:`CompiledModel.decode` check token ids against the vocabulary first.

Needs numpy and the tools only (no torch). Command line::

    python -m snapkv.frontend.runner test/Models/tiny_llama_dynamic.mlir --prompt-len 16 \\
        --steps 8 -v
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..mlirgen import ToolError, snapkv_opt_path

# Bumped when the way a library is built or called changes (part of the cache key).
RUNNER_VERSION = 2
LLVM_BIN = Path("/usr/lib/llvm-22/bin")
DEFAULT_CFLAGS = ("-O2", "-march=native")
C_INTERFACE = "llvm.emit_c_interface"

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


@dataclass(frozen=True)
class _Header:
    start: int          # offset of "func.func"
    body: int           # offset of the "{" that opens the body
    attributes: Optional[Tuple[int, int]]  # offsets of the attribute dict's "{" and "}"
    args: List[str]
    results: List[str]


def _close(text: str, start: int) -> int:
    """Offset of the bracket closing the one at `start` (any of (<[{ nested)."""
    pairs = {"(": ")", "<": ">", "[": "]", "{": "}"}
    stack = []
    i = start
    while i < len(text):
        c = text[i]
        if c == '"':  # skip string literals (attribute values)
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == "-" and text.startswith("->", i):
            i += 1  # an arrow inside a type, not a closing ">"
        elif c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i
        i += 1
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


def _header(text: str, name: str) -> _Header:
    pattern = re.compile(r"func\.func\s+(?:(?:public|private|nested)\s+)?@" + re.escape(name)
                         + r"\s*\(")
    match = pattern.search(text)
    if not match:
        raise ValueError(f"no func.func @{name} in the module")
    open_args = match.end() - 1
    close_args = _close(text, open_args)
    args = [_strip_attrs(p) for p in _split_top(text[open_args + 1:close_args])]
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
    return _Header(match.start(), i + body.end() - 1, attributes, args, results)


def signature(text: str, name: str) -> Signature:
    """Argument and result types of ``func.func @name`` in `text`."""
    header = _header(text, name)
    return Signature(tuple(TensorType.parse(a) for a in header.args),
                     tuple(TensorType.parse(r) for r in header.results))


def with_c_interface(text: str, names: Sequence[str] = ("prefill", "decode")) -> str:
    """`text` with ``llvm.emit_c_interface`` on each ``@name`` (unchanged if already there)."""
    edits = []
    for name in names:
        header = _header(text, name)
        if header.attributes is None:
            edits.append((header.body, f"attributes {{{C_INTERFACE}}} "))
        else:
            lo, hi = header.attributes
            if re.search(r"\b" + re.escape(C_INTERFACE) + r"\b", text[lo:hi]):
                continue
            inner = text[lo + 1:hi].strip()
            edits.append((lo + 1, C_INTERFACE + (", " if inner else "")))
    for offset, insert in sorted(edits, reverse=True):
        text = text[:offset] + insert + text[offset:]
    return text


# ---------------------------------------------------------------------------------------------
# Compiling

def _tool(env: str, name: str) -> Path:
    if os.environ.get(env):
        return Path(os.environ[env])
    path = LLVM_BIN / name
    return path if path.is_file() else Path(name)


def mlir_translate_path() -> Path:
    return _tool("MLIR_TRANSLATE", "mlir-translate")


def clang_path() -> Path:
    return _tool("CLANG", "clang")


def runtime_lib_dir() -> Path:
    """Where ``libmlir_c_runner_utils.so`` is ($MLIR_LIB_DIR, default LLVM 22's lib/)."""
    return Path(os.environ.get("MLIR_LIB_DIR", "/usr/lib/llvm-22/lib"))


def default_cache_dir() -> Path:
    if os.environ.get("SNAPKV_RUNNER_CACHE"):
        return Path(os.environ["SNAPKV_RUNNER_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "snapkv" / "runner"


def _resolve(tool: Path) -> Path:
    if tool.is_file():
        return tool.resolve()
    found = __import__("shutil").which(str(tool))
    if not found:
        raise ToolError(f"{tool} not found")
    return Path(found).resolve()


def _fingerprint(path: Path) -> str:
    stat = path.stat()
    return f"{path} {stat.st_size} {stat.st_mtime_ns}"


def _cpu() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    model = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
    flags = re.search(r"^flags\s*:\s*(.*)$", info, re.M)
    return f"{model.group(1) if model else ''} | {flags.group(1) if flags else ''}"


@dataclass
class Library:
    path: Path
    from_cache: bool
    seconds: float      # compile time, or the time to find the cached library
    key: str


def _log(verbose, message, end="\n"):
    if verbose:
        print(message, end=end, file=sys.stderr, flush=True)


def _step(verbose, label, command, timeout):
    shown = " ".join(shlex.quote(str(c)) for c in command)
    if len(shown) > 160:
        shown = shown[:157] + "..."
    _log(verbose, f"{label}: {shown} ...", end="")
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
    return elapsed


def compile_library(text: str, functions: Sequence[str] = ("prefill", "decode"), *,
                    cache_dir: Optional[os.PathLike] = None, verbose: bool = False,
                    cflags: Sequence[str] = DEFAULT_CFLAGS, timeout: int = 1800) -> Library:
    """Compile `text` (``llvm.emit_c_interface`` added to `functions`) into a cached ``.so``."""
    start = time.perf_counter()
    opt, translate, clang = (_resolve(snapkv_opt_path()), _resolve(mlir_translate_path()),
                             _resolve(clang_path()))
    libdir = runtime_lib_dir()
    runtime = libdir / "libmlir_c_runner_utils.so"
    if not runtime.is_file():
        raise ToolError(f"{runtime} not found (set MLIR_LIB_DIR)")
    key_parts = [f"runner {RUNNER_VERSION}", *map(_fingerprint, (opt, translate, clang, runtime)),
                 " ".join(cflags), ",".join(functions), platform.machine()]
    if any(f.startswith("-march=native") or f.startswith("-mcpu=native") for f in cflags):
        key_parts.append(_cpu())
    digest = hashlib.sha256()
    for part in key_parts:
        digest.update(part.encode() + b"\0")
    digest.update(text.encode())
    key = digest.hexdigest()
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / f"{key}.so"
    label = "/".join(functions)
    if target.is_file():
        _log(verbose, f"compiling {label}: cached {target}")
        return Library(target, True, time.perf_counter() - start, key)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        if not os.access(cache, os.W_OK):
            raise PermissionError(cache)
    except OSError:
        if cache_dir is not None:
            raise
        cache = Path(tempfile.gettempdir()) / f"snapkv-runner-{os.getuid()}"
        cache.mkdir(parents=True, exist_ok=True)
        target = cache / f"{key}.so"
        if target.is_file():
            _log(verbose, f"compiling {label}: cached {target}")
            return Library(target, True, time.perf_counter() - start, key)
    with tempfile.TemporaryDirectory(prefix="snapkv-runner-") as tmp:
        source, lowered, llvm_ir = Path(tmp) / "in.mlir", Path(tmp) / "lowered.mlir", \
            Path(tmp) / "module.ll"
        source.write_text(with_c_interface(text, functions))
        times = {}
        times["snapkv-opt"] = _step(verbose, f"compiling {label}: snapkv-opt",
                                    [opt, "--snapkv-cpu-pipeline", source, "-o", lowered],
                                    timeout)
        times["mlir-translate"] = _step(verbose, f"compiling {label}: mlir-translate",
                                        [translate, "--mlir-to-llvmir", lowered, "-o", llvm_ir],
                                        timeout)
        partial = Path(tmp) / "module.so"
        times["clang"] = _step(verbose, f"compiling {label}: clang",
                               [clang, *cflags, "-shared", "-fPIC", "-Wno-override-module",
                                llvm_ir, "-o", partial, f"-L{libdir}", "-lmlir_c_runner_utils",
                                # --snapkv-cpu-pipeline's parallel loops call libomp.
                                "-lomp", f"-Wl,-rpath,{libdir}"], timeout)
        # Atomic: a concurrent compile of the same text writes the same bytes.
        staged = cache / f".{key}.{os.getpid()}.so"
        staged.write_bytes(partial.read_bytes())
        os.replace(staged, target)
    meta = {"key": key, "key_parts": key_parts, "cflags": list(cflags), "seconds": times}
    (cache / f"{key}.json").write_text(json.dumps(meta, indent=1) + "\n")
    elapsed = time.perf_counter() - start
    _log(verbose, f"compiling {label}: {target} in {elapsed:.1f} s")
    return Library(target, False, elapsed, key)


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


class CompiledFunction:
    """``_mlir_ciface_<name>`` of a loaded library, called on numpy arrays."""

    def __init__(self, lib: ctypes.CDLL, name: str, sig: Signature):
        self.name, self.signature = name, sig
        try:
            self._fn = getattr(lib, f"_mlir_ciface_{name}")
        except AttributeError:
            raise ToolError(f"_mlir_ciface_{name} not in {lib._name}") from None
        self._result_type = type(f"{name}_results", (ctypes.Structure,), {"_fields_": [
            (f"r{i}", descriptor_type(t.rank)) for i, t in enumerate(sig.results)]})
        params = [ctypes.POINTER(descriptor_type(t.rank)) for t in sig.args]
        if sig.results:
            params.insert(0, ctypes.POINTER(self._result_type))
        self._fn.argtypes = params
        self._fn.restype = None

    def _prepare(self, arrays):
        sig = self.signature
        if len(arrays) != len(sig.args):
            raise ValueError(f"@{self.name} takes {len(sig.args)} arguments, got {len(arrays)}")
        inputs, descriptors = [], []
        for i, (array, ttype) in enumerate(zip(arrays, sig.args)):
            array = np.ascontiguousarray(array, dtype=ttype.dtype)
            _check_shape(array, ttype, f"@{self.name} argument {i}")
            desc = descriptor_type(ttype.rank)()
            desc.allocated = desc.aligned = array.ctypes.data
            desc.offset = 0
            for d in range(ttype.rank):
                desc.sizes[d] = array.shape[d]
                desc.strides[d] = array.strides[d] // array.itemsize
            inputs.append(array)
            descriptors.append(desc)
        return inputs, descriptors

    def _invoke(self, descriptors):
        results = self._result_type()
        params = [ctypes.byref(d) for d in descriptors]
        if self.signature.results:
            params.insert(0, ctypes.byref(results))
        self._fn(*params)
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
    """

    def __init__(self, text: str, *, cache_dir: Optional[os.PathLike] = None,
                 verbose: bool = False, cflags: Sequence[str] = DEFAULT_CFLAGS,
                 timeout: int = 1800):
        self.prefill_signature = signature(text, "prefill")
        self.decode_signature = signature(text, "decode")
        self._check_signatures()
        self.library = compile_library(text, ("prefill", "decode"), cache_dir=cache_dir,
                                       verbose=verbose, cflags=cflags, timeout=timeout)
        self._lib = ctypes.CDLL(str(self.library.path))
        self._prefill = CompiledFunction(self._lib, "prefill", self.prefill_signature)
        self._decode = CompiledFunction(self._lib, "decode", self.decode_signature)

    @classmethod
    def from_file(cls, path: os.PathLike, **kwargs) -> "CompiledModel":
        return cls(Path(path).read_text(), **kwargs)

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
        return self.decode_signature.args[2:]

    def _check_signatures(self):
        p, d = self.prefill_signature, self.decode_signature
        problems = []
        if len(p.args) != 1 or p.args[0].rank != 2 or p.args[0].elem != "i64":
            problems.append(f"@prefill takes {list(map(str, p.args))}, expected one [B, L] i64")
        if len(p.results) < 1 or p.results[0].rank != 3:
            problems.append("@prefill's first result is not [B, L, V] logits")
        if len(d.args) < 2 or d.args[0].rank != 2 or d.args[1].rank != 1 or \
                d.args[0].elem != "i64" or d.args[1].elem != "i64":
            problems.append("@decode does not start with (id [B, 1] i64, position [1] i64)")
        caches = len(p.results) - 1
        if len(d.args) - 2 != caches or len(d.results) - 1 != caches:
            problems.append(f"@prefill returns {caches} caches but @decode takes "
                            f"{len(d.args) - 2} and returns {len(d.results) - 1}")
        if any(t.rank != 4 for t in (*p.results[1:], *d.args[2:], *d.results[1:])):
            problems.append("cache tensors are not all [B, H, T, D]")
        if problems:
            raise ValueError("not a prefill/decode model module: " + "; ".join(problems))

    def _check_ids(self, ids: np.ndarray):
        # The compiled embedding gather would fail its cf.assert and abort the process.
        check_token_ids(ids, self.vocab_size)

    def prefill(self, ids) -> Tuple[np.ndarray, List[np.ndarray]]:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None]
        self._check_ids(ids)
        out = self._prefill(ids)
        return out[0], out[1:]

    def decode(self, token: int, position: int, caches: Sequence[np.ndarray]) \
            -> Tuple[np.ndarray, List[np.ndarray]]:
        ids = np.array([[int(token)]], dtype=np.int64)
        self._check_ids(ids)
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

    def generate(self, ids, steps: int) -> dict:
        """Greedy decoding: prefill, then `steps` decode steps.

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
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.ndim == 1:
            ids = ids[None]
        if steps < 0:
            raise ValueError("steps must be >= 0")
        length = ids.shape[1]
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

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path, help="MLIR file with @prefill and @decode")
    parser.add_argument("--ids", help="comma-separated prompt ids (default: random)")
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    model = CompiledModel.from_file(args.module, cache_dir=args.cache_dir, verbose=args.verbose)
    if args.ids:
        ids = np.array([[int(x) for x in args.ids.split(",")]], dtype=np.int64)
    else:
        ids = np.random.default_rng(args.seed).integers(0, model.vocab_size or 2,
                                                        (1, args.prompt_len))
    start = time.perf_counter()
    out = model.generate(ids, args.steps)
    elapsed = time.perf_counter() - start
    print(f"library: {model.library.path} ({'cached' if model.from_cache else 'compiled'})")
    print(f"prompt:  {ids[0].tolist()}")
    print(f"tokens:  {out['tokens']}")
    print(f"logical lengths:  {out['logical_lengths']}")
    print(f"physical lengths: {out['physical_lengths']}")
    print(f"cache shape: {out['cache_shapes']}; generate took {elapsed * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
