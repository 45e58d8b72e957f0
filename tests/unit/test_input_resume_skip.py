"""A trial resumed mid-epoch: ``slabs(epochs, skip=k)`` gives, batch for batch, what the
uninterrupted epochs give after their first k batches (same shuffle), and does not read the
windows wholly before them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from payloads.runtime.pipeline.h5source import H5Source
from payloads.runtime.pipeline.inputs import ShardedLoader

BATCH, WINDOW, SEED = 40, 2, 7


def _files(tmp_path: Path) -> list[str]:
    paths = []
    for i, n in enumerate([700, 333]):
        p = tmp_path / f"f{i}.h5"
        ids = np.arange(n, dtype=np.float32) + 10_000 * i
        with h5py.File(p, "w") as f:
            f.create_dataset("x", data=np.stack([ids, -ids], 1), chunks=(50, 2))
            f.create_dataset("y", data=ids, chunks=(50,))
        paths.append(str(p))
    return paths


def _counting(real: Any, read: list[int]) -> Any:
    """``real`` (the source's read_into), noting the rows each call reads."""
    def read_into(block: Any, lo: int, hi: int, *rest: Any) -> Any:
        read.append(hi - lo)
        return real(block, lo, hi, *rest)
    return read_into


def _batches(loader: ShardedLoader, epochs: list[int], skip: int = 0) -> list[np.ndarray]:
    out = []
    for slab in loader.slabs(epochs, skip=skip):
        out += [slab["y"][i].copy() for i in range(len(slab["y"]))]
    return out


@pytest.mark.parametrize("skip", [0, 1, 3, 7, 12])  # in the first window, across, far in
@pytest.mark.parametrize("shuffle", [True, False])
def test_skip_resumes_the_same_stream(tmp_path: Path, skip: int, shuffle: bool) -> None:
    paths = _files(tmp_path)
    for rank, ranks in ((0, 1), (1, 2)):
        def loader(rank: int = rank, ranks: int = ranks) -> ShardedLoader:
            src = H5Source(paths, ["x", "y"], block_rows=100)
            return ShardedLoader(src, ["x"], "y", batch=BATCH, rank=rank, ranks=ranks, seed=SEED,
                                 shuffle=shuffle, window=WINDOW)

        full = _batches(loader(), [2, 3])
        steps = loader().steps_per_epoch
        assert skip < steps
        got = _batches(ld := loader(), [2, 3], skip=skip)
        assert len(got) == len(full) - skip
        for a, b in zip(got, full[skip:]):
            np.testing.assert_array_equal(a, b)
        # the windows wholly skipped were not read: fewer rows than the epochs hold went in
        read: list[int] = []
        ld = loader()
        ld.src.read_into = _counting(ld.src.read_into, read)
        assert len(_batches(ld, [2], skip=skip)) == steps - skip
        unread, pieces = 0, ld.pieces(2)
        for w in range(0, len(pieces), WINDOW):  # the windows wholly before the skip point
            rows = sum(p.rows for p in pieces[w:w + WINDOW])
            if unread + rows > skip * BATCH:
                break
            unread += rows
        assert sum(read) == ld.rows_per_epoch - unread
        assert (unread > 0) == (skip * BATCH >= sum(p.rows for p in pieces[:WINDOW]))
