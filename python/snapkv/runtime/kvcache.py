"""Caches a decode step writes in place (:class:`KVCache`).

After ``snapkv-append-in-place`` a model's ``@decode`` takes its per-layer K/V as buffers
(memref arguments) plus ``rows``, the number of valid rows, and writes the new token's row at
``rows`` instead of returning longer copies (docs/model-ir.md). A :class:`KVCache` owns those
buffers: each has room for more rows than it holds, grows geometrically when full (one copy,
amortised over many steps), and reads as a sequence of the valid ``[B, H, rows, D]`` views, so
code written for a list of arrays (``caches[0].shape[2]``, ``list(caches)``) reads it alike.
"""

from __future__ import annotations

from typing import List, Sequence

import numpy as np


class KVCache(Sequence):
    """Per-layer K/V arrays ``[B, H, T, D]`` in buffers with room along dim 2.

    `arrays`: the caches as prefill returns them (equal row counts); `spare`: rows of room
    to allocate beyond them (the decode steps to come)."""

    def __init__(self, arrays: Sequence[np.ndarray], spare: int = 16):
        arrays = list(arrays)
        lengths = {a.shape[2] for a in arrays if np.ndim(a) == 4}
        if any(np.ndim(a) != 4 for a in arrays):
            raise ValueError(f"caches must be [B, H, T, D] arrays, got shapes "
                             f"{[np.shape(a) for a in arrays]}")
        if len(lengths) > 1:
            raise ValueError(f"caches of different lengths {sorted(lengths)} (layers with "
                             f"budgets of their own, budget=pyramid): decode in place takes "
                             f"one row count for every layer, so compile this model with "
                             f"CompiledModel(..., in_place=False)")
        if spare < 0:
            raise ValueError(f"spare rows must be >= 0, got {spare}")
        self.rows = lengths.pop()
        self.buffers: List[np.ndarray] = []
        for array in arrays:
            buffer = np.empty(array.shape[:2] + (self.rows + spare,) + array.shape[3:],
                              array.dtype)
            buffer[:, :, :self.rows] = array
            self.buffers.append(buffer)

    @property
    def capacity(self) -> int:
        """Rows each buffer has room for."""
        return self.buffers[0].shape[2] if self.buffers else 0

    @property
    def nbytes(self) -> int:
        """Bytes of the valid rows (what the cache holds, not its spare room)."""
        return sum(view.nbytes for view in self)

    def reserve(self, rows: int):
        """Make room for `rows` more rows: reallocate (and copy) when the buffers are too
        small, to at least 1.5x their capacity so that growing one row at a time copies
        O(rows) in total."""
        needed = self.rows + rows
        if needed <= self.capacity:
            return
        capacity = max(needed, self.capacity + self.capacity // 2, 16)
        for i, old in enumerate(self.buffers):
            new = np.empty(old.shape[:2] + (capacity,) + old.shape[3:], old.dtype)
            new[:, :, :self.rows] = old[:, :, :self.rows]
            self.buffers[i] = new

    def appended(self):
        """Record that a decode step wrote row ``rows`` of every buffer."""
        self.rows += 1

    def rows_argument(self) -> np.ndarray:
        return np.array([self.rows], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.buffers)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        return self.buffers[index][:, :, :self.rows]

    def __repr__(self):
        return (f"KVCache({len(self)} buffers, {self.rows} rows of {self.capacity}, "
                f"{self.nbytes / 2**20:.1f} MiB held)")
