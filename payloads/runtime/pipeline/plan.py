"""The order of an epoch, a pure function of (seed, epoch, rank, ranks): shuffle and shard.

1. Blocks (chunk-sized row ranges) are permuted with a generator seeded by (seed, epoch); when
   the files outnumber what the payload holds open, the order reads from a sliding window of
   files at a time instead (:func:`interleaved_order`).
2. The permuted row stream is cut into ``ranks`` contiguous, equal parts (``total // ranks`` rows
   each; the ``total % ranks`` rows at the end are left out this epoch, different ones every
   epoch): rank r reads part r. Parts are disjoint, and every rank has the same row count, so
   every rank runs the same number of batches, the last one equally partial everywhere.
3. Rows are shuffled within windows of ``window`` blocks, seeded by (seed, epoch, rank, window).
Everything is reproducible, so a resumed trial replays an epoch exactly, and a reader can fetch
the blocks of an epoch ahead of time in exactly this order (clairvoyant prefetch).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

from payloads.runtime.pipeline.h5source import Block


@dataclass(frozen=True)
class Piece:
    """Rows [lo, hi) *within* block ``block`` (index into the source's block list)."""

    block: int
    lo: int
    hi: int

    @property
    def rows(self) -> int:
        return self.hi - self.lo


def block_order(n_blocks: int, seed: int, epoch: int, shuffle: bool = True,
                files: Sequence[int] | None = None, cycle: int = 0) -> list[int]:
    """Block indices in the order of ``epoch`` (file order when not shuffling). With ``files``
    (each block's file) and ``cycle`` > 0 fewer than the files, the order draws from at most
    ``cycle`` files at a time (:func:`interleaved_order`)."""
    if not shuffle:
        return list(range(n_blocks))
    if files is not None and 0 < cycle < len(set(files)):
        return interleaved_order(files, seed, epoch, cycle)
    rng = np.random.default_rng([seed & 0xFFFFFFFF, epoch, 0x5EED])
    return [int(i) for i in rng.permutation(n_blocks)]


def interleaved_order(files: Sequence[int], seed: int, epoch: int, cycle: int) -> list[int]:
    """A shuffled block order that reads from at most ``cycle`` files at a time (as tf.data's
    ``interleave`` with ``cycle_length``, drawing at random): files enter in a random order,
    each next block comes from one of the ``cycle`` active files chosen uniformly, in a random
    order within the file; an exhausted file makes room for the next one. Every block once;
    a file's blocks are spread over the stretch of the epoch the file is active in, not over the
    whole epoch (docs/data.md, "Many files": how it compares with the full permutation)."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, epoch, 0x5EED, 0xF11E])
    f = np.asarray(files, np.int64).tolist()  # Python ints: the loops below are 5x faster
    by_file: dict[int, list[int]] = {}
    for b in rng.permutation(len(f)).tolist():  # blocks in a random order, grouped by file
        by_file.setdefault(f[b], []).append(b)
    queue = [by_file[k] for k in rng.permutation(sorted(by_file)).tolist()]
    active, nxt = queue[:cycle], min(cycle, len(queue))
    draws = rng.random(len(f)).tolist()
    out: list[int] = []
    for u in draws:
        j = int(u * len(active))
        blocks = active[j]
        out.append(blocks.pop())
        if not blocks:
            if nxt < len(queue):
                active[j] = queue[nxt]
                nxt += 1
            else:
                active[j] = active[-1]
                active.pop()
    return out


def rows_per_rank(total_rows: int, ranks: int) -> int:
    return total_rows // max(1, ranks)


def rank_pieces(blocks: Sequence[Block], order: Sequence[int], rank: int,
                ranks: int) -> list[Piece]:
    """The contiguous part ``rank`` of the ordered row stream, as pieces of blocks."""
    sizes = [b.stop - b.start for b in blocks]
    per = rows_per_rank(sum(sizes), ranks)
    lo, hi = rank * per, (rank + 1) * per
    pieces, pos = [], 0
    for i in order:
        b_rows = sizes[i]
        a, z = max(lo, pos), min(hi, pos + b_rows)
        if a < z:
            pieces.append(Piece(i, a - pos, z - pos))
        pos += b_rows
        if pos >= hi:
            break
    return pieces


def windows(pieces: Sequence[Piece], window: int) -> list[list[Piece]]:
    """Consecutive groups of ``window`` pieces, shuffled together."""
    w = max(1, int(window))
    return [list(pieces[i:i + w]) for i in range(0, len(pieces), w)]


def row_permutation(n: int, seed: int, epoch: int, rank: int, window: int) -> np.ndarray:
    rng = np.random.default_rng([seed & 0xFFFFFFFF, epoch, rank, window, 0x80A5])
    return rng.permutation(n)


def steps(rows: int, batch: int) -> int:
    """Batches in ``rows`` rows, the last one possibly partial."""
    return -(-rows // max(1, batch))
