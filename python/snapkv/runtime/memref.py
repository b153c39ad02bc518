"""The ctypes memref ABI: calling one function of a compiled library on numpy arrays
(:class:`CompiledFunction`), and what its run-time checks raise (:class:`CompiledCheckError`).

Run-time checks: the compiled code's checks (an out-of-range token id in the embedding
gather, a prompt shorter than the SnapKV window, mismatched dynamic sizes, ...) never end the
process. A failed check makes the function return early and leaves its message where
``snapkv_last_error()`` (exported by the library) returns it; every call is followed by that
read, and a message becomes a :class:`CompiledCheckError` (no result is read or freed; buffers
the call allocated before the check failed are leaked). Calls into one library are serialised
with a lock, because the message slot is one per library.

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
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref
from typing import List, Optional, Sequence

import numpy as np

from ..tools import ToolError
from .signatures import Signature, TensorType


class CompiledCheckError(RuntimeError):
    """A run-time check of the compiled code failed; ``message`` is the check's own text."""

    def __init__(self, function: str, message: str):
        super().__init__(f"@{function} stopped on a failed run-time check: {message}")
        self.function, self.message = function, message


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


def check_buffer(array, ttype: TensorType, what: str):
    """A buffer argument (a memref the function writes) must be passed as it is: a
    C-contiguous numpy array of its element type."""
    if not isinstance(array, np.ndarray) or array.dtype != ttype.dtype or \
            not array.flags.c_contiguous or not array.flags.writeable:
        raise ValueError(f"{what}: {ttype} is written in place, so it must be a writable "
                         f"C-contiguous {ttype.dtype} array (not a copy)")


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
                 bound: Sequence[np.ndarray] = (), checks: bool = True):
        """`bound`: arrays for the last ``len(bound)`` arguments (the weights), checked once
        and passed to every call as they are (never copied, never freed). `checks=False`
        for a library lowered without report-mode checks (no ``snapkv_last_error``: upstream's
        lowering, whose failed checks abort)."""
        self.name, self.signature = name, sig
        try:
            self._fn = getattr(lib, f"_mlir_ciface_{name}")
        except AttributeError:
            raise ToolError(f"_mlir_ciface_{name} not in {lib._name}") from None
        self._last_error = None
        if checks:
            try:
                self._last_error = lib.snapkv_last_error
            except AttributeError:
                raise ToolError(f"snapkv_last_error not in {lib._name}: not compiled with "
                                f"snapkv-cpu-pipeline{{asserts=report}}") from None
            self._last_error.argtypes = []
            self._last_error.restype = ctypes.c_char_p
        self._lock = _library_lock(lib)
        # A library that counts its heap (heap.c) frees through its own counter.
        self._free = _library_free(lib)
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
        # Made once: a decode step binds hundreds of weights, and building these per call
        # was most of its time in Python.
        self._bound_refs = [ctypes.byref(d) for d in self._bound_descriptors]
        self._bound_spans = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in self._bound]
        # {argument index: (weak reference, shape, descriptor)} of the last buffer passed
        # there: a decode step passes the same cache buffers every call.
        self._buffer_descriptors = {}

    def _descriptor(self, array, index: int, copy: bool = True):
        ttype = self.signature.args[index]
        what = f"@{self.name} argument {index}"
        if ttype.buffer:
            check_buffer(array, ttype, what)
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
            kept = self._buffer_descriptors.get(i)
            if kept is not None and kept[0]() is array and kept[1] == array.shape \
                    and array.flags.writeable:
                desc = kept[2]
            else:
                array, desc = self._descriptor(array, i)
                if sig.args[i].buffer:
                    self._buffer_descriptors[i] = (weakref.ref(array), array.shape, desc)
            inputs.append(array)
            descriptors.append(desc)
        return inputs, descriptors

    def _invoke(self, descriptors):
        """Call on the descriptors of the free arguments (the bound ones are added)."""
        results = self._result_type()
        params = [ctypes.byref(d) for d in descriptors] + self._bound_refs
        if self.signature.results:
            params.insert(0, ctypes.byref(results))
        with self._lock:
            self._fn(*params)
            message = self._last_error() if self._last_error else None
        if message is not None:
            # The results are placeholders (null buffers): nothing to read or free.
            raise CompiledCheckError(self.name, message.decode(errors="replace"))
        return results

    def _results(self, results):
        return [getattr(results, f"r{i}") for i in range(len(self.signature.results))]

    def _release(self, results, inputs):
        """Free each distinct returned allocation once; never memory of an input."""
        spans = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in inputs] + self._bound_spans
        freed = set()
        for desc in self._results(results):
            ptr = desc.allocated
            if not ptr or ptr in freed:
                continue
            freed.add(ptr)
            if any(lo <= ptr < hi for lo, hi in spans):
                continue  # cannot happen under the ownership ABI; leak rather than corrupt
            self._free(ptr)

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


