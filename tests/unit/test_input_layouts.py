"""Layout records (payloads/runtime/pipeline/layouts.py): 500 files put with `gridml data put`
get a record each in the catalog, stage-in writes the dataset's sidecar into the study's
``inputs/``, the planner names it in trial.json (``data.layouts``), and the payload's sources
check the files from it, opening only the first (the pool's own open counter says so) while
reading the same rows, also through the payload's own ``open_data`` from trial.json; a record gone stale (the file's size changed) is not trusted: that file
is opened and checked, and a file of another shape is still named."""

from __future__ import annotations

import gc
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from gridml.data.cli import data_app
from gridml.data.local import LocalStore
from gridml.planner import layout_sidecars
from payloads.runtime import session, trial as contract
from payloads.runtime.errors import InputDataError
from payloads.runtime.pipeline import h5source, layouts
from payloads.runtime.pipeline.h5source import H5Source, OpenFiles

N = 500


def _write(p: Path, k: int, rows: int = 20, width: int = 3) -> Path:
    ids = 1000 * k + np.arange(rows)
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=np.repeat(ids[:, None], width, 1).astype(np.float32),
                         chunks=(10, width))
        f.create_dataset("y", data=ids.astype(np.int64))  # contiguous
    return p


@pytest.fixture(autouse=True)
def _no_files_left_open() -> Iterator[None]:
    """Every HDF5 file these tests opened is closed when they end (not at some later garbage
    collection, which the descriptor counts of other tests would notice)."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def put(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """N files put with `gridml data put` into user.me:many; staged as a campaign stages them:
    (their paths, the trial.json naming the sidecar)."""
    tmp = tmp_path_factory.mktemp("layouts")
    src = tmp / "src"
    src.mkdir()
    files = [str(_write(src / f"f{k:04d}.h5", k)) for k in range(N)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRIDML_HOME", str(tmp / "home"))
        mp.delenv("GRIDML_DATA_BACKEND", raising=False)
        res = CliRunner().invoke(data_app, ["put", *files, "--dataset", "user.me:many", "--json"])
    assert res.exit_code == 0, res.output
    store = LocalStore(tmp / "home" / "store")
    study = tmp / "runs" / "s"
    staged = store.stage_in("user.me:many", study / "inputs")  # as the controller does
    paths = [str(f.path) for f in staged]
    [sidecar] = layout_sidecars(study / "trial-0000", ["user.me:many", "user.me:other"])
    doc = {"version": 2, "trial_id": 1, "model_file": "m.py", "output_dir": "out",
           "training": {}, "data": {"train": paths,  # relative: as other paths are
                                    "layouts": [f"../inputs/{Path(sidecar).name}"]}}
    (study / "trial-0000").mkdir(parents=True)
    trial = study / "trial-0000" / "trial.json"
    trial.write_text(json.dumps(doc))
    return paths, trial


def test_put_files_are_checked_from_their_records_without_opening(
        put: tuple[list[str], Path]) -> None:
    paths, trial = put
    cfg = contract.load_trial(trial)
    assert cfg.data.layouts and Path(cfg.data.layouts[0]).is_file()  # resolved from trial.json
    assert json.loads(cfg.dumps())["data"]["layouts"] == list(cfg.data.layouts)
    assert h5source.use_layouts(cfg.data.layouts) == N
    pool = OpenFiles(16)
    src = H5Source(list(cfg.data.train), ["x", "y"], pool=pool)
    # one file opened (the first: its record is compared with what HDF5 says), none else
    assert (src.check_opened, src.check_from_records, pool.opens) == (1, N - 1, 1)
    assert src.total_rows == 20 * N and len(src.blocks) == 2 * N and src.all_direct
    for b in src.blocks[::97]:  # the records' offsets read the right rows (preadv)
        got = src.read(b)
        k = int(Path(paths[b.file]).name[1:5])
        assert (got["y"] == 1000 * k + np.arange(b.start, b.stop)).all()
        assert (got["x"][:, 2] == got["y"]).all()
    src.close()
    # without the records: every file opened once, the same rows
    plain = H5Source(list(cfg.data.train), ["x", "y"], pool=OpenFiles(16), records={})
    assert plain.check_opened == N and plain.rows == src.rows
    plain.close()
    # the payload's own path (a rank's open_data, both frameworks): trial.json's data.layouts
    # read, one file opened at start, an epoch over every row
    data = session.open_data(cfg, 0, 1)
    try:
        train = data.sources[0]
        assert (train.check_opened, train.check_from_records) == (1, N - 1)
        assert sum(len(y) for _x, y in data.train.batches([0])) == 20 * N
    finally:
        for ld in data.loaders:
            ld.close()
        for s in data.sources:
            s.close()
        h5source.use_layouts([])


def test_stale_record_opens_the_file_and_a_shape_change_is_named(
        put: tuple[list[str], Path], tmp_path: Path) -> None:
    stored, trial = put
    got, problems = layouts.read_sidecars(contract.load_trial(trial).data.layouts)
    assert not problems and len(got) == N
    paths = [str(shutil.copy(p, tmp_path)) for p in stored[:20]]  # copies, with their records
    recs = {c: got[p] for c, p in zip(paths, stored)}
    # (a file rewritten to the same size keeps a record that looks valid: the store's files
    # are immutable; these changes change the size)
    _write(Path(paths[7]), 7, rows=400)  # more rows: another size, the record is stale
    pool = OpenFiles(16)
    src = H5Source(paths[:20], ["x", "y"], pool=pool, records=recs)
    assert (src.check_opened, src.rows[7], src.rows[8]) == (2, 400, 20)  # file 0 and file 7
    assert (src.read(src.blocks[7 * 2 + 3])["y"] == 7000 + np.arange(30, 40)).all()
    _write(Path(paths[9]), 9, rows=200, width=4)  # another shape (and size): opened, named
    with pytest.raises(InputDataError) as err:
        H5Source(paths[:20], ["x", "y"], pool=OpenFiles(16), records=recs)
    assert paths[9] in str(err.value) and "'x' is float32(4,)" in str(err.value)
    # a record that itself says another shape is named too, without opening the file
    bad = json.loads(json.dumps(recs))
    bad[paths[11]]["datasets"]["x"]["shape"] = [20, 5]
    with pytest.raises(InputDataError) as err:
        H5Source(paths[10:12], ["x", "y"], pool=OpenFiles(16), records=bad)
    assert paths[11] in str(err.value) and "(5,)" in str(err.value)
    # a missing dataset: the file is opened, and the message lists what it has
    with pytest.raises(InputDataError, match="has no dataset 'z'"):
        H5Source(paths[10:12], ["x", "z"], pool=OpenFiles(16), records=recs)


def test_records_and_sidecars(tmp_path: Path) -> None:
    assert layouts.make_record(tmp_path) is None
    (tmp_path / "a.txt").write_text("not hdf5")
    assert layouts.make_record(tmp_path / "a.txt") is None
    rec = layouts.make_record(_write(tmp_path / "a.h5", 0, rows=50))
    assert rec is not None and rec["datasets"]["x"]["direct"]["offsets"]["n"] == 5
    assert list(layouts.decode_offsets(layouts.encode_offsets([4, 9, 14, 20]))) == [4, 9, 14, 20]
    assert layouts.write_sidecar(tmp_path / "none", "u:d", [("p", None)]) is None
    assert not (tmp_path / "none").exists()
    got, problems = layouts.read_sidecars([tmp_path / "missing.json"])
    assert got == {} and "missing.json" in problems[0]
    # a record whose offsets disagree with file 0 is not trusted at all
    paths = [str(_write(tmp_path / f"g{k}.h5", k)) for k in range(3)]
    recs = {p: layouts.make_record(p) for p in paths}
    recs[paths[0]]["datasets"]["y"]["direct"]["offsets"] = [8]  # type: ignore[index]
    src = H5Source(paths, ["x", "y"], pool=OpenFiles(4), records=recs)  # type: ignore[arg-type]
    assert src.check_opened == 3 and src.check_from_records == 0


def test_compressed_files_are_read_from_their_records_without_hdf5(tmp_path: Path) -> None:
    """gzip + shuffle chunks (demo-data's layout): the record (version 2) holds each chunk's
    offset, stored size and the filters; the payload reads the rows with pread + zlib, opening
    only the first file in HDF5, and gets what HDF5 reads; a version-1 reader would not trust it."""
    paths = []
    for k in range(12):
        ids = 1000 * k + np.arange(30)
        with h5py.File(tmp_path / f"z{k}.h5", "w") as f:
            f.create_dataset("x", data=np.repeat(ids[:, None], 3, 1).astype(np.float32),
                             chunks=(8, 3), compression="gzip", shuffle=True)
            f.create_dataset("y", data=ids.astype(np.int64), chunks=(8,), compression="gzip")
        paths.append(str(tmp_path / f"z{k}.h5"))
    recs = {p: layouts.make_record(p) for p in paths}
    rec = recs[paths[3]]
    assert rec is not None and rec["v"] == 2 and rec["v"] not in (1,)
    direct = rec["datasets"]["x"]["direct"]
    assert direct["filters"] == ["shuffle", "deflate"] and direct["itemsize"] == 4
    assert len(layouts.decode_offsets(direct["sizes"])) == 4  # 30 rows in chunks of 8
    pool = OpenFiles(4)
    src = H5Source(paths, ["x", "y"], pool=pool, records=recs)  # type: ignore[arg-type]
    assert (src.check_opened, src.check_from_records) == (1, 11) and src.all_direct
    opens = pool.opens
    for b in src.blocks:
        got = src.read(b)
        k = int(Path(paths[b.file]).stem[1:])
        assert (got["y"] == 1000 * k + np.arange(b.start, b.stop)).all()
        assert (got["x"][:, 1] == got["y"]).all()
    assert all(e.fid is None for e in pool._d.values())  # bare descriptors: no HDF5 open
    assert pool.opens - opens <= len(paths)
    src.close()


def test_a_campaign_names_the_sidecars_in_trial_json(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's stage-in (local store, an executor that does not stage itself) writes
    the sidecars once, and each trial.json names them (absolute: Slurm copies trial.json)."""
    from gridml.controller import Campaign
    from gridml.executors.dryrun import DryRunExecutor
    from gridml.spec import load_spec
    from gridml.store import open_store
    from tests.helpers import register_tiny_datasets, write_spec

    home = tmp_path / "home"
    monkeypatch.setenv("GRIDML_HOME", str(home))
    data = LocalStore(home / "store")
    register_tiny_datasets(data, tmp_path, "user.t")
    spec = write_spec(tmp_path / "s.yaml", "lay", "user.t:train", "user.t:val")
    store = open_store(f"sqlite:///{home / 'gridml.db'}")
    try:
        Campaign(load_spec(spec, did_exists=data.exists), store, DryRunExecutor(), data,
                 home / "runs", api_url="http://127.0.0.1:9", poll_s=0).step()
    finally:
        store.close()
    inputs = home / "runs" / "lay" / "inputs"
    for trial in (home / "runs" / "lay").glob("trial-*/trial.json"):
        doc = contract.load_trial(trial)
        assert doc.data.layouts == (str(inputs / "user.t__train.layouts.json"),
                                    str(inputs / "user.t__val.layouts.json"))
        recs, problems = layouts.read_sidecars(doc.data.layouts)
        assert not problems and set(recs) == {*doc.data.train, *doc.data.validation}
