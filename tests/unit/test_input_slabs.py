"""The loader's output slabs: a window gathered slab by slab (by one or several threads) gives
exactly the batches the epoch's plan defines, whatever the slab size."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from payloads.runtime.pipeline import plan
from payloads.runtime.pipeline import inputs
from payloads.runtime.pipeline.h5source import H5Source
from payloads.runtime.pipeline.inputs import ShardedLoader, prefaulted

BATCH, WINDOW, SEED = 48, 2, 5


def _files(tmp_path: Path) -> list[str]:
    paths = []
    for i, n in enumerate([1000, 333, 517]):
        p = tmp_path / f"f{i}.h5"
        ids = np.arange(n, dtype=np.float32) + 10_000 * i
        with h5py.File(p, "w") as f:
            f.create_dataset("x", data=np.stack([ids, -ids, ids * 2], 1), chunks=(100, 3))
            f.create_dataset("y", data=ids, chunks=(100,))
        paths.append(str(p))
    return paths


def _expected(src: H5Source, epoch: int, rank: int, ranks: int) -> list[np.ndarray]:
    """The plan, applied by hand: each window's rows in its permutation's order, the windows
    one after the other, cut into batches (the last one partial)."""
    ids = np.concatenate([src.read(b)["y"] for b in src.blocks])
    starts = np.cumsum([0] + [b.rows for b in src.blocks])
    order = plan.block_order(len(src.blocks), SEED, epoch)
    pieces = plan.rank_pieces(src.blocks, order, rank, ranks)
    stream = []
    for w, group in enumerate(plan.windows(pieces, WINDOW)):
        rows = np.concatenate([ids[starts[p.block] + p.lo:starts[p.block] + p.hi] for p in group])
        stream.append(rows[plan.row_permutation(len(rows), SEED, epoch, rank, w)])
    flat = np.concatenate(stream)
    return [flat[i:i + BATCH] for i in range(0, len(flat), BATCH)]


@pytest.mark.parametrize("slab_bytes, threads", [
    (1 << 30, 1),          # one slab a window (a window is far smaller)
    (BATCH * 16 * 3, 1),   # 3 batches a slab: several slabs a window, carries between them
    (BATCH * 16 * 2, 2),   # and each slab's gather split over 2 threads
    (1, 3),                # one batch a slab, 3 threads
])
@pytest.mark.parametrize("reuse", [False, True])
def test_slabs_give_the_planned_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        slab_bytes: int, threads: int, reuse: bool) -> None:
    monkeypatch.setattr(inputs, "_SLAB_BYTES", slab_bytes)
    monkeypatch.setattr(inputs, "_SPLIT_BYTES", 64)  # split even these small gathers
    paths = _files(tmp_path)
    for rank, ranks in ((0, 1), (1, 2)):
        src = H5Source(paths, ["x", "y"], block_rows=150)
        loader = ShardedLoader(src, ["x"], "y", seed=SEED, batch=BATCH, window=WINDOW,
                               rank=rank, ranks=ranks, gather_threads=threads)
        got: dict[int, list[np.ndarray]] = {0: [], 1: []}
        epoch = 0
        for slab in loader.slabs([0, 1], reuse=reuse):
            for x, y in zip(slab["x"], slab["y"]):
                np.testing.assert_array_equal(x, np.stack([y, -y, y * 2], 1))
                got[epoch].append(y.copy())
                if sum(len(b) for b in got[epoch]) == loader.rows_per_epoch:
                    epoch += 1
        loader.close()
        for e in (0, 1):
            want = _expected(src, e, rank, ranks)
            assert [len(b) for b in got[e]] == [len(b) for b in want]
            assert all(np.array_equal(a, b) for a, b in zip(got[e], want))
        src.close()


def test_slab_rows_are_whole_batches_near_the_target_size() -> None:
    class Src:
        block_rows, total_rows = 8192, 10 * 8192
        row_shapes = {"x": (64,), "y": ()}
        dtypes = {"x": np.dtype(np.float32), "y": np.dtype(np.float32)}
        blocks: list = []

    loader = ShardedLoader(Src(), ["x"], "y", batch=256, window=8)  # type: ignore[arg-type]
    rows = loader._slab_rows()
    assert rows % 256 == 0 and rows * 260 <= inputs._SLAB_BYTES < (rows + 256) * 260
    big = ShardedLoader(Src(), ["x"], "y", batch=100_000, window=1)  # type: ignore[arg-type]
    assert big._slab_rows() == 100_000  # at least one batch, even past a window


@pytest.mark.parametrize("shape, dtype", [((3 << 20,), np.uint8), ((1000, 700), ">f4"),
                                          ((10, 3), np.int64)])
def test_prefaulted_buffers_are_ordinary_writable_arrays(shape: tuple, dtype: str) -> None:
    a = prefaulted(shape, dtype)
    assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.writeable
    a[...] = 7
    assert a.flags.c_contiguous and int(a.reshape(-1)[-1]) == 7


@pytest.mark.parametrize("reuse", [False, True])
def test_buffers_are_made_as_first_needed_and_never_more(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         reuse: bool) -> None:
    """The window and slab buffers are allocated by the stages when they first need one, and
    over many epochs never more than the set number (the recycled ones are reused, not
    re-made)."""
    monkeypatch.setattr(inputs, "_SLAB_BYTES", BATCH * 16 * 3)
    src = H5Source(_files(tmp_path), ["x", "y"], block_rows=150)
    made: list[int] = []

    class Counting(ShardedLoader):
        def _new_buffer(self, alloc=None, rows=None):  # type: ignore[no-untyped-def]
            made.append(rows or self.window * self.src.block_rows)
            return super()._new_buffer(alloc, rows)

    loader = Counting(src, ["x"], "y", seed=SEED, batch=BATCH, window=WINDOW)
    n = sum(len(s["y"]) * len(s["y"][0]) for s in loader.slabs(range(6), reuse=reuse))
    loader.close()
    src.close()
    assert n == 6 * loader.rows_per_epoch
    windows = [r for r in made if r == WINDOW * 150]
    slabs = [r for r in made if r == loader._slab_rows()]
    assert 1 <= len(windows) <= inputs._WINDOW_BUFFERS
    ring = loader._queue_depth() + inputs._HELD + 1
    assert (1 <= len(slabs) <= ring) if reuse else slabs == []
    assert len(made) == len(windows) + len(slabs)
