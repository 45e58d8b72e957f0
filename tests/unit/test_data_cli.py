"""`gridml data put | ls | get` through typer's test runner, and the backend choice."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gridml.data import open_data_manager
from gridml.data.cli import data_app
from gridml.data.local import LocalStore
from gridml.errors import NotFoundError, UsageError


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GRIDML_DATA_BACKEND", raising=False)
    return tmp_path / "home"


def _run(*args: str) -> dict:
    res = CliRunner().invoke(data_app, [*args, "--json"])
    assert res.exit_code == 0, (res.output, res.exception)
    return json.loads(res.output)


def test_put_ls_get_round_trip_json(tmp_path: Path, home: Path) -> None:
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    a.write_bytes(b"A" * 300)
    b.write_bytes(b"B" * 500)
    put = _run("put", str(a), str(b), "--dataset", "user.me:ds", "--meta", "trial=2",
               "--meta", "tag=x")
    assert put["backend"] == "local" and [f["name"] for f in put["files"]] == ["a.h5", "b.h5"]
    ls = _run("ls", "user.me:ds")
    assert ls["type"] == "dataset" and ls["total_bytes"] == 800
    assert {f["did"]: f["adler32"] for f in ls["files"]} == {
        "user.me:a.h5": f"{zlib.adler32(b'A' * 300):08x}",
        "user.me:b.h5": f"{zlib.adler32(b'B' * 500):08x}"}
    assert ls["files"][0]["metadata"] == {"tag": "x", "trial": 2}
    got = _run("get", "user.me:ds", "-o", str(tmp_path / "out"))
    assert sorted(Path(f["path"]).read_bytes()[:1] for f in got["files"]) == [b"A", b"B"]
    assert (home / "store" / "catalog.sqlite").is_file()


def test_ls_pattern_and_table_output(tmp_path: Path) -> None:
    a = tmp_path / "a.h5"
    a.write_bytes(b"1")
    _run("put", str(a), "--dataset", "user.me:quick.train")
    assert _run("ls", "user.me:quick.*")["dids"] == [{"did": "user.me:quick.train",
                                                      "type": "dataset"}]
    res = CliRunner().invoke(data_app, ["ls", "user.me:quick.train"])
    assert res.exit_code == 0 and "user.me:a.h5" in res.output and "adler32" in res.output


def test_unknown_did_raises_not_found_for_the_cli_to_print() -> None:
    res = CliRunner().invoke(data_app, ["ls", "user.me:nothing"])
    assert isinstance(res.exception, NotFoundError) and res.exception.exit_code == 3


def test_open_data_manager_chooses_by_setting(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    dm = open_data_manager()
    assert isinstance(dm, LocalStore) and dm.root == (home / "store").resolve()
    monkeypatch.setenv("GRIDML_DATA_BACKEND", "nonsense")
    with pytest.raises(UsageError, match="unknown data backend"):
        open_data_manager()
    assert isinstance(open_data_manager("local"), LocalStore)