def _library_free(lib: ctypes.CDLL):
    try:
        free = lib._mlir_memref_to_llvm_free
    except AttributeError:
        return _FREE
    free.argtypes, free.restype = [ctypes.c_void_p], None
    return free


HEAP_CACHE_ENV = "SNAPKV_HEAP_CACHE_MB"


def heap_cache_limit() -> Optional[int]:
    """Bytes ``$SNAPKV_HEAP_CACHE_MB`` lets a library keep of its freed blocks (None when
    unset: the library's default). heap.c reads the variable itself when it is loaded; this
    turns a value it would ignore into an error."""
    value = os.environ.get(HEAP_CACHE_ENV, "")
    if not value:
        return None
    if not value.isdigit() or int(value) > 2 ** 43 - 1:
        raise ValueError(f"{HEAP_CACHE_ENV} must be a whole number of megabytes (0 keeps no "
                         f"freed blocks), got {value!r}")
    return int(value) << 20


class HeapCounter:
    """The heap of a library built with ``generic-alloc=true`` (``runtime/heap.c``): bytes
    its code allocated and has not freed (``live``), and the most it held at once since
    :meth:`reset_peak` (``peak``), over every thread. Results are counted until the runner
    has copied them out and freed them.

    Freed blocks of 256 KiB or more are kept for the library's next allocations
    (``cached`` bytes, at most ``cache_limit``; not in ``live``): the process holds
    ``live + cached`` bytes for the compiled code. :meth:`trim` gives them back."""

    def __init__(self, lib: ctypes.CDLL):
        heap_cache_limit()  # a malformed value is an error, not a silent default
        self._live, self._peak = lib.snapkv_heap_live, lib.snapkv_heap_peak
        self._cached, self._limit = lib.snapkv_heap_cached, lib.snapkv_heap_cache_limit
        self._reset, self._trim = lib.snapkv_heap_reset_peak, lib.snapkv_heap_trim
        self._set_limit = lib.snapkv_heap_set_cache_limit
        for f in (self._live, self._peak, self._cached, self._limit):
            f.argtypes, f.restype = [], ctypes.c_int64
        for f in (self._reset, self._trim):
            f.argtypes, f.restype = [], None
        self._set_limit.argtypes, self._set_limit.restype = [ctypes.c_int64], None

    @classmethod
    def of(cls, lib: ctypes.CDLL) -> Optional["HeapCounter"]:
        """The counter of `lib`, or None for a library that does not count."""
        return cls(lib) if hasattr(lib, "snapkv_heap_peak") else None

    @property
    def live(self) -> int:
        return int(self._live())

    @property
    def peak(self) -> int:
        return int(self._peak())

    @property
    def cached(self) -> int:
        return int(self._cached())

    @property
    def cache_limit(self) -> int:
        return int(self._limit())

    @cache_limit.setter
    def cache_limit(self, nbytes: int):
        """At most `nbytes` kept from now on (0: none); blocks kept beyond it are freed."""
        if nbytes < 0:
            raise ValueError(f"a heap cache limit is >= 0 bytes, got {nbytes}")
        self._set_limit(nbytes)

    def reset_peak(self):
        self._reset()

    def trim(self):
        """Free every kept block."""
        self._trim()


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
