"""The DataManager contract: one suite, every backend (local store; Rucio against a real server).

Each test uses fresh DID names (``uid``) so the suite can run against one long-lived Rucio server,
where DIDs are immutable and never go away.
"""

from __future__ import annotations

import os
import uuid
import zlib
from pathlib import Path

import pytest

from gridml.data.base import DataManager, parse_did
from gridml.errors import DataError, GridmlError, NotFoundError

BACKENDS = ["local", pytest.param("rucio", marks=[pytest.mark.service, pytest.mark.slow])]


@pytest.fixture(params=BACKENDS)
def dm(request: pytest.FixtureRequest, tmp_path: Path) -> DataManager:
    """A backend under test, with a scope its account may write to in ``dm.test_scope``."""
    if request.param == "local":
        from gridml.data.local import LocalStore

        store = LocalStore(tmp_path / "store")
        store.test_scope = "user.test"  # type: ignore[attr-defined]
        return store
    return request.getfixturevalue("rucio_store")


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:10]


def _adler(data: bytes) -> str:
    return f"{zlib.adler32(data) & 0xFFFFFFFF:08x}"


def _write(tmp_path: Path, name: str, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / "src" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path, data


def _ds(dm: DataManager, name: str) -> str:
    return f"{dm.test_scope}:{name}"  # type: ignore[attr-defined]


def test_put_then_list_gives_sizes_and_adler32(dm: DataManager, tmp_path: Path, uid: str) -> None:
    files = [_write(tmp_path, f"{uid}.f{i}.h5", 1000 + 17 * i) for i in range(3)]
    infos = dm.upload([p for p, _ in files], _ds(dm, f"{uid}.ds"))
    listed = {str(f.did): f for f in dm.list_files(_ds(dm, f"{uid}.ds"))}
    assert sorted(listed) == sorted(_ds(dm, p.name) for p, _ in files) == sorted(
        str(i.did) for i in infos)
    for path, data in files:
        f = listed[_ds(dm, path.name)]
        assert (f.bytes, f.adler32) == (len(data), _adler(data))
        assert f.replicas, "every file has at least one replica"
    assert dm.did_type(_ds(dm, f"{uid}.ds")) == "dataset"
    assert dm.did_type(_ds(dm, f"{uid}.f0.h5")) == "file"


def test_resolve_file_dataset_and_container(dm: DataManager, tmp_path: Path, uid: str) -> None:
    (a, _), (b, _) = _write(tmp_path, f"{uid}.a", 10), _write(tmp_path, f"{uid}.b", 20)
    dm.upload([a], _ds(dm, f"{uid}.one"))
    dm.upload([b], _ds(dm, f"{uid}.two"))
    dm.add_container(_ds(dm, f"{uid}.cont"), [_ds(dm, f"{uid}.one"), _ds(dm, f"{uid}.two")])
    assert [str(f.did) for f in dm.resolve(_ds(dm, a.name))] == [_ds(dm, a.name)]
    assert {f.bytes for f in dm.resolve(_ds(dm, f"{uid}.one"))} == {10}
    got = dm.resolve(_ds(dm, f"{uid}.cont"))
    assert sorted(str(f.did) for f in got) == sorted([_ds(dm, a.name), _ds(dm, b.name)])
    assert dm.did_type(_ds(dm, f"{uid}.cont")) == "container"


def test_download_verifies_and_reuses(dm: DataManager, tmp_path: Path, uid: str) -> None:
    (a, da), (b, db) = _write(tmp_path, f"{uid}.a", 4096), _write(tmp_path, f"{uid}.b", 5000)
    dm.upload([a, b], _ds(dm, f"{uid}.ds"))
    out = tmp_path / "out"
    paths = dm.download(_ds(dm, f"{uid}.ds"), out)
    assert {p.name: p.read_bytes() for p in paths} == {a.name: da, b.name: db}
    (out / a.name).write_bytes(b"corrupted")  # a wrong local copy is replaced, a right one kept
    mtime_b = (out / b.name).stat().st_mtime_ns
    dm.download(_ds(dm, f"{uid}.ds"), out)
    assert (out / a.name).read_bytes() == da
    assert (out / b.name).stat().st_mtime_ns == mtime_b


def test_stage_in_gives_readable_verified_paths(dm: DataManager, tmp_path: Path, uid: str) -> None:
    (a, data) = _write(tmp_path, f"{uid}.train.h5", 3000)
    dm.upload([a], _ds(dm, f"{uid}.train"))
    staged = dm.stage_in(_ds(dm, f"{uid}.train"), tmp_path / "stage")
    assert len(staged) == 1 and staged[0].path is not None
    assert staged[0].path.read_bytes() == data
    assert staged[0].adler32 == _adler(data)


def test_metadata_on_upload_and_set(dm: DataManager, tmp_path: Path, uid: str) -> None:
    (a, _) = _write(tmp_path, f"{uid}.model.keras", 100)
    meta = {"study": "s1", "trial": 3, "objective": 0.25, "hparams": {"lr": 0.01, "act": "relu"}}
    dm.upload([a], _ds(dm, f"{uid}.out"), metadata=meta)
    got = dm.get_metadata(_ds(dm, a.name))
    assert {k: got[k] for k in meta} == meta
    dm.set_metadata(_ds(dm, a.name), {"objective": 0.2, "best": True})
    got = dm.get_metadata(_ds(dm, a.name))
    assert (got["objective"], got["best"], got["trial"]) == (0.2, True, 3)
    dm.set_metadata(_ds(dm, f"{uid}.out"), {"study": "s1"})
    assert dm.get_metadata(_ds(dm, f"{uid}.out"))["study"] == "s1"
    dm.upload([a], _ds(dm, f"{uid}.out"), metadata={"objective": 0.1})  # no-op upload: meta merged
    got = dm.get_metadata(_ds(dm, a.name))
    assert (got["objective"], got["trial"], got["best"]) == (0.1, 3, True)


def test_unknown_did_names_it_and_the_fix(dm: DataManager, uid: str) -> None:
    did = _ds(dm, f"{uid}.missing")
    assert not dm.exists(did)
    for call in (dm.resolve, dm.list_files, dm.get_metadata):
        with pytest.raises(NotFoundError) as err:
            call(did)
        assert did in str(err.value) and "gridml data put" in str(err.value)


def test_empty_dataset_is_refused_by_resolve(dm: DataManager, uid: str) -> None:
    did = _ds(dm, f"{uid}.empty")
    dm.add_dataset(did)
    assert dm.list_files(did) == []
    with pytest.raises(DataError, match="empty"):
        dm.resolve(did)


@pytest.mark.parametrize("bad", ["noscope", "a:../b", "../a:b", "a:b/c", "a:", ":b", "a:.hidden",
                                 "a:b/../../etc", "a b:c", "a:b\x00", "a:b\n"])
def test_malformed_dids_and_traversal_refused(dm: DataManager, tmp_path: Path, bad: str) -> None:
    (a, _) = _write(tmp_path, "x.bin", 10)
    for call in (lambda: dm.resolve(bad), lambda: dm.upload([a], bad), lambda: dm.exists(bad)):
        with pytest.raises(DataError, match="malformed DID"):
            call()


def test_traversal_in_file_names_refused(dm: DataManager, tmp_path: Path, uid: str) -> None:
    (a, _) = _write(tmp_path, "x.bin", 10)
    for name in ("../evil", "a/b", ".."):
        with pytest.raises(DataError, match="malformed DID"):
            dm.upload([a], _ds(dm, f"{uid}.ds"), names=[name])
    assert not dm.exists(_ds(dm, f"{uid}.ds")) or dm.list_files(_ds(dm, f"{uid}.ds")) == []


def test_same_name_same_bytes_is_a_noop_other_bytes_refused(dm: DataManager, tmp_path: Path,
                                                            uid: str) -> None:
    (a, data) = _write(tmp_path, f"{uid}.w", 500)
    first = dm.upload([a], _ds(dm, f"{uid}.ds"))
    again = dm.upload([a], _ds(dm, f"{uid}.ds"))
    assert [(f.did, f.adler32) for f in again] == [(f.did, f.adler32) for f in first]
    a.write_bytes(os.urandom(500))
    with pytest.raises(DataError, match="immutable"):
        dm.upload([a], _ds(dm, f"{uid}.ds"))
    out = dm.download(_ds(dm, f"{uid}.ds"), tmp_path / "out")
    assert out[0].read_bytes() == data


def test_failed_upload_registers_nothing(dm: DataManager, tmp_path: Path, uid: str) -> None:
    (a, _) = _write(tmp_path, f"{uid}.good", 100)
    with pytest.raises(DataError):
        dm.upload([a, tmp_path / "does-not-exist"], _ds(dm, f"{uid}.ds"))
    assert not dm.exists(_ds(dm, a.name))
    (old, _) = _write(tmp_path, f"{uid}.old", 100)
    dm.upload([old], _ds(dm, f"{uid}.ds2"))
    old.write_bytes(b"different bytes")
    (new, _) = _write(tmp_path, f"{uid}.new", 100)
    with pytest.raises(DataError, match="immutable"):
        dm.upload([new, old], _ds(dm, f"{uid}.ds2"))
    assert not dm.exists(_ds(dm, new.name))


def test_list_dids_by_pattern(dm: DataManager, tmp_path: Path, uid: str) -> None:
    (a, _) = _write(tmp_path, f"{uid}.pat.a", 10)
    dm.upload([a], _ds(dm, f"{uid}.pat.ds"))
    found = dict((str(d), t) for d, t in dm.list_dids(dm.test_scope, f"{uid}.pat.*"))  # type: ignore[attr-defined]
    assert found == {_ds(dm, f"{uid}.pat.a"): "file", _ds(dm, f"{uid}.pat.ds"): "dataset"}


def test_errors_are_gridml_errors_with_hints(dm: DataManager, uid: str) -> None:
    with pytest.raises(GridmlError) as err:
        dm.resolve(_ds(dm, f"{uid}.nothing"))
    assert err.value.hint and parse_did(_ds(dm, f"{uid}.nothing"))


def test_collections_refuse_a_name_of_another_type(dm: DataManager, tmp_path: Path,
                                                  uid: str) -> None:
    (a, _) = _write(tmp_path, f"{uid}.f", 10)
    dm.upload([a], _ds(dm, f"{uid}.ds"))
    with pytest.raises(DataError, match="already exists as a file, not a dataset"):
        dm.add_dataset(_ds(dm, a.name))
    with pytest.raises(DataError, match="already exists as a dataset, not a container"):
        dm.add_container(_ds(dm, f"{uid}.ds"), [])
    dm.add_dataset(_ds(dm, f"{uid}.ds"))  # an existing dataset: a no-op
    assert len(dm.list_files(_ds(dm, f"{uid}.ds"))) == 1
