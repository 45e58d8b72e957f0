"""The epoch plan: disjoint equal shards, reproducible shuffles, consistent last batch."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from payloads.runtime.pipeline import plan
from payloads.runtime.pipeline.cache import BlockCache
from payloads.runtime.errors import InputDataError
from payloads.runtime.pipeline.h5source import Block, H5Source
from payloads.runtime.pipeline.inputs import ShardedLoader


def _files(tmp_path: Path, sizes: list[int], chunk: int = 100) -> list[str]:
    paths, start = [], 0
    for i, n in enumerate(sizes):
        p = tmp_path / f"f{i}.h5"
        with h5py.File(p, "w") as f:
            ids = np.arange(start, start + n, dtype=np.float32)
            f.create_dataset("x", data=np.stack([ids, -ids], 1), chunks=(min(chunk, n), 2),
                             compression="gzip")
            f.create_dataset("y", data=ids, chunks=(min(chunk, n),))
        paths.append(str(p))
        start += n
    return paths


def _loader(paths: list[str], rank: int, ranks: int, **kw) -> ShardedLoader:
    src = H5Source(paths, ["x", "y"])
    return ShardedLoader(src, ["x"], "y", rank=rank, ranks=ranks, seed=kw.pop("seed", 7), **kw)


def _ids(loader: ShardedLoader, epoch: int) -> list[np.ndarray]:
    return [b["y"].astype(int) for b in loader.epoch_batches(epoch)]


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_rank_shards_are_disjoint_equal_and_cover_the_data(tmp_path: Path, ranks: int) -> None:
    paths = _files(tmp_path, [1000, 357, 250])
    total = 1607
    shards = [np.concatenate(_ids(_loader(paths, r, ranks, batch=64), 0)) for r in range(ranks)]
    seen = np.concatenate(shards)
    assert len(set(seen.tolist())) == len(seen)  # disjoint (and no row twice)
    assert {len(s) for s in shards} == {total // ranks}
    assert len(seen) >= total - ranks + 1


def test_every_rank_runs_the_same_batches_with_the_same_last_partial(tmp_path: Path) -> None:
    paths = _files(tmp_path, [1000, 357])
    shapes = [[len(b) for b in _ids(_loader(paths, r, 2, batch=64), 3)] for r in range(2)]
    assert shapes[0] == shapes[1]
    assert len(shapes[0]) == _loader(paths, 0, 2, batch=64).steps_per_epoch
    assert shapes[0][-1] == (1357 // 2) % 64


def test_epoch_order_is_reproducible_and_differs_between_epochs(tmp_path: Path) -> None:
    paths = _files(tmp_path, [800, 400])
    a = np.concatenate(_ids(_loader(paths, 0, 2, batch=50), 1))
    b = np.concatenate(_ids(_loader(paths, 0, 2, batch=50), 1))
    c = np.concatenate(_ids(_loader(paths, 0, 2, batch=50), 2))
    other_seed = np.concatenate(_ids(_loader(paths, 0, 2, batch=50, seed=8), 1))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, other_seed)
    assert not np.array_equal(a, np.sort(a))  # shuffled within windows


def test_features_stay_aligned_with_labels_through_cache_and_threads(tmp_path: Path) -> None:
    paths = _files(tmp_path, [500, 300])
    loader = _loader(paths, 1, 2, batch=32, cache=BlockCache(10 * 2**20), prefetch=2)
    for epoch in range(2):
        for x, y in loader.batches([epoch]):
            assert np.array_equal(x[:, 0], y) and np.array_equal(x[:, 1], -y)
    assert loader.cache.stats()["hit_rate"] > 0


def test_blocks_follow_chunks_and_pieces_cut_at_rank_borders() -> None:
    blocks = [Block(0, 0, 100), Block(0, 100, 150), Block(1, 0, 100)]
    p0 = plan.rank_pieces(blocks, [2, 0, 1], 0, 2)
    p1 = plan.rank_pieces(blocks, [2, 0, 1], 1, 2)
    assert sum(p.rows for p in p0) == sum(p.rows for p in p1) == 125
    assert p0[-1] == plan.Piece(0, 0, 25) and p1[0] == plan.Piece(0, 25, 100)


def test_missing_dataset_and_corrupt_file_name_the_file(tmp_path: Path) -> None:
    paths = _files(tmp_path, [100])
    with pytest.raises(InputDataError, match="f0.h5.*no dataset 'z'"):
        H5Source(paths, ["x", "z"])
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"this is not hdf5" * 100)
    with pytest.raises(InputDataError, match="bad.h5.*not a readable HDF5"):
        H5Source([str(bad)], ["x"])


def test_a_resumed_run_replays_the_same_epochs(tmp_path: Path) -> None:
    """Epochs 2 and 3 read after a restart equal those of an uninterrupted run."""
    paths = _files(tmp_path, [700, 300])
    whole = [b[1] for b in _loader(paths, 1, 2, batch=40).batches([0, 1, 2, 3])]
    resumed = [b[1] for b in _loader(paths, 1, 2, batch=40).batches([2, 3])]
    per_epoch = _loader(paths, 1, 2, batch=40).steps_per_epoch
    assert len(whole) == 4 * per_epoch
    assert all(np.array_equal(a, b) for a, b in zip(whole[2 * per_epoch:], resumed, strict=True))


def test_damaged_chunk_names_the_file(tmp_path: Path) -> None:
    paths = _files(tmp_path, [1000], chunk=100)
    with h5py.File(paths[0]) as f:
        offset = f["x"].id.get_chunk_info_by_coord((500, 0)).byte_offset
    with open(paths[0], "r+b") as fh:  # overwrite one compressed chunk with garbage
        fh.seek(offset)
        fh.write(b"\x00garbage" * 20)
    loader = _loader(paths, 0, 1, batch=64)
    with pytest.raises(InputDataError, match="f0.h5.*rows 500-600.*corrupt or truncated"):
        list(loader.batches([0]))


def test_clairvoyant_cache_keeps_the_blocks_needed_soonest() -> None:
    block = {"x": np.zeros(100, np.float32)}  # 400 bytes
    cache = BlockCache(800)
    assert cache.put("a", block, next_use=5) and cache.put("b", block, next_use=10)
    assert cache.wants(7, 400) and not cache.wants(20, 400)
    assert cache.put("c", block, next_use=7)  # evicts b, needed last
    assert cache.get("b") is None and cache.get("a", next_use=30) is not None
    assert cache.put("d", block, next_use=12)  # a is now needed last (30): evicted
    assert cache.get("a") is None and cache.stats()["evictions"] == 2
    static = BlockCache(800, policy="static")
    static.put("a", block, 5)
    static.put("b", block, 10)
    assert not static.wants(1, 400) and not static.put("c", block, next_use=1)


def test_clairvoyance_doubles_the_hit_rate_of_a_small_cache_with_two_ranks(
        tmp_path: Path) -> None:
    """Each epoch deals each rank a new random half of the blocks: keeping the ones this rank
    gets again next epoch beats keeping whatever came first (NoPFS's point)."""
    paths = _files(tmp_path, [4000], chunk=100)  # 40 blocks of 1200 bytes (x: 2 floats, y)
    rates = {}
    for policy in ("static", "clairvoyant"):
        cache = BlockCache(8 * 1200, policy=policy)  # a fifth of the data
        loader = _loader(paths, 0, 2, batch=50, cache=cache)
        for _ in loader.batches(range(6)):
            pass
        rates[policy] = cache.stats()["hit_rate"]
    assert rates["clairvoyant"] > 1.4 * rates["static"], rates


def test_reader_processes_give_the_same_batches_as_the_thread(tmp_path: Path) -> None:
    paths = _files(tmp_path, [900, 450], chunk=100)
    want = [b[1] for b in _loader(paths, 1, 2, batch=40).batches([0, 1, 2])]
    loader = _loader(paths, 1, 2, batch=40, processes=2, cache=BlockCache(3 * 1200))
    try:
        got = [b[1] for b in loader.batches([0, 1, 2])]
        again = [b[1] for b in loader.batches([1])]  # a second call reuses the processes
        assert loader._reader is not None and len(loader._reader.procs) == 2
    finally:
        loader.close()
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
    per_epoch = loader.steps_per_epoch
    assert all(np.array_equal(a, b) for a, b in zip(again, want[per_epoch:2 * per_epoch]))


def test_reader_process_names_a_damaged_file(tmp_path: Path) -> None:
    paths = _files(tmp_path, [1000], chunk=100)
    with h5py.File(paths[0]) as f:
        offset = f["x"].id.get_chunk_info_by_coord((300, 0)).byte_offset
    with open(paths[0], "r+b") as fh:
        fh.seek(offset)
        fh.write(b"\x00garbage" * 20)
    loader = _loader(paths, 0, 1, batch=64, processes=1)
    try:
        with pytest.raises(InputDataError, match="f0.h5.*rows 300-400"):
            list(loader.batches([0]))
    finally:
        loader.close()
