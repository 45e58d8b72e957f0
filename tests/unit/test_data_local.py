"""The local store's own promises beyond the contract: layout, catalogue, processes, stage-in."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import zlib
from pathlib import Path

import pytest

from gridml.data.base import DID, adler32_file
from gridml.data.local import LocalStore
from gridml.errors import DataError


def test_adler32_matches_zlib_and_the_reference_value(tmp_path: Path) -> None:
    p = tmp_path / "w"
    p.write_bytes(b"Wikipedia")  # the textbook example: adler32("Wikipedia") = 0x11E60398
    assert adler32_file(p) == "11e60398"
    data = os.urandom(3 << 20)
    p.write_bytes(data)
    assert adler32_file(p, bufsize=4096) == f"{zlib.adler32(data):08x}"


def test_files_live_under_scope_and_sharded_path(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    src = tmp_path / "f.h5"
    src.write_bytes(b"x" * 10)
    [info] = store.upload([src], "user.a:ds")
    rel = info.path.relative_to(store.root)  # type: ignore[union-attr]
    assert rel.parts[0] == "user.a" and rel.name == "f.h5" and len(rel.parts) == 4
    assert store.path_for(DID("user.a", "f.h5")) == info.path
    assert not any((store.root / ".tmp").iterdir()), "no temporary files left behind"


def test_catalogue_is_sqlite_in_wal_mode(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    con = sqlite3.connect(store.root / "catalog.sqlite")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


def test_stage_in_returns_stored_paths_without_copying(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    src = tmp_path / "f.h5"
    src.write_bytes(b"abc" * 100)
    store.upload([src], "user.a:train")
    dest = tmp_path / "stage"
    [f] = store.stage_in("user.a:train", dest)
    assert f.path is not None and store.root in f.path.parents and not dest.exists()


def test_missing_file_on_disk_is_no_available_replica(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    src = tmp_path / "f.h5"
    src.write_bytes(b"abc")
    [f] = store.upload([src], "user.a:train")
    f.path.unlink()  # type: ignore[union-attr]
    with pytest.raises(DataError, match="no available replica"):
        store.resolve("user.a:train")


def test_other_rse_refused(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    src = tmp_path / "f"
    src.write_bytes(b"1")
    with pytest.raises(DataError, match="one RSE"):
        store.upload([src], "user.a:ds", rse="CERN-PROD_DATADISK")


def test_container_cycles_and_files_refused(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    src = tmp_path / "f"
    src.write_bytes(b"1")
    store.upload([src], "user.a:ds")
    store.add_container("user.a:c1", ["user.a:ds"])
    store.add_container("user.a:c2", ["user.a:c1"])
    with pytest.raises(DataError, match="cycle"):
        store.add_container("user.a:c1", ["user.a:c2"])
    with pytest.raises(DataError, match="containers hold datasets"):
        store.add_container("user.a:c1", ["user.a:f"])
    with pytest.raises(DataError, match="already exists as a dataset"):
        store.add_container("user.a:ds", [])


def _upload_worker(root: str, src_dir: str, k: int) -> None:
    store = LocalStore(Path(root))
    files = sorted(Path(src_dir).glob(f"p{k}-*")) + [Path(src_dir) / "shared.bin"]
    store.upload(files, "user.a:many")


def test_several_processes_upload_into_one_dataset(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "shared.bin").write_bytes(b"same in every process")
    for k in range(4):
        for i in range(5):
            (src / f"p{k}-{i}").write_bytes(os.urandom(2000))
    LocalStore(tmp_path / "s")  # create the catalogue once, as the controller does
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_upload_worker, args=(str(tmp_path / "s"), str(src), k))
             for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    files = LocalStore(tmp_path / "s").resolve("user.a:many")
    assert len(files) == 21
    for f in files:
        assert adler32_file(f.path) == f.adler32  # type: ignore[arg-type]
