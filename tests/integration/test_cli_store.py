"""The CLI and the metrics store: database trouble on the embedded path is one line and a
non-zero exit (no traceback), and `gridml --server URL status|best|fetch` read a real server."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from gridml.store import EpochReport, open_store
from tests.helpers import gridml

pytestmark = pytest.mark.service


def _one_error_line(proc) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2, proc.stderr  # the error, and its fix
    return proc.stderr


def test_unreachable_postgresql_is_one_line(gridml_home: Path) -> None:
    url = "postgresql://gridml:secret@127.0.0.1:9/nope"  # nothing listens on port 9
    err = _one_error_line(gridml("status", env={"GRIDML_DB_URL": url}, check=False))
    assert "metrics database postgresql://gridml:***@127.0.0.1:9/nope" in err
    assert "secret" not in err and "fix:" in err


def test_locked_sqlite_file_is_one_line(gridml_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)  # rollback journal: a lock stops readers
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        proc = gridml("status", env={"GRIDML_DB_URL": f"sqlite:///{path}?timeout=0.5"},
                      check=False)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = _one_error_line(proc)
    assert "locked" in err and str(path) in err and "fix:" in err


def test_bad_database_urls_are_one_line(gridml_home: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    for url, words in [("mysql://db/x", "unknown kind"),
                       (f"sqlite:///{tmp_path}/file/sub/g.db", "metrics database")]:
        err = _one_error_line(gridml("status", env={"GRIDML_DB_URL": url}, check=False))
        assert words in err and "fix:" in err


# -- gridml --server URL status | best | fetch ---------------------------------------------------
@pytest.fixture
def served(gridml_home: Path, tmp_path: Path):
    """A study with three trials (one best, with a stored model) behind a real server."""
    from gridml.server.embedded import EmbeddedServer

    model = tmp_path / "best.keras"
    model.write_bytes(b"not really a model")
    gridml("data", "put", str(model), "--dataset", "user.cli:remote.out")
    listing = json.loads(gridml("data", "ls", "user.cli:remote.out", "--json").stdout)
    did = listing["files"][0]["did"]
    url = f"sqlite:///{tmp_path / 'served.db'}"
    spec = {"search": {"objective": "val_loss", "direction": "minimize", "max_trials": 3,
                       "space": {}},
            "output": {"dataset": "user.cli:remote.out"}, "backend": {"data": "local"}}
    store = open_store(url)
    study = store.create_study("remote", spec, "h")
    for n, objective in enumerate([0.5, 0.2, float("nan")]):
        trial = store.create_trial(study.id, {"units": 8 * (n + 1)})
        store.record_epoch(trial.id, EpochReport(1, {"val_loss": objective}, 1.5))
        outputs = [{"did": did, "name": "best.keras", "bytes": 18}] if n == 1 else []
        store.update_trial(trial.id, state="completed", objective=objective, outputs=outputs)
    store.close()
    with EmbeddedServer(url) as server:
        yield server.url


def test_status_best_and_fetch_through_a_server(served: str, tmp_path: Path) -> None:
    doc = json.loads(gridml("--server", served, "status", "remote", "--json").stdout)
    assert doc["study"]["n_trials"] == 3 and doc["study"]["best"]["number"] == 1
    assert [t["epochs_done"] for t in doc["trials"]] == [1, 1, 1]
    assert "remote" in gridml("--server", served, "status").stdout
    trial = json.loads(gridml("--server", served, "status", "remote", "--trial", "0",
                              "--json").stdout)
    assert trial["epochs"][0]["metrics"]["val_loss"] == 0.5
    best = json.loads(gridml("--server", served, "best", "remote", "--json").stdout)
    assert best["number"] == 1 and best["hparams"] == {"units": 16} and best["objective"] == 0.2
    out = tmp_path / "fetched"
    gridml("--server", served, "fetch", "remote", "--best", "-o", str(out))
    assert (out / "best.keras").read_bytes() == b"not really a model"
    missing = gridml("--server", served, "fetch", "remote", "--trial", "9", "-o", str(out),
                     check=False)
    assert missing.returncode == 3 and "study remote has no trial 9" in missing.stderr, missing.stderr


def test_unknown_study_on_a_server_is_not_found(served: str) -> None:
    proc = gridml("--server", served, "best", "nosuch", check=False)
    assert proc.returncode == 3 and "nosuch" in proc.stderr and "Traceback" not in proc.stderr


def test_unreachable_server_is_one_line(gridml_home: Path) -> None:
    _one_error_line(gridml("--server", "http://127.0.0.1:9", "status", check=False))
