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

from typing import List, Optional, Sequence

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


class KVPool:
    """The caches of many sequences for one batched decode step (``@decode_batch`` after
    ``snapkv-append-in-place layout=pool``, docs/serving.md): per layer one keys pool and one
    values pool ``[1, R, D]`` that every sequence shares, each (sequence, cache head) a
    segment of the pool with its own start, length and capacity.

    :meth:`add` copies a sequence's caches in, as prefill returns them (uniform ``[1, Hc, T,
    D]`` keys and values per layer, or with ``ragged`` ``budget=adaptive``'s ``(keys, values,
    offsets)`` per layer), leaving room for `spare` more rows per head; :meth:`remove` frees
    its rows for the next sequence. A sequence's segments of one layer are one block of that
    layer's pool, head after head; blocks are placed first fit, and a pool without room for a
    block is reallocated larger (one copy, at least doubling). The first rows of every pool
    are a scratch segment per head for the padding rows of a batch that is not full (each
    padding row writes its K/V there and attends to that one row; its logits are dropped)."""

    def __init__(self, layers: int, heads: int, dim: int, dtype, rows: int = 256):
        if layers < 1 or heads < 1 or dim < 1 or rows < 1:
            raise ValueError(f"a pool needs layers, heads, head dim and rows >= 1, got "
                             f"{layers}, {heads}, {dim}, {rows}")
        self.heads, self.dim, self.dtype = heads, dim, np.dtype(dtype)
        rows += heads  # the scratch segments, rows 0 .. heads - 1
        self.buffers: List[np.ndarray] = [np.zeros((1, rows, dim), self.dtype)
                                          for _ in range(2 * layers)]
        # Per layer, the free blocks (start, rows), ascending and merged.
        self._free = [[(heads, rows - heads)] for _ in range(layers)]
        # Per sequence: its blocks [P, 2] (start, rows) and segments' starts, lengths and
        # capacities [P, Hc].
        self._seqs = {}

    @property
    def layers(self) -> int:
        return len(self._free)

    def __contains__(self, key) -> bool:
        return key in self._seqs

    def _place(self, layer: int, rows: int) -> int:
        """The start of a new block of `rows` rows in `layer`'s pool (grown if need be)."""
        free = self._free[layer]
        for i, (start, size) in enumerate(free):
            if size >= rows:
                free[i:i + 1] = [(start + rows, size - rows)] if size > rows else []
                return start
        old = self.buffers[2 * layer].shape[1]
        new = max(2 * old, old + rows)
        for i in (2 * layer, 2 * layer + 1):
            grown = np.zeros((1, new, self.dim), self.dtype)
            grown[:, :old] = self.buffers[i]
            self.buffers[i] = grown
        self._release(layer, old, new - old)
        return self._place(layer, rows)

    def _release(self, layer: int, start: int, rows: int):
        free = sorted(self._free[layer] + [(start, rows)])
        merged = [free[0]]
        for s, n in free[1:]:
            last_start, last_rows = merged[-1]
            if last_start + last_rows == s:
                merged[-1] = (last_start, last_rows + n)
            else:
                merged.append((s, n))
        self._free[layer] = merged

    def add(self, key, caches: Sequence[np.ndarray], spare: int = 16, ragged: bool = False):
        """Copy sequence `key`'s caches into the pool with room for `spare` more rows per
        head (see the class)."""
        if key in self._seqs:
            raise ValueError(f"sequence {key!r} is already in the pool")
        if spare < 0:
            raise ValueError(f"spare rows must be >= 0, got {spare}")
        caches = list(caches)
        per_layer = 3 if ragged else 2
        if len(caches) != per_layer * self.layers:
            raise ValueError(f"the pool holds {self.layers} layers: expected "
                             f"{per_layer * self.layers} cache arrays, got {len(caches)}")
        heads = []  # per layer: (keys per head, values per head)
        for layer in range(self.layers):
            if ragged:
                keys, values, offsets = (np.asarray(a) for a in
                                         caches[3 * layer:3 * layer + 3])
                bounds = offsets.reshape(-1)
                split = [(keys[0, a:b], values[0, a:b]) for a, b in zip(bounds, bounds[1:])]
            else:
                keys, values = (np.asarray(a) for a in caches[2 * layer:2 * layer + 2])
                if keys.ndim != 4 or keys.shape[0] != 1 or values.shape != keys.shape:
                    raise ValueError(f"layer {layer}: caches must be [1, Hc, T, D], got "
                                     f"{keys.shape} and {values.shape}")
                split = [(keys[0, c], values[0, c]) for c in range(keys.shape[1])]
            if len(split) != self.heads or any(k.shape[-1] != self.dim for k, _ in split):
                raise ValueError(f"layer {layer}: the batched decode takes {self.heads} cache "
                                 f"heads of dim {self.dim}, the caches hold {len(split)} of "
                                 f"dim {split[0][0].shape[-1] if split else '?'} (gqa=expand "
                                 f"keeps every query head: decode one sequence at a time)")
            heads.append(split)
        state = dict(block=np.zeros((self.layers, 2), np.int64),
                     starts=np.zeros((self.layers, self.heads), np.int64),
                     lengths=np.zeros((self.layers, self.heads), np.int64),
                     caps=np.zeros((self.layers, self.heads), np.int64))
        for layer, split in enumerate(heads):
            self._store(state, layer, split, spare)
        self._seqs[key] = state

    def _store(self, state, layer: int, split, spare: int):
        """Place `split` (per head: its valid key and value rows) as a new block of `layer`."""
        counts = np.array([k.shape[0] for k, _ in split], np.int64)
        caps = counts + spare
        start = self._place(layer, int(caps.sum()))
        starts = start + np.concatenate([[0], np.cumsum(caps)[:-1]]).astype(np.int64)
        for c, (k, v) in enumerate(split):
            s, n = int(starts[c]), int(counts[c])
            self.buffers[2 * layer][0, s:s + n] = k
            self.buffers[2 * layer + 1][0, s:s + n] = v
        state["block"][layer] = (start, int(caps.sum()))
        state["starts"][layer], state["lengths"][layer] = starts, counts
        state["caps"][layer] = caps

    def _rows(self, state, layer: int, buffer: int):
        return [self.buffers[2 * layer + buffer][0, s:s + n]
                for s, n in zip(state["starts"][layer], state["lengths"][layer])]

    def remove(self, key):
        """Free sequence `key`'s rows (nothing if it is not in the pool)."""
        state = self._seqs.pop(key, None)
        if state is not None:
            for layer, (start, rows) in enumerate(state["block"]):
                self._release(layer, int(start), int(rows))

    def reserve(self, keys: Sequence, rows: int = 1):
        """Room for `rows` more rows in every head of the sequences `keys`: a layer's block
        without it is moved to a larger one (at least half its rows again per head)."""
        for key in keys:
            state = self._seqs[key]
            for layer in range(self.layers):
                lengths = state["lengths"][layer]
                if np.all(lengths + rows <= state["caps"][layer]):
                    continue
                split = list(zip([r.copy() for r in self._rows(state, layer, 0)],
                                 [r.copy() for r in self._rows(state, layer, 1)]))
                start, size = state["block"][layer]
                self._release(layer, int(start), int(size))
                self._store(state, layer, split, max(rows, int(lengths.max()) // 2, 16))

    def rows_arguments(self, keys: Sequence, batch: Optional[int] = None) -> List[np.ndarray]:
        """``@decode_batch``'s rows arguments for the sequences `keys` (batch row i is
        ``keys[i]``), padded to `batch` rows with the scratch segments: per layer ``[1, 3,
        batch, Hc]``, the segments' starts, lengths and capacities."""
        batch = len(keys) if batch is None else batch
        if len(keys) > batch:
            raise ValueError(f"{len(keys)} sequences do not fit a batch of {batch}")
        table = np.zeros((self.layers, 3, batch, self.heads), np.int64)
        table[:, 0, len(keys):] = np.arange(self.heads)  # padding: scratch, empty, room 1
        table[:, 2, len(keys):] = 1
        for row, key in enumerate(keys):
            state = self._seqs[key]
            for which, name in enumerate(("starts", "lengths", "caps")):
                table[:, which, row] = state[name]
        return [np.ascontiguousarray(table[layer:layer + 1]) for layer in range(self.layers)]

    def appended(self, keys: Sequence):
        """Record that a decode step wrote one row after every head of the sequences `keys`."""
        for key in keys:
            self._seqs[key]["lengths"] += 1

    def caches(self, key) -> List[np.ndarray]:
        """Sequence `key`'s caches ``[k0, v0, k1, v1, ...]``, each ``[1, Hc, T, D]`` (a
        copy) when its heads hold equal rows, else per head ``[T_c, D]`` lists."""
        state, out = self._seqs[key], []
        for layer in range(self.layers):
            for buffer in (0, 1):
                rows = self._rows(state, layer, buffer)
                same = len({r.shape[0] for r in rows}) == 1
                out.append(np.stack(rows)[None] if same else [r.copy() for r in rows])
        return out

    def nbytes(self, key) -> int:
        """Bytes of sequence `key`'s valid rows."""
        return int(self._seqs[key]["lengths"].sum()) * 2 * self.dim * self.dtype.itemsize

    def allocated(self, key) -> int:
        """Bytes of sequence `key`'s blocks, the room after every head included."""
        return int(self._seqs[key]["block"][:, 1].sum()) * 2 * self.dim * self.dtype.itemsize

    @property
    def pool_bytes(self) -> int:
        """Bytes of the pools."""
        return sum(b.nbytes for b in self.buffers)

    def __len__(self) -> int:
        return len(self._seqs)

    def __repr__(self):
        return (f"KVPool({self.layers} layers, {len(self)} sequences, "
                f"{self.pool_bytes / 2**20:.1f} MiB of pools)")
