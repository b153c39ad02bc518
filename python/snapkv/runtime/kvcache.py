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

    @property
    def allocated(self) -> int:
        """Bytes of the buffers, spare room included."""
        return sum(b.nbytes for b in self.buffers)

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


class RaggedKVCache(Sequence):
    """Per-layer ragged K/V (``budget=adaptive``, docs/model-ir.md): each layer's keys and
    values are packed buffers ``[B, R, D]`` in which cache head ``c`` holds ``lengths[b, c]``
    valid rows from row ``starts[b, c]`` on, heads in ascending order with room after each
    for the rows decode appends. Decode's ``rows`` argument is ``[P, 2, B, Hc]``: per layer,
    the starts then the lengths.

    `layers`: what prefill returns per layer, ``(keys [B, T, D], values [B, T, D], offsets
    [B, Hc + 1])`` (``snapkv.select_adaptive``'s packed rows: head ``c`` is rows ``offsets[b,
    c] .. offsets[b, c + 1]``); `spare`: rows of room to leave after every head.

    Reads as the sequence ``[k0, v0, k1, v1, ...]`` of each buffer's valid rows packed ``[B,
    T, D]`` (a copy, without the room), like prefill's results."""

    def __init__(self, layers: Sequence[Sequence[np.ndarray]], spare: int = 16):
        if spare < 0:
            raise ValueError(f"spare rows must be >= 0, got {spare}")
        self.buffers: List[np.ndarray] = []
        starts, lengths = [], []
        for keys, values, offsets in layers:
            offsets = np.asarray(offsets, dtype=np.int64)
            if keys.ndim != 3 or values.shape != keys.shape or offsets.ndim != 2 or \
                    offsets.shape[0] != keys.shape[0] or \
                    np.any(np.diff(offsets, axis=1) < 0) or np.any(offsets[:, 0] != 0) or \
                    np.any(offsets[:, -1] > keys.shape[1]):
                raise ValueError(f"a ragged layer must be keys and values [B, T, D] and "
                                 f"ascending offsets [B, Hc + 1] from 0 within T, got "
                                 f"{keys.shape}, {values.shape}, {offsets.tolist()}")
            count = np.diff(offsets, axis=1)
            layout = self._layout(count, spare)
            self.buffers += [self._move(a, offsets, count, layout) for a in (keys, values)]
            starts.append(layout[:, :-1])
            lengths.append(count)
        self.starts = np.array(starts, dtype=np.int64).reshape(-1, *count.shape) \
            if layers else np.zeros((0, 1, 1), np.int64)
        self.lengths = np.array(lengths, dtype=np.int64).reshape(self.starts.shape)

    @staticmethod
    def _layout(count: np.ndarray, spare: int) -> np.ndarray:
        """[B, Hc + 1] head starts (and the end) with `spare` rows after every head; every
        batch row gets the same buffer length (the largest)."""
        room = count + spare
        ends = np.concatenate([np.zeros((count.shape[0], 1), np.int64),
                               np.cumsum(room, axis=1)], axis=1)
        ends[:, -1] = ends[:, -1].max()
        return ends

    @staticmethod
    def _move(source: np.ndarray, starts: np.ndarray, count: np.ndarray,
              to: np.ndarray) -> np.ndarray:
        """A zeroed ``[B, to[:, -1].max(), D]`` buffer holding each head's `count` rows of
        `source` (from `starts`) at the starts `to` gives."""
        buffer = np.zeros((source.shape[0], int(to[:, -1].max()), source.shape[2]),
                          source.dtype)
        for b in range(source.shape[0]):
            for c in range(count.shape[1]):
                n = int(count[b, c])
                buffer[b, to[b, c]:to[b, c] + n] = source[b, starts[b, c]:starts[b, c] + n]
        return buffer

    def _packed(self, layer: int):
        """Layer `layer`'s offsets [B, Hc + 1] of its rows packed without room."""
        count = self.lengths[layer]
        return np.concatenate([np.zeros((count.shape[0], 1), np.int64),
                               np.cumsum(count, axis=1)], axis=1)

    def reserve(self, rows: int):
        """Room for `rows` more rows after every head: a layer where some head has less is
        laid out again (one copy) with at least half its rows again as room per head."""
        for layer in range(len(self.starts)):
            starts, count = self.starts[layer], self.lengths[layer]
            limit = np.concatenate([starts[:, 1:], np.full((starts.shape[0], 1),
                                    self.buffers[2 * layer].shape[1])], axis=1)
            if np.all(starts + count + rows <= limit):
                continue
            spare = max(rows, int(count.max()) // 2, 16)
            layout = self._layout(count, spare)
            for i in (2 * layer, 2 * layer + 1):
                self.buffers[i] = self._move(self.buffers[i], starts, count, layout)
            self.starts[layer] = layout[:, :-1]

    def appended(self):
        """Record that a decode step wrote one row after every head's valid rows."""
        self.lengths += 1

    def rows_argument(self) -> np.ndarray:
        """Decode's ``rows``: ``[P, 2, B, Hc]``, each layer's starts then lengths."""
        return np.ascontiguousarray(np.stack([self.starts, self.lengths], axis=1))

    @property
    def rows(self):
        """Each layer's valid rows, summed over heads (the first batch row's)."""
        totals = tuple(int(n) for n in self.lengths[:, 0].sum(axis=-1))
        return totals[0] if len(set(totals)) == 1 else totals

    @property
    def nbytes(self) -> int:
        """Bytes of the valid rows (what the cache holds, not its spare room)."""
        total = 0
        for layer in range(len(self.starts)):
            for buffer in self.buffers[2 * layer:2 * layer + 2]:
                total += int(self.lengths[layer].sum()) * buffer.shape[2] * buffer.itemsize
        return total

    @property
    def allocated(self) -> int:
        """Bytes of the buffers, the room after every head included."""
        return sum(b.nbytes for b in self.buffers)

    def heads(self, index: int) -> List[np.ndarray]:
        """Buffer `index`'s valid rows per cache head (batch row 0): ``[rows_c, D]`` views."""
        layer = index // 2
        return [self.buffers[index][0, s:s + n] for s, n in
                zip(self.starts[layer][0], self.lengths[layer][0])]

    def __len__(self) -> int:
        return len(self.buffers)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        layer = index // 2
        return self._move(self.buffers[index], self.starts[layer], self.lengths[layer],
                          self._packed(layer))

    def __repr__(self):
        return (f"RaggedKVCache({len(self)} buffers, {self.rows} rows, "
                f"{self.nbytes / 2**20:.1f} MiB held)")
