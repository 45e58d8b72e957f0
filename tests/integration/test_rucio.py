"""The rucio backend against a real Rucio server (beyond the contract suite): replicas and rules,
stage-in with progress and reuse, metadata, `gridml data` on rucio, and failures (unknown DID,
wrong password, quota, server down, server stopped mid-upload then restarted)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
import zlib
from pathlib import Path

import pytest
from rucio_harness import RucioServer, as_root
from typer.testing import CliRunner

from gridml.data.base import adler32_file
from gridml.data.cli import data_app
from gridml.data.rucio import RucioStore
from gridml.errors import DataError, NotFoundError, UsageError
from tests.helpers import wait_for

pytestmark = [pytest.mark.service, pytest.mark.slow]


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:10]


def _files(tmp_path: Path, uid: str, n: int, size: int) -> list[Path]:
    out = []
    for i in range(n):
        p = tmp_path / "src" / f"{uid}.f{i}.h5"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(size))
        out.append(p)
    return out


def _rse_files(server: RucioServer) -> dict[str, Path]:
    """Files physically on the test RSE: name -> path."""
    root = Path(server.info["state"]) / "rse" / server.info["rse"]
    return {p.name: p for p in root.rglob("*") if p.is_file()}


def test_upload_lands_on_the_rse_with_a_rule_and_usage(rucio_store: RucioStore,
                                                      rucio_env: RucioServer, tmp_path: Path,
                                                      uid: str) -> None:
    files = _files(tmp_path, uid, 3, 20_000)
    ds = f"user.jdoe:{uid}.out"
    rucio_store.upload(files, ds)
    on_rse = _rse_files(rucio_env)
    for f in files:
        assert adler32_file(on_rse[f.name]) == adler32_file(f)
    rules = json.loads(as_root(rucio_env, f"import json; print(json.dumps([{{k: r[k] for k in "
                       f"('rse_expression', 'state', 'account')}} for r in client.list_did_rules("
                       f"'user.jdoe', '{uid}.out')]))"))
    assert [(r["rse_expression"], r["account"]) for r in rules] == [("TEST_USERDISK", "jdoe")]
    rucio_env.daemons()  # judge-evaluator + abacus: the rule is satisfied, usage counted
    usage = json.loads(as_root(rucio_env, "import json; print(json.dumps([dict(u) for u in "
                               "client.get_local_account_usage('jdoe', 'TEST_USERDISK')]))"))
    assert usage[0]["bytes"] >= 3 * 20_000 and usage[0]["files"] >= 3


def test_new_dataset_rule_gets_the_lifetime_setting(
        rucio_env: RucioServer, tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GRIDML_RUCIO_LIFETIME", "86400")
    from gridml.data import open_data_manager

    open_data_manager("rucio").upload(_files(tmp_path, uid, 1, 100), f"user.jdoe:{uid}.tmp")
    rules = json.loads(as_root(rucio_env, f"import json; print(json.dumps([str(r['expires_at']) "
                               f"for r in client.list_did_rules('user.jdoe', '{uid}.tmp')]))"))
    assert len(rules) == 1 and rules[0] != "None"
    monkeypatch.setenv("GRIDML_RUCIO_LIFETIME", "a month")
    with pytest.raises(UsageError, match="GRIDML_RUCIO_LIFETIME"):
        open_data_manager("rucio")


def test_resolve_reports_replicas_and_refuses_unavailable_ones(
        rucio_store: RucioStore, rucio_env: RucioServer, tmp_path: Path, uid: str) -> None:
    files = _files(tmp_path, uid, 2, 1000)
    rucio_store.upload(files, f"user.jdoe:{uid}.train")
    got = rucio_store.resolve(f"user.jdoe:{uid}.train")
    assert [f.replicas for f in got] == [["TEST_USERDISK"], ["TEST_USERDISK"]]
    as_root(rucio_env, f"client.update_replicas_states('TEST_USERDISK', [{{'scope': 'user.jdoe', "
                       f"'name': '{files[0].name}', 'state': 'U'}}])")
    with pytest.raises(DataError, match=f"no available replica.*{files[0].name}"):
        rucio_store.resolve(f"user.jdoe:{uid}.train")


def test_stage_in_reports_progress_and_reuses_verified_files(
        rucio_store: RucioStore, tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gridml.data.rucio.GROUP_FILES", 2)  # groups of 2 files: progress 2/3, 3/3
    files = _files(tmp_path, uid, 3, 50_000)
    rucio_store.upload(files, f"user.jdoe:{uid}.train")
    calls: list[tuple[int, int, int, int]] = []
    dest = tmp_path / "stage"
    staged = rucio_store.stage_in(f"user.jdoe:{uid}.train", dest,
                                  progress=lambda *a: calls.append(a))
    assert [c[:2] for c in calls] == [(2, 3), (3, 3)] and calls[-1][2:] == (150_000,) * 2
    for f in staged:
        assert f.path is not None and adler32_file(f.path) == f.adler32
    mtimes = {f.path: f.path.stat().st_mtime_ns for f in staged if f.path}
    staged[0].path.write_bytes(b"truncated")  # type: ignore[union-attr]
    again = rucio_store.stage_in(f"user.jdoe:{uid}.train", dest)
    assert all(adler32_file(f.path) == f.adler32 for f in again)  # type: ignore[arg-type]
    assert [f.path.stat().st_mtime_ns == mtimes[f.path] for f in again[1:]] == [True, True]  # type: ignore[union-attr]


def test_metadata_the_server_cannot_hold_is_kept_by_gridml(rucio_store: RucioStore, tmp_path: Path,
                                                           uid: str) -> None:
    [f] = _files(tmp_path, uid, 1, 100)
    meta = {"study": "s", "trial": 4, "hparams": {"lr": 0.1}, "objective": 0.5}
    rucio_store.upload([f], f"user.jdoe:{uid}.out", metadata=meta)
    # This server runs on SQLite: Rucio's JSON metadata plugin needs another database.
    assert rucio_store._server_json_meta is False
    fresh = RucioStore()  # a new process-level view of the same server and gridml home
    assert {k: fresh.get_metadata(f"user.jdoe:{f.name}")[k] for k in meta} == meta


def test_cli_put_ls_get_on_rucio(rucio_env: RucioServer, tmp_path: Path, uid: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    [f] = _files(tmp_path, uid, 1, 777)
    runner = CliRunner()
    put = runner.invoke(data_app, ["put", str(f), "-d", f"user.jdoe:{uid}.ds", "--backend", "rucio",
                                   "--rse", "TEST_USERDISK", "--json"])
    assert put.exit_code == 0, put.output
    ls = json.loads(runner.invoke(data_app, ["ls", f"user.jdoe:{uid}.ds", "-b", "rucio",
                                             "--json"]).output)
    assert ls["backend"] == "rucio" and ls["files"][0]["adler32"] == \
        f"{zlib.adler32(f.read_bytes()):08x}" and ls["files"][0]["replicas"] == ["TEST_USERDISK"]
    got = runner.invoke(data_app, ["get", f"user.jdoe:{uid}.ds", "-o", str(tmp_path / "out"),
                                   "-b", "rucio", "--json"])
    assert (tmp_path / "out" / f.name).read_bytes() == f.read_bytes(), got.output


def test_unknown_did_and_unknown_rse(rucio_store: RucioStore, tmp_path: Path, uid: str) -> None:
    with pytest.raises(NotFoundError, match=f"user.jdoe:{uid}.nothing.*Rucio at http://127.0.0.1"):
        rucio_store.resolve(f"user.jdoe:{uid}.nothing")
    [f] = _files(tmp_path, uid, 1, 10)
    with pytest.raises(DataError, match="no RSE of that name") as err:
        rucio_store.upload([f], f"user.jdoe:{uid}.ds", rse="NOWHERE_USERDISK")
    assert "GRIDML_RUCIO_RSE" in str(err.value)


def test_wrong_password_says_what_and_where_to_fix(rucio_env: RucioServer,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUCIO_CONFIG", str(rucio_env.client_config_with_password("not-it")))
    with pytest.raises(DataError, match="refused the credentials of account jdoe") as err:
        RucioStore().exists("user.jdoe:x")
    assert "RUCIO_CONFIG" in str(err.value)


def test_rule_beyond_quota_refused(rucio_store: RucioStore, tmp_path: Path, uid: str) -> None:
    [f] = _files(tmp_path, uid, 1, 5000)
    rucio_store.upload([f], f"user.jdoe:{uid}.big")
    assert rucio_store.add_rule(f"user.jdoe:{uid}.big", "TEST_USERDISK")  # the upload's own rule
    with pytest.raises(DataError, match="no quota left") as err:  # jdoe has 1000 bytes there
        rucio_store.add_rule(f"user.jdoe:{uid}.big", "TINY_SCRATCHDISK", lifetime=3600)
    assert "--rse" in str(err.value)


def test_server_down_is_retried_then_reported(rucio_store: RucioStore, rucio_env: RucioServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDML_RUCIO_RETRIES", "2")
    monkeypatch.setenv("GRIDML_RUCIO_BACKOFF", "0.2")
    rucio_env.stop()
    try:
        t0 = time.perf_counter()
        with pytest.raises(DataError, match="cannot reach Rucio at http://127.0.0.1") as err:
            rucio_store.list_files("user.jdoe:anything")
        assert time.perf_counter() - t0 >= 0.6  # two backoffs: 0.2 s + 0.4 s
        assert "rucio_host" in str(err.value)
    finally:
        rucio_env.start()


def test_server_stopped_mid_upload_then_restarted(rucio_store: RucioStore, rucio_env: RucioServer,
                                                  tmp_path: Path, uid: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDML_RUCIO_RETRIES", "12")  # up to ~100 s: a restart on a loaded machine
    files = _files(tmp_path, uid, 6, 200_000)
    ds = f"user.jdoe:{uid}.out"
    result: dict[str, object] = {}
    worker = threading.Thread(target=lambda: result.update(ok=_try(rucio_store.upload, files, ds)),
                              daemon=True)  # never outlives a failed test
    worker.start()
    _wait_for_first_file(rucio_env, uid)
    rucio_env.stop()  # mid-upload: at least one file done, others not
    time.sleep(1.0)  # the outage itself (not a wait for something): uploads meet a dead server
    rucio_env.start()
    worker.join(120)
    assert result.get("ok") is True, result
    listed = {f.did.name: f for f in rucio_store.resolve(ds)}
    assert sorted(listed) == sorted(f.name for f in files)
    on_rse = _rse_files(rucio_env)
    for f in files:  # every registered file is complete on the RSE; nothing half-registered
        assert listed[f.name].adler32 == adler32_file(f) == adler32_file(on_rse[f.name])
    registered = {d.name for d, t in rucio_store.list_dids("user.jdoe", f"{uid}.*") if t == "file"}
    assert registered == {f.name for f in files}


def _try(fn, *args) -> object:  # type: ignore[no-untyped-def]
    try:
        fn(*args)
        return True
    except Exception as exc:
        return exc


def _wait_for_first_file(server: RucioServer, uid: str, timeout: float = 60) -> None:
    root = Path(server.info["state"]) / "rse" / server.info["rse"]
    wait_for(lambda: any(p.name.startswith(uid) and not p.name.endswith(".rucio.upload")
                         for p in root.rglob(f"{uid}*")), timeout, "the upload to start",
             interval=0.02)
