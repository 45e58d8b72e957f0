"""Variable-length features (tracks, hits, constituents) and bucketing by length.

A ragged feature ``name`` is stored as ``gridml prepare`` writes it: ``<name>_values`` (M, ...)
holding every event's items one after the other, and ``<name>_lengths`` (N,) int. Batches carry
it padded with ``pad_value`` to the longest event *of the batch* (B, L, ...).

With ``bucket=True`` the rows of each shuffle window are sorted by length before they are cut
into batches, and the order of those batches is then shuffled (as Ariadne's batch bucketing):
each batch holds events of similar length, so it pads little, while the batch count stays
exactly that of the unbucketed loader, so every Horovod rank still runs the same steps.
"""

from __future__ import annotations

import queue
from typing import Any

import numpy as np

from payloads.runtime.pipeline import plan
from payloads.runtime.pipeline.inputs import Arrays, ShardedLoader, _Failed, _END


class RaggedLoader(ShardedLoader):
    """:class:`ShardedLoader` plus ragged features; ``features`` may name ragged ones."""

    def __init__(self, source: Any, features: list[str], labels: str, *, ragged: list[str],
                 bucket: bool = False, pad_value: float = 0.0, masks: tuple[str, ...] = (),
                 **kw: Any) -> None:
        self.ragged, self.bucket, self.pad_value = list(ragged), bucket, pad_value
        # ragged collections whose mask ``<name>_mask`` (B, L) uint8 goes with each batch
        self.masks = {f"{r}_mask": r for r in masks}
        self.padded_items = self.real_items = 0
        super().__init__(source, features, labels, **kw)
        self.names = [n for n in self.features if n not in self.ragged and n not in self.masks
                      and n not in self.views] + [labels] + (
            [self.weights] if self.weights else []) + [f"{r}_lengths" for r in self.ragged]
        self.values = [{r: f[f"{r}_values"] for r in self.ragged} for f in source.files]
        self.offsets = [{r: np.concatenate([[0], np.cumsum(f[f"{r}_lengths"][:], dtype=np.int64)])
                         for r in self.ragged} for f in source.files]

    def row_shape(self, name: str) -> tuple[Any, ...]:
        if name in self.ragged:
            return (None, *self.values[0][name].shape[1:])
        if name in self.masks:
            return (None,)
        return super().row_shape(name)

    def dtype(self, name: str) -> Any:
        if name in self.ragged:
            return self.values[0][name].dtype
        if name in self.masks:
            return np.dtype(np.uint8)
        return super().dtype(name)

    # --- stage 1: regular columns into the buffer, ragged values read contiguously ------------
    def _read_values(self, group: list[plan.Piece]) -> dict[str, np.ndarray]:
        out = {}
        for r in self.ragged:
            parts = []
            for p in group:
                b = self.src.blocks[p.block]
                off = self.offsets[b.file][r]
                try:
                    parts.append(self.values[b.file][r][off[b.start + p.lo]:off[b.start + p.hi]])
                except Exception as e:
                    raise self.src._damaged(b.file, b.start + p.lo, b.start + p.hi, e) from None
            out[r] = np.concatenate(parts) if parts else self.values[0][r][:0]
        return out

    def _read_stage(self, epochs: list[int], free: queue.Queue, out: queue.Queue) -> None:
        for epoch in epochs:
            first = 0
            for w, group in enumerate(plan.windows(self.pieces(epoch), self.window)):
                buf = self._window_buffer(free)
                if buf is None:
                    return
                n = self._fill(group, buf, epoch, first)
                first += len(group)
                rows = {k: a[:n].copy() for k, a in buf.items()}
                free.put(buf)
                if not self._put(out, (epoch, w, rows, self._read_values(group))):
                    return

    # --- stage 2: order (shuffle, bucket), cut, pad ---------------------------------------------
    def _shuffle_stage(self, windows: queue.Queue, free: queue.Queue, out: queue.Queue) -> None:
        carry: _Window | None = None
        epoch_now = None
        while (item := self._get(windows)) is not None and item is not _END:
            if isinstance(item, _Failed):
                self._put(out, item)
                return
            epoch, w, rows, values = item
            if epoch != epoch_now and carry is not None and carry.n:
                if not self._put(out, self._pad(carry, np.arange(carry.n))):
                    return
                carry = None
            epoch_now = epoch
            win = _Window(rows, values, self.ragged).take(self._order(rows, epoch, w))
            win = carry.concat(win) if carry is not None else win
            full = win.n // self.batch * self.batch
            idx = np.arange(full).reshape(-1, self.batch)
            if self.bucket and self.shuffle:
                salt = 1_000_000 + w  # the batch order: another stream than the rows'
                idx = idx[plan.row_permutation(len(idx), self.seed, epoch, self.rank, salt)]
            for batch_rows in idx:
                if not self._put(out, self._pad(win, batch_rows)):
                    return
            carry = win.take(np.arange(full, win.n))
        if carry is not None and carry.n:
            self._put(out, self._pad(carry, np.arange(carry.n)))

    def _order(self, rows: Arrays, epoch: int, w: int) -> np.ndarray:
        n = len(rows[self.labels])
        perm = (plan.row_permutation(n, self.seed, epoch, self.rank, w) if self.shuffle
                else np.arange(n))
        if not self.bucket:
            return perm
        longest = np.max([rows[f"{r}_lengths"] for r in self.ragged], axis=0)
        return perm[np.argsort(longest[perm], kind="stable")]

    def _pad(self, win: _Window, rows: np.ndarray) -> Arrays:
        """One batch as a slab of k=1, ragged features padded to the batch's longest event."""
        b = {k: a[rows] for k, a in win.rows.items()}
        for r in self.ragged:
            lengths = b[f"{r}_lengths"].astype(np.int64)
            starts = win.starts[r][rows]
            width = int(lengths.max(initial=0))
            vals = win.values[r]
            padded = np.full((len(rows), width, *vals.shape[1:]), self.pad_value, vals.dtype)
            mask = np.arange(width)[None, :] < lengths[:, None]
            padded[mask] = vals[(starts[:, None] + np.arange(width)[None, :])[mask]]
            b[r] = padded
            if f"{r}_mask" in self.masks:
                b[f"{r}_mask"] = mask.astype(np.uint8)
            self.padded_items += padded.shape[0] * width
            self.real_items += int(lengths.sum())
        return {k: a[None] for k, a in b.items()}

    def padding_fraction(self) -> float:
        """Share of padded slots that hold padding, over all batches so far."""
        return 1.0 - self.real_items / self.padded_items if self.padded_items else 0.0


class _Window:
    """Rows of one window: regular arrays, plus each ragged feature's values and row starts."""

    def __init__(self, rows: Arrays, values: dict[str, np.ndarray], ragged: list[str],
                 starts: dict[str, np.ndarray] | None = None) -> None:
        self.rows, self.values, self.ragged = rows, values, ragged
        self.starts = starts if starts is not None else {
            r: np.concatenate([[0], np.cumsum(rows[f"{r}_lengths"], dtype=np.int64)[:-1]])
            for r in ragged}

    @property
    def n(self) -> int:
        return len(next(iter(self.rows.values())))

    def take(self, idx: np.ndarray) -> _Window:
        return _Window({k: a[idx] for k, a in self.rows.items()}, self.values, self.ragged,
                       {r: s[idx] for r, s in self.starts.items()})

    def concat(self, other: _Window) -> _Window:
        rows = {k: np.concatenate([a, other.rows[k]]) for k, a in self.rows.items()}
        values = {r: np.concatenate([self.values[r], other.values[r]]) for r in self.ragged}
        starts = {r: np.concatenate([self.starts[r], other.starts[r] + len(self.values[r])])
                  for r in self.ragged}
        return _Window(rows, values, self.ragged, starts)
