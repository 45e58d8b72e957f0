"""The order of an epoch, a pure function of (seed, epoch, rank, ranks): shuffle and shard.

1. Blocks (chunk-sized row ranges) are permuted with a generator seeded by (seed, epoch).
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


def block_order(n_blocks: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """Block indices in the order of ``epoch`` (file order when not shuffling)."""
    if not shuffle:
        return list(range(n_blocks))
    rng = np.random.default_rng([seed & 0xFFFFFFFF, epoch, 0x5EED])
    return [int(i) for i in rng.permutation(n_blocks)]


def rows_per_rank(total_rows: int, ranks: int) -> int:
    return total_rows // max(1, ranks)


def rank_pieces(blocks: Sequence[Block], order: Sequence[int], rank: int,
                ranks: int) -> list[Piece]:
    """The contiguous part ``rank`` of the ordered row stream, as pieces of blocks."""
    per = rows_per_rank(sum(b.rows for b in blocks), ranks)
    lo, hi = rank * per, (rank + 1) * per
    pieces, pos = [], 0
    for i in order:
        b_rows = blocks[i].rows
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
