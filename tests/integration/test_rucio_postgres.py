"""Rucio with PostgreSQL behind it: custom DID metadata lives on the server (the JSON metadata
plugin), not in gridml's fallback record, and the server runs two workers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from rucio_harness import RucioServer, remove_server, start_server

from gridml.data.rucio import RucioStore

pytestmark = [pytest.mark.service, pytest.mark.slow]


@pytest.fixture(scope="module")
def pg_rucio() -> Iterator[RucioServer]:
    server = start_server(db="postgresql")  # its own folder (see rucio_fixtures.rucio_server)
    try:
        yield server
    finally:
        remove_server(server)


def test_metadata_is_stored_on_the_server(pg_rucio: RucioServer, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert pg_rucio.info["database"].startswith("postgresql")
    for key, value in pg_rucio.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "writer"))
    files = []
    for i in range(2):
        files.append(tmp_path / f"model-{i}.keras")
        files[-1].write_bytes(os.urandom(1000))
    meta = {"study": "pg", "trial": 1, "hparams": {"units": 16}, "objective": 0.25}
    RucioStore().upload(files, "user.jdoe:pg.out", metadata=meta)
    assert not (tmp_path / "writer" / "rucio-metadata.sqlite").exists()  # all on the server
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "reader"))  # another user, another machine
    reader = RucioStore()
    assert reader.get_metadata("user.jdoe:model-0.keras") == meta
    assert [f.metadata for f in reader.list_files("user.jdoe:pg.out")] == [meta, meta]
    assert reader._server_json_meta is not False
