"""snapkv.runtime.memref: calling a compiled function through its C interface. Returned
buffers are freed exactly once, also when one buffer is returned twice; a failed allocation
raises instead of ending the process."""

import ctypes

import numpy as np
import pytest
from conftest import require_aot_tools
from runtime_inputs import ALLOC, OWNERSHIP

from snapkv import runtime
from snapkv.runtime import memref


def test_returned_argument_constant_and_duplicate_are_freed_safely(tmp_path, monkeypatch):
    """An argument and a constant come back as clones (caller-owned); a value returned twice
    is one allocation, freed once (a double free would abort the test process)."""
    require_aot_tools()
    lib = runtime.compile_library(OWNERSHIP, cache_dir=tmp_path)
    fn = runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "f",
                                  runtime.signature(OWNERSHIP, "f"))
    freed = []

    def free(pointer):
        if pointer not in freed:  # a double free fails the asserts below instead of aborting
            real_free(pointer)
        freed.append(pointer)

    # The library's own free (heap.c): it counts what the library holds.
    real_free = fn._free
    monkeypatch.setattr(fn, "_free", free)
    a = np.arange(5, dtype=np.float32)
    original = a.copy()
    span = range(a.ctypes.data, a.ctypes.data + a.nbytes)
    for _ in range(3):
        freed.clear()
        same, const, twice, again = fn(a)
        np.testing.assert_array_equal(same, a)
        np.testing.assert_array_equal(const, [1, 2, 3, 4])
        np.testing.assert_array_equal(twice, 2 * a)
        np.testing.assert_array_equal(again, 2 * a)
        assert not any(np.shares_memory(r, a) for r in (same, const, twice, again))
        # Three allocations (the clone of %a, the clone of the constant, %s returned twice),
        # each freed once; never the input's own memory.
        assert len(freed) == len(set(freed)) == 3, freed
        assert not any(pointer in span for pointer in freed)
    np.testing.assert_array_equal(a, original)  # the input was not written
    freed.clear()
    assert len(fn.time_call(a, repeat=2)) == 2
    assert len(freed) == 6 and not any(pointer in span for pointer in freed)
    np.testing.assert_array_equal(a, original)


def test_a_failed_allocation_raises(tmp_path):
    """malloc returning NULL is a failed check too (it used to be a write through NULL)."""
    require_aot_tools()
    lib = runtime.compile_library(ALLOC, cache_dir=tmp_path)
    fn = runtime.CompiledFunction(ctypes.CDLL(str(lib.path)), "f", runtime.signature(ALLOC, "f"))
    with pytest.raises(runtime.CompiledCheckError,
                       match=r"@f stopped on a failed run-time check: out of memory: @f could "
                             r"not allocate a memref<\?xf32>"):
        fn(np.array([2 ** 60], dtype=np.int64))
    (out,) = fn(np.array([3], dtype=np.int64))
    np.testing.assert_array_equal(out, [1, 1, 1])


def test_the_heap_is_counted(tmp_path):
    """The runner's libraries allocate through heap.c (generic-alloc=true): a call's peak is
    at least what it returned, and once the runner has freed the results nothing is held.
    A library without the counter has none (HeapCounter.of is None) and is freed by libc."""
    require_aot_tools()
    lib = ctypes.CDLL(str(runtime.compile_library(ALLOC, cache_dir=tmp_path).path))
    fn = runtime.CompiledFunction(lib, "f", runtime.signature(ALLOC, "f"))
    heap = memref.HeapCounter.of(lib)
    assert heap is not None and heap.live == 0
    for n in (1000, 250_000):
        heap.reset_peak()
        (out,) = fn(np.array([n], dtype=np.int64))
        assert out.shape == (n,)
        assert 4 * n <= heap.peak < 4 * n + 4096
        assert heap.live == 0
    plain = runtime.compile_library(
        ALLOC, cache_dir=tmp_path,
        pipeline=runtime.PIPELINE.replace(" generic-alloc=true", ""))
    lib = ctypes.CDLL(str(plain.path))
    assert memref.HeapCounter.of(lib) is None
    fn = runtime.CompiledFunction(lib, "f", runtime.signature(ALLOC, "f"))
    assert fn._free is memref._FREE
    np.testing.assert_array_equal(fn(np.array([3], dtype=np.int64))[0], [1, 1, 1])


def test_freed_large_blocks_are_kept_within_the_limit(tmp_path, monkeypatch):
    """A freed block of 256 KiB or more is kept and taken back by an allocation it fits with
    at most an eighth to spare; smaller ones go back to malloc; the limit bounds what is
    kept (lowering it frees the excess), trim frees everything, and $SNAPKV_HEAP_CACHE_MB
    sets the limit when a library is loaded (a malformed value is an error)."""
    require_aot_tools()
    monkeypatch.delenv(memref.HEAP_CACHE_ENV, raising=False)
    path = runtime.compile_library(ALLOC, cache_dir=tmp_path).path
    lib = ctypes.CDLL(str(path))
    fn = runtime.CompiledFunction(lib, "f", runtime.signature(ALLOC, "f"))
    heap = memref.HeapCounter.of(lib)
    assert heap.cache_limit == 1 << 30 and heap.cached == 0
    mib = 1 << 20

    def call(nbytes):
        (out,) = fn(np.array([nbytes // 4], dtype=np.int64))
        assert out.shape == (nbytes // 4,) and (out == 1).all()
        assert heap.live == 0  # kept blocks are not live

    call(1000)
    assert heap.cached == 0  # small: freed
    call(5 * mib)
    kept = heap.cached
    assert 5 * mib <= kept < 5 * mib + 8192
    call(5 * mib - 256 * 1024)  # fits the kept block: taken back, then kept again
    assert heap.cached == kept
    call(4 * mib)  # more than an eighth to spare: a block of its own
    assert kept + 4 * mib <= heap.cached < kept + 4 * mib + 8192
    heap.cache_limit = 5 * mib  # lowered: the least recently freed (5 MiB) goes first
    assert 4 * mib <= heap.cached < 4 * mib + 8192
    call(6 * mib)  # larger than the limit: freed
    assert 4 * mib <= heap.cached < 4 * mib + 8192
    heap.cache_limit = 12 * mib
    call(5 * mib)  # kept beside the 4 MiB block
    assert 9 * mib <= heap.cached < 9 * mib + 8192
    call(6 * mib)  # 15 MiB would be over the limit: the older block (4 MiB) goes
    assert 11 * mib <= heap.cached < 11 * mib + 8192
    call(5 * mib)  # and the 5 MiB one is still there
    assert 11 * mib <= heap.cached < 11 * mib + 8192
    heap.trim()
    assert heap.cached == 0
    heap.cache_limit = 0
    call(5 * mib)
    assert heap.cached == 0
    with pytest.raises(ValueError, match="heap cache limit is >= 0 bytes"):
        heap.cache_limit = -1

    # The environment is read when a library is loaded (a copy: dlopen loads a path once).
    monkeypatch.setenv(memref.HEAP_CACHE_ENV, "3")
    copy = tmp_path / "copy.so"
    copy.write_bytes(path.read_bytes())
    assert memref.HeapCounter.of(ctypes.CDLL(str(copy))).cache_limit == 3 * mib
    monkeypatch.setenv(memref.HEAP_CACHE_ENV, "lots")
    with pytest.raises(ValueError, match=r"SNAPKV_HEAP_CACHE_MB must be a whole number of "
                                         r"megabytes \(0 keeps no freed blocks\), got 'lots'"):
        memref.HeapCounter.of(lib)
