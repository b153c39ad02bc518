"""Compiling a module's text into a cached shared library (:func:`compile_library`):

1. ``snapkv-opt --pass-pipeline="builtin.module(func.func(llvm-request-c-wrappers),
   snapkv-cpu-pipeline{asserts=report generic-alloc=true})"``: upstream's ``llvm-request-c-wrappers`` gives every
   function a C interface (``_mlir_ciface_<name>``), and the CPU pipeline (the lowering
   :mod:`snapkv.frontend.harness` uses) lowers run-time checks in *report* mode
   (:mod:`snapkv.runtime.memref`);
2. ``snapkv-translate`` (``mlir-translate --mlir-to-llvmir`` and ``llvm-split`` in one
   process, LLVM bitcode out): a lowered module over 48 KB of MLIR bytecode is split by
   function into one part per core (at most 4 parts of about equal size); then
   ``clang -O2 -march=native -fno-unroll-loops -fPIC`` compiles the parts at the same time
   and links them into a shared library with LLVM's ``libmlir_c_runner_utils.so`` (the
   lowered code calls its ``memrefCopy``) and libomp, with ``-Bsymbolic`` (a function named
   like a libc one, ``@select``, is still the one its C wrapper calls), and with ``heap.c``:
   ``generic-alloc=true`` makes every allocation call its ``_mlir_memref_to_llvm_alloc``,
   which counts the bytes held (``snapkv_heap_peak``) and reuses the large blocks the
   library freed instead of having the kernel map and zero new pages for each
   (``$SNAPKV_HEAP_CACHE_MB``, :class:`~snapkv.runtime.memref.HeapCounter`). The tools come from
   :mod:`snapkv.tools`;
3. the ``.so`` is cached (:mod:`snapkv.runtime.cache`); ``from_cache`` says whether it was
   compiled.

Compiling the tiny fixture takes a few seconds, about half of it clang ``-O2``
(``docs/benchmarks.md``, "Compile time").
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import platform
import resource
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from .. import tools
from ..tools import ToolError
from .cache import (
    _cpu,
    _file_digest,
    _sha256,
    _touch,
    _version_of,
    _writable_cache,
    _write_atomic,
    cache_limit_bytes,
    evict,
)

# Bumped when the way a library is built or called changes (part of the cache keys).
RUNNER_VERSION = 9
PIPELINE = ("builtin.module(func.func(llvm-request-c-wrappers),"
            "snapkv-cpu-pipeline{asserts=report generic-alloc=true})")
# Defines the allocation functions generic-alloc calls, counting the heap and keeping
# freed large blocks for reuse.
HEAP_COUNTER = Path(__file__).resolve().with_name("heap.c")
# -fno-unroll-loops: the pipeline already unrolls register tiles; LLVM unrolling their loops
# again doubles the code clang optimises (half its time) for no measured speed-up
# (docs/benchmarks.md, "Compile time").
DEFAULT_CFLAGS = ("-O2", "-march=native", "-fno-unroll-loops")


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


def _step(verbose, label, command, timeout, stats=None, output=None, name=None):
    """Run `command`; its wall seconds. With `stats`, ``stats[name]`` (default: the program's
    file name) gets its wall and CPU seconds (the child's own, so a busy machine shows as
    wall > CPU) and the bytes of `output`. Callers that read an entry back name it: a tool
    set by its environment variable may have any file name."""
    shown = " ".join(shlex.quote(str(c)) for c in command)
    if len(shown) > 160:
        shown = shown[:157] + "..."
    _log(verbose, f"{label}: {shown} ...", end="")
    cpu = _children_cpu()
    start = time.perf_counter()
    what = name or Path(str(command[0])).name
    try:
        tools.check(tools.run(command, timeout=timeout, what=what), what)
    except ToolError:
        _log(verbose, f" failed after {time.perf_counter() - start:.1f} s")
        raise
    elapsed = time.perf_counter() - start
    _log(verbose, f" done in {elapsed:.1f} s")
    if stats is not None:
        stats[name or Path(str(command[0])).name] = dict(
            wall=elapsed, cpu=_children_cpu() - cpu,
            bytes=Path(output).stat().st_size if output else None)
    return elapsed


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
                     timeout, stats, output, "clang")
    cpu, start = _children_cpu(), time.perf_counter()
    _log(verbose, f"compiling {label}: clang, {len(sources)} parts in parallel ...", end="")

    def compile_part(src):
        what = f"clang on {src.name}"
        return tools.check(tools.run([clang, *common, "-c", "-x", "ir", src, "-o", f"{src}.o"],
                                     timeout=timeout, what=what), what)

    # One thread per part waits for its clang (tools.run, the one way tools are run).
    with concurrent.futures.ThreadPoolExecutor(len(sources)) as pool:
        done = [pool.submit(compile_part, src) for src in sources]
    failed = next((f.exception() for f in done if f.exception() is not None), None)
    if failed is not None:
        _log(verbose, " failed")
        raise failed
    _log(verbose, " done")
    _step(verbose, f"compiling {label}: link",
          [clang, *common, "-shared", *(f"{src}.o" for src in sources), *link], timeout)
    elapsed = time.perf_counter() - start
    stats["clang"] = dict(wall=elapsed, cpu=_children_cpu() - cpu,
                          bytes=Path(output).stat().st_size, parts=len(sources))
    return elapsed


def _native(cflags: Sequence[str]) -> bool:
    return any(f.startswith(("-march=native", "-mcpu=native")) for f in cflags)


def _microkernel(pipeline: str, cflags: Sequence[str]) -> tuple:
    """(`pipeline`, what its bf16 contractions use). The CPU pipeline's bf16 microkernel
    follows clang's target: the host's CPU features (``cpu-features=host``, the default:
    AVX512_BF16's vdpbf16ps where this CPU has it) only when clang compiles for this CPU
    (``-march=native``); otherwise ``cpu-features=-avx512bf16``, the fallback that widens
    the operands to f32, which every x86-64 runs. A ``cpu-features=`` already in `pipeline`
    is kept."""
    if "snapkv-cpu-pipeline{" not in pipeline or "cpu-features=" in pipeline:
        return pipeline, "as the pipeline's cpu-features say"
    if not _native(cflags):
        forced = pipeline.replace("snapkv-cpu-pipeline{",
                                  "snapkv-cpu-pipeline{cpu-features=-avx512bf16 ", 1)
        return forced, "fallback (f32 FMAs): not compiled for this CPU (no -march=native)"
    if "avx512_bf16" in _cpu().split():
        return pipeline, "avx512bf16 (vdpbf16ps)"
    return pipeline, "fallback (f32 FMAs): this CPU has no AVX512_BF16"


def compile_library(text: str, *, cache_dir: Optional[os.PathLike] = None,
                    verbose: bool = False, cflags: Sequence[str] = DEFAULT_CFLAGS,
                    timeout: int = 1800, label: str = "module",
                    pipeline: str = PIPELINE) -> Library:
    """Compile `text` into a cached ``.so`` whose every function has a C interface and whose
    run-time checks report (``snapkv_last_error``) instead of aborting. `pipeline` replaces
    ``PIPELINE`` (for other options of ``snapkv-cpu-pipeline``; it must keep
    ``llvm-request-c-wrappers`` and ``asserts=report``)."""
    start = time.perf_counter()
    pipeline, microkernel = _microkernel(pipeline, cflags)
    _log(verbose, f"compiling {label}: bf16 matmuls: {microkernel}")
    opt = tools.require(tools.snapkv_opt(), "snapkv-opt")
    translate = tools.require(tools.snapkv_translate(), "snapkv-translate")
    clang = tools.require(tools.clang(), "clang")
    libdir = tools.llvm_lib_dir()
    runtime = tools.require(libdir / "libmlir_c_runner_utils.so")
    cache = _writable_cache(cache_dir)

    # Fast path: the index of this text, pipeline and these tools names a library.
    # clang's version stands for the LLVM libraries the two tools load.
    # Compiled for this CPU, the lowering depends on it too (the bf16 microkernel).
    # heap.c is linked in: a change to it names another library.
    source_key = _sha256(f"runner {RUNNER_VERSION}", pipeline, _file_digest(opt.resolve()),
                         _file_digest(translate.resolve()), _file_digest(HEAP_COUNTER),
                         _version_of(clang),
                         " ".join(cflags), _cpu() if _native(cflags) else "", text)
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
                                      source, "-o", lowered], timeout, stats, lowered,
                                     "snapkv-opt")}
        parts = min(_cores(), 4) if lowered.stat().st_size >= SPLIT_BYTECODE_BYTES else 1
        prefix = Path(tmp) / "part"
        times["snapkv-translate"] = _step(
            verbose, f"compiling {label}: snapkv-translate",
            [translate, "--parts", str(parts), "-o", prefix if parts > 1 else f"{prefix}0",
             lowered], timeout, stats, name="snapkv-translate")
        bitcode = [Path(f"{prefix}{i}") for i in range(parts)]
        stats["snapkv-translate"]["bytes"] = sum(b.stat().st_size for b in bitcode)
        key_parts = [f"runner {RUNNER_VERSION}", " ".join(cflags), _version_of(clang),
                     str(runtime.resolve()), platform.machine(), _file_digest(HEAP_COUNTER)]
        if _native(cflags):
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
            if "generic-alloc=true" in pipeline:
                link.append(HEAP_COUNTER)
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
