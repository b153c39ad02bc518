"""Caches a decode step writes in place (:class:`KVCache`).

After ``snapkv-append-in-place`` a model's ``@decode`` takes its per-layer K/V as buffers
(memref arguments) plus ``rows``, the number of valid rows of each buffer (layers may keep
different lengths: ``budget=pyramid``), and writes the new token's row at a buffer's row
count instead of returning longer copies (docs/model-ir.md). A :class:`KVCache` owns those
buffers: each has room for more rows than it holds, grows geometrically when full (one copy,
amortised over many steps), and reads as a sequence of the valid ``[B, H, rows, D]`` views, so
code written for a list of arrays (``caches[0].shape[2]``, ``list(caches)``) reads it alike.
"""

from __future__ import annotations

from typing import List, Sequence

import numpy as np


class KVCache(Sequence):
    """Per-layer K/V arrays ``[B, H, T, D]`` in buffers with room along dim 2.

    `arrays`: the caches as prefill returns them (each its own row count T); `spare`: rows of
    room to allocate beyond them (the decode steps to come)."""

    def __init__(self, arrays: Sequence[np.ndarray], spare: int = 16):
        arrays = list(arrays)
        if any(np.ndim(a) != 4 for a in arrays):
            raise ValueError(f"caches must be [B, H, T, D] arrays, got shapes "
                             f"{[np.shape(a) for a in arrays]}")
        if spare < 0:
            raise ValueError(f"spare rows must be >= 0, got {spare}")
        self.lengths: List[int] = [a.shape[2] for a in arrays]
        self.buffers: List[np.ndarray] = []
        for array, rows in zip(arrays, self.lengths):
            buffer = np.empty(array.shape[:2] + (rows + spare,) + array.shape[3:], array.dtype)
            buffer[:, :, :rows] = array
            self.buffers.append(buffer)

    @property
    def rows(self):
        """The valid rows: one number, or each buffer's when they differ."""
        if len(set(self.lengths)) == 1:
            return self.lengths[0]
        return tuple(self.lengths)

    @property
    def capacity(self) -> int:
        """Rows the smallest buffer has room for (every buffer's, when they hold equal rows)."""
        return min(b.shape[2] for b in self.buffers) if self.buffers else 0

    @property
    def nbytes(self) -> int:
        """Bytes of the valid rows (what the cache holds, not its spare room)."""
        return sum(view.nbytes for view in self)

    def reserve(self, rows: int):
        """Make room for `rows` more rows in every buffer: reallocate (and copy) a buffer that
        is too small, to at least 1.5x its capacity so that growing one row at a time copies
        O(rows) in total."""
        for i, (old, length) in enumerate(zip(self.buffers, self.lengths)):
            needed = length + rows
            if needed <= old.shape[2]:
                continue
            capacity = max(needed, old.shape[2] + old.shape[2] // 2, 16)
            new = np.empty(old.shape[:2] + (capacity,) + old.shape[3:], old.dtype)
            new[:, :, :length] = old[:, :, :length]
            self.buffers[i] = new

    def appended(self):
        """Record that a decode step wrote one row after the valid rows of every buffer."""
        self.lengths = [n + 1 for n in self.lengths]

    def rows_argument(self) -> np.ndarray:
        """Decode's ``rows``: each buffer's valid rows, in order."""
        return np.array(self.lengths, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.buffers)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        return self.buffers[index][:, :, :self.lengths[index]]

    def __repr__(self):
        return (f"KVCache({len(self)} buffers, {self.rows} rows of {self.capacity}, "
                f"{self.nbytes / 2**20:.1f} MiB held)")
