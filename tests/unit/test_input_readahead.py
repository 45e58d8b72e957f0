"""The read-ahead of sources of many files (payloads/runtime/pipeline/readahead.py): the same
batches as without it, open files within the LRU's bound while threads open files beside the
reader, blocks in the RAM cache not warmed again, and files read through HDF5 (filtered)
warmed too."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import h5py
import numpy as np
import pytest

from payloads.runtime.pipeline import readahead
from payloads.runtime.pipeline.cache import BlockCache
from payloads.runtime.pipeline.h5source import H5Source, OpenFiles
from payloads.runtime.pipeline.inputs import ShardedLoader


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _write(d: Path, files: int, **kw: object) -> list[str]:
    """``files`` files of 20 rows (chunks of 10): row i of file k holds 1000 k + i."""
    d.mkdir()
    paths = []
    for k in range(files):
        ids = 1000 * k + np.arange(20)
        with h5py.File(d / f"f{k:03d}.h5", "w") as f:
            f.create_dataset("x", data=np.stack([ids, ids], 1).astype(np.float32),
                             chunks=(10, 2), **kw)
            f.create_dataset("y", data=ids.astype(np.int64), chunks=(10,), **kw)
        paths.append(str(d / f"f{k:03d}.h5"))
    return paths


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return _write(tmp_path_factory.mktemp("ra") / "plain", 80)


def _epochs(src: H5Source, read_ahead: bool, cache: BlockCache | None = None,
            epochs: tuple[int, ...] = (0, 1)) -> tuple[list[np.ndarray], ShardedLoader]:
    ld = ShardedLoader(src, ["x"], "y", batch=16, seed=5, window=4, read_ahead=read_ahead,
                       cache=cache)
    out = [y.copy() for e in epochs for _x, y in ld.batches([e])]
    return out, ld


def test_read_ahead_gives_the_same_batches_within_the_bound(files: list[str]) -> None:
    assert readahead.wanted(H5Source(files, ["x", "y"], pool=OpenFiles(8)))  # >= 64 files
    pool, base = OpenFiles(8), _fds()
    src = H5Source(files, ["x", "y"], pool=pool)
    plain, _ = _epochs(src, False)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _fds() - base)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    ahead, ld = _epochs(src, True)
    stop.set()
    t.join()
    ra = ld._ra
    assert ra is not None and ra.warmed > 0 and ra.opened > 0
    ld.close()
    assert ld._ra is None and not any(t.name.startswith("gridml-readahead") and t.is_alive()
                                      for t in threading.enumerate())
    assert len(plain) == len(ahead) and all(np.array_equal(a, b) for a, b in zip(plain, ahead))
    assert sorted(np.concatenate(ahead[:len(ahead) // 2]).tolist()) == sorted(
        1000 * k + i for k in range(80) for i in range(20))
    assert pool.peak <= 8 and peak[0] <= 8  # the read-ahead opens through the same LRU
    src.close()


def test_cached_blocks_are_not_warmed_again(files: list[str]) -> None:
    src = H5Source(files, ["x", "y"], pool=OpenFiles(16))
    cache = BlockCache(1 << 30)
    _, ld = _epochs(src, True, cache, epochs=(0,))
    first = ld._ra.warmed if ld._ra else 0
    assert first > 0
    _epochs_again = [y for _x, y in ld.batches([1])]
    # epoch 1 is read from RAM only: none of its places is left to warm
    assert ld._ra is not None and all(b is None for b in ld._ra._order)
    assert cache.stats()["entries"] == len(src.blocks) and len(_epochs_again) > 0
    ld.close()
    src.close()


def test_filtered_files_and_concurrent_opens_stay_within_the_bound(tmp_path: Path) -> None:
    paths = _write(tmp_path / "lzf", 64, compression="lzf")  # a filter only HDF5 decodes
    pool = OpenFiles(4)
    src = H5Source(paths, ["x", "y"], pool=pool)
    assert not src.all_direct
    ahead, ld = _epochs(src, True, epochs=(0,))
    assert ld._ra is not None and ld._ra.warmed > 0 and ld._ra.opened > 0
    ld.close()
    plain, _ = _epochs(src, False, epochs=(0,))
    assert all(np.array_equal(a, b) for a, b in zip(plain, ahead))
    # threads opening files of one small LRU at once: never more open than its bound
    errors: list[BaseException] = []

    def reader(k: int) -> None:
        try:
            for p in paths[k::3] * 2:
                with pool.use(p, hdf5=False) as e:
                    assert len(pool) <= 4 and e.fd >= 0
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and pool.peak <= 4
    src.close()
    pool.close_all()
    assert len(pool) == 0


def test_by_default_the_read_ahead_starts_only_once_reads_wait(files: list[str]) -> None:
    src = H5Source(files, ["x", "y"], pool=OpenFiles(16))
    ld = ShardedLoader(src, ["x"], "y", batch=16, seed=5, window=4)  # read_ahead: auto
    rows = sum(len(y) for _x, y in ld.batches([0]))
    assert rows == 80 * 20 and ld.read_wait_us is not None  # the epoch's reads were timed
    if ld.read_wait_us < 1e6 * readahead.SLOW_READ_S:  # pages in memory: no read-ahead
        assert ld._ra is None
    # reads that wait (as on cold storage): the read-ahead takes over from the next place on
    pieces = ld.pieces(1)
    ld._probe = [pieces, []]
    for i in range(readahead.PROBE_READS):
        ld._probed(2 * readahead.SLOW_READ_S, i)
    assert ld._ra is not None and ld._probe is None and ld._ra._next >= readahead.PROBE_READS
    ld.close()
    # preempted reads now and then do not turn it on (the median decides)
    ld2 = ShardedLoader(src, ["x"], "y", batch=16, seed=5, window=4)
    ld2._probe = [pieces, []]
    for i in range(readahead.PROBE_READS):
        ld2._probed(1.0 if i % 4 == 0 else 10e-6, i)
    assert ld2._ra is None and ld2.read_wait_us == 10.0
    src.close()
