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
