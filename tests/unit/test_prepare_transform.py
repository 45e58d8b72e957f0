"""From the user function's output to x/y arrays; padding, ragged, selection, split, shard plan."""

from __future__ import annotations

from pathlib import Path

import awkward as ak
import numpy as np
import pytest

from gridml.prepare import shards, transform
from gridml.prepare.transform import ChunkProblem

PAD = {"trk": {"length": 3, "value": -1.0}}


def _out(**kw: object) -> dict:
    base = {"x": {"pt": np.array([10.0, 20.0, 30.0]),
                  "trk": ak.Array([[1.0, 2.0, 3.0, 4.0], [5.0], []])},
            "y": np.array([1, 0, 1])}
    base.update(kw)
    return base


def test_padding_truncation_and_column_names() -> None:
    rows = transform.to_rows(_out(), 3, PAD, [])
    assert rows.columns == ["pt", "trk_0", "trk_1", "trk_2"]
    assert rows.x.dtype == np.float32 and rows.y.dtype == np.float32
    np.testing.assert_array_equal(rows.x, [[10, 1, 2, 3], [20, 5, -1, -1], [30, -1, -1, -1]])
    np.testing.assert_array_equal(rows.index, [0, 1, 2])


def test_ragged_kept_with_lengths() -> None:
    rows = transform.to_rows(_out(), 3, {}, ["trk"])
    assert rows.columns == ["pt"]
    values, lengths = rows.ragged["trk"]
    np.testing.assert_array_equal(values, [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(lengths, [4, 1, 0])


def test_selection_mask_maps_rows_to_events() -> None:
    out = {"x": np.ones((2, 2)), "y": [0, 1], "selected": np.array([False, True, False, True])}
    rows = transform.to_rows(out, 4, {}, [])
    assert rows.columns == ["x_0", "x_1"]
    np.testing.assert_array_equal(rows.index, [1, 3])


@pytest.mark.parametrize("out, pad, ragged, says", [
    (_out(), {}, [], "x.trk is variable-length; give it a fixed length under features.pad.trk"),
    ({"x": np.ones((2, 1)), "y": [0, 1]}, {}, [], "returned 2 rows for 3 events without `selected`"),
    (_out(y=np.zeros(2)), PAD, [], "has shape (3,)"),
    ([1, 2], {}, [], "must return a dict with keys x and y"),
    (_out(), {"nope": {"length": 1, "value": 0}}, [], "features ['nope'] are in the spec"),
    ({"x": {"m": ak.Array([[1.0], []])}, "y": [0, 1]}, {}, [], "x.m is variable-length"),
])
def test_bad_outputs_are_explained(out: object, pad: dict, ragged: list, says: str) -> None:
    with pytest.raises(ChunkProblem) as info:
        transform.to_rows(out, 3, pad, ragged)
    assert says in str(info.value)


def test_missing_values_from_option_types() -> None:
    out = {"x": {"m": ak.max(ak.Array([[1.0], []]), axis=1)}, "y": [0, 1]}
    with pytest.raises(ChunkProblem, match="x.m is missing \\(None\\) in 1 events"):
        transform.to_rows(out, 2, {}, [])
    out = {"x": {"m": ak.max(ak.Array([[1.0], [2.0, 3.0]]), axis=1)}, "y": [0, 1]}
    np.testing.assert_array_equal(transform.to_rows(out, 2, {}, []).x[:, 0], [1, 3])


def test_user_exception_names_the_line(tmp_path: Path) -> None:
    mod = tmp_path / "bad.py"
    mod.write_text("def process(events, params):\n    return events['nope']\n")
    fn = transform.load_function(str(mod), "process")
    with pytest.raises(ChunkProblem) as info:
        transform.call_user(fn, {}, {}, str(mod))
    assert str(info.value) == "the preprocessing function raised bad.py:2 in process: KeyError: 'nope'"


def test_split_is_deterministic_and_proportional() -> None:
    run, event = np.full(100_000, 7), np.arange(100_000)
    h = transform.event_hash(100_000, 0, "ab" * 32, 0, [run, event])
    which = transform.assign(h, [0.8, 0.1, 0.1])
    frac = np.bincount(which, minlength=3) / len(which)
    np.testing.assert_allclose(frac, [0.8, 0.1, 0.1], atol=0.01)
    # the same event gives the same hash whatever chunk it is read in
    part = transform.event_hash(10, 500, "cd" * 32, 0, [run[500:510], event[500:510]])
    np.testing.assert_array_equal(part, h[500:510])
    # a different seed moves events; the default key uses file content and entry number
    assert (transform.event_hash(100, 0, "ab" * 32, 1, [run[:100], event[:100]]) != h[:100]).all()
    a = transform.event_hash(10, 5, "ab" * 32, 0, [])
    np.testing.assert_array_equal(a[3:], transform.event_hash(7, 8, "ab" * 32, 0, []))
    assert (a != transform.event_hash(10, 5, "ef" * 32, 0, [])).all()


def _summary(key: str, rows: int, width: int = 2) -> dict:
    stats = {"count": rows, "sum": [float(rows)] * width, "sumsq": [2.0 * rows] * width}
    return {"key": key, "columns": ["a"] * width, "weights": False, "ragged_values": {},
            "splits": {"train": {"rows": rows, "stats": stats}, "val": {"rows": 0, "stats": {
                "count": 0, "sum": [0.0] * width, "sumsq": [0.0] * width}}}}


def test_shard_plan_cuts_by_size_within_each_file() -> None:
    files = [[_summary("k1", 5), _summary("k2", 7)], [_summary("k3", 3)]]
    plans = shards.plan(files, ["/d/a.root", "user.x:b.root"], ["train", "val"], 6 * 12)
    assert [p.name for p in plans] == ["train-a-000.h5", "train-a-001.h5", "train-b-000.h5"]
    assert plans[0].members == [("k1", 0, 5), ("k2", 0, 1)]
    assert plans[1].members == [("k2", 1, 7)] and plans[1].rows == 6
    assert plans[2].members == [("k3", 0, 3)]
    norm = shards.norm_constants([s for f in files for s in f], "train", 2)
    assert norm["count"] == 15 and norm["mean"] == [1.0, 1.0] and norm["std"] == [1.0, 1.0]


def test_shard_names_stay_unique() -> None:
    files = [[_summary("k1", 1)], [_summary("k2", 1)]]
    plans = shards.plan(files, ["/x/a.root", "/y/a.root"], ["train"], 1 << 20)
    assert [p.name for p in plans] == ["train-a.0000-000.h5", "train-a.0001-000.h5"]
