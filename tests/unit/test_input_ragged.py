"""Ragged features (``<name>_values`` + ``<name>_lengths``) and bucketing by length."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from payloads.runtime.pipeline.h5source import H5Source
from payloads.runtime.pipeline.ragged import RaggedLoader


def _ragged_file(path: Path, n: int, seed: int = 3, first: int = 0) -> str:
    """Event i has tracks with values i + j/1000 (j = 0..len-1), and one regular column."""
    rng = np.random.default_rng(seed)
    lengths = np.where(rng.random(n) < 0.7, rng.integers(1, 6, n), rng.integers(20, 60, n))
    ids = np.arange(first, first + n)
    values = np.concatenate([i + np.arange(k) / 1000 for i, k in zip(ids, lengths)])
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=ids.astype(np.float32)[:, None], chunks=(64, 1))
        f.create_dataset("y", data=(ids % 2).astype(np.float32), chunks=(64,))
        f.create_dataset("tracks_values", data=values.astype(np.float64), chunks=(256,),
                         compression="gzip")
        f.create_dataset("tracks_lengths", data=lengths.astype(np.int32), chunks=(64,))
    return str(path)


def _loader(paths: list[str], bucket: bool, rank: int = 0, ranks: int = 1) -> RaggedLoader:
    src = H5Source(paths, ["x", "y", "tracks_lengths"])
    return RaggedLoader(src, ["x", "tracks"], "y", ragged=["tracks"], bucket=bucket, batch=32,
                        rank=rank, ranks=ranks, seed=5, window=4, pad_value=-1.0)


@pytest.fixture
def files(tmp_path: Path) -> list[str]:
    return [_ragged_file(tmp_path / "a.h5", 700), _ragged_file(tmp_path / "b.h5", 333, 4, 700)]


@pytest.mark.parametrize("bucket", [False, True])
def test_padded_batches_hold_each_events_own_tracks(files: list[str], bucket: bool) -> None:
    seen = []
    for (x, tracks), _y in _loader(files, bucket).batches([0]):
        ids = x[:, 0].astype(int)
        seen.extend(ids.tolist())
        for i, row in zip(ids, tracks):
            real = row[row != -1.0]
            assert np.allclose(real, i + np.arange(len(real)) / 1000)
        assert (tracks[:, -1] != -1.0).any()  # padded to the batch's longest event, no further
    assert sorted(seen) == list(range(1033))


def test_bucketing_pads_much_less_with_the_same_batch_count(files: list[str]) -> None:
    plain, bucketed = _loader(files, False), _loader(files, True)
    n_plain = sum(1 for _ in plain.batches([0]))
    n_bucket = sum(1 for _ in bucketed.batches([0]))
    assert n_plain == n_bucket == plain.steps_per_epoch
    assert bucketed.padding_fraction() < 0.6 * plain.padding_fraction()
    print(f"padding: {plain.padding_fraction():.2f} plain, {bucketed.padding_fraction():.2f} "
          "bucketed")


def test_ranks_agree_on_batches_and_split_the_events(files: list[str]) -> None:
    shards = [[(x[:, 0].astype(int), y) for (x, _), y in _loader(files, True, r, 2).batches([1])]
              for r in range(2)]
    assert [len(b[1]) for b in shards[0]] == [len(b[1]) for b in shards[1]]
    ids = [set(np.concatenate([b[0] for b in s]).tolist()) for s in shards]
    assert not ids[0] & ids[1]


def test_ragged_through_tf_data(files: list[str]) -> None:
    tf = pytest.importorskip("tensorflow")
    from payloads.runtime.pipeline.inputs import tf_dataset

    loader = _loader(files, True)
    ds = tf_dataset(loader, [0], tf.data.Options())
    (x, tracks), y = next(iter(ds))
    assert x.shape == (32, 1) and tracks.shape[0] == 32 and tracks.dtype == tf.float64
