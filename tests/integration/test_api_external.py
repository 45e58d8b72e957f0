"""search.algorithm external: an external optimizer drives a campaign over the API.

Against `gridml serve` (its own process, a study created through its API): enqueue in order,
points checked against the space (or any point without one), the max_trials budget, close
(enqueue refused afterwards), the error bodies and 405 `Allow` the OpenAPI document promises.
The controller with the real dry-run executor: it proposes nothing, waits for enqueued points
(never ends early), runs them in order, `parallel` at a time, and ends on close.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from gridml import controller as controller_module
from gridml.client import ApiClient
from gridml.controller import Campaign
from gridml.data.local import LocalStore
from gridml.executors.base import TaskStatus
from gridml.executors.dryrun import DryRunExecutor
from gridml.server.process import ServerProcess
from gridml.spec import load_spec
from gridml.store import EpochReport, open_store
from tests.helpers import register_tiny_datasets, write_spec

RUNNING = ("submitted", "running")  # (the dry-run executor reports "submitted")
SPACE = {"lr": {"type": "real", "low": 1e-4, "high": 0.1, "log": True},
         "act": {"type": "categorical", "choices": ["relu", "tanh"]}}


def external(space: dict | None = None, max_trials: int = 4) -> dict:
    return {"search": {"algorithm": "external", "objective": "val_loss", "max_trials": max_trials,
                       "parallel": 2, "space": space or {}}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`gridml serve`; its admin token (kept in its home's token file) is given to the clients
    of the module's tests, which run with homes of their own, as GRIDML_ADMIN_TOKEN."""
    from gridml.settings import read_admin_token, settings

    tmp = tmp_path_factory.mktemp("external")
    server = ServerProcess(f"sqlite:///{tmp / 'gridml.db'}", log=tmp / "serve.log",
                           open_reads=False).start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRIDML_ADMIN_TOKEN", read_admin_token(settings().admin_token_file) or "")
        yield server.url
    server.stop()
    assert "Traceback" not in (tmp / "serve.log").read_text()


def _post(url: str, path: str, token: str, body: dict | None = None) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {token}"})


def test_enqueue_in_order_budget_and_close_over_gridml_serve(served):
    owner = ApiClient(served)
    owner.create_study("ext-serve", external(SPACE, max_trials=3))
    points = [{"lr": 0.001, "act": "relu"}, {"lr": 0.01, "act": "tanh"}, {"lr": 0.05, "act": "relu"}]
    made = [owner.enqueue_trial("ext-serve", p) for p in points]
    assert [t["number"] for t in made] == [0, 1, 2]
    assert all(t["state"] == "queued" and t["source"] == "external" for t in made)
    listed = owner.list_trials("ext-serve", ["queued"])
    assert [t["hparams"] for t in listed] == points  # the order the controller runs them in

    over = _post(served, "/api/v1/studies/ext-serve/trials", owner.token,
                 {"hparams": {"lr": 0.2, "act": "relu"}})
    assert over.status_code == 409 and "max_trials" in over.json()["detail"]

    assert owner.ask("ext-serve", n=2) == []  # the searcher proposes nothing

    closed = _post(served, "/api/v1/studies/ext-serve/close", owner.token)
    assert closed.status_code == 200 and closed.json()["state"] == "closed"
    again = _post(served, "/api/v1/studies/ext-serve/close", owner.token)
    assert again.status_code == 200 and again.json()["state"] == "closed"  # a no-op
    assert owner.get_study("ext-serve")["state"] == "closed"


def test_enqueue_after_close_and_without_token_are_refused_with_the_error_body(served):
    owner = ApiClient(served)
    owner.create_study("ext-closed", external(SPACE))
    assert _post(served, "/api/v1/studies/ext-closed/close", owner.token).status_code == 200
    late = _post(served, "/api/v1/studies/ext-closed/trials", owner.token,
                 {"hparams": {"lr": 0.01, "act": "relu"}})
    assert late.status_code == 409
    assert late.json()["detail"] == "study 'ext-closed' is closed: it takes no more trials"
    assert late.json()["hint"]
    anonymous = httpx.post(f"{served}/api/v1/studies/ext-closed/close")
    assert anonymous.status_code == 401 and anonymous.json()["hint"]
    other = ApiClient(served)
    other.create_study("ext-other", external(SPACE))
    foreign = _post(served, "/api/v1/studies/ext-closed/close", other.token)
    assert foreign.status_code == 403 and "ext-closed" in foreign.json()["detail"]


def test_points_are_checked_against_the_space_or_taken_as_they_are_without_one(served):
    owner = ApiClient(served)
    owner.create_study("ext-space", external(SPACE))
    bad = _post(served, "/api/v1/studies/ext-space/trials", owner.token,
                {"hparams": {"lr": 5.0, "act": "relu"}})
    assert bad.status_code == 422 and "hparams.lr" in bad.json()["detail"]
    free = ApiClient(served)
    free.create_study("ext-free", external())
    trial = free.enqueue_trial("ext-free", {"anything": [1, 2], "x": "y"})
    assert trial["hparams"] == {"anything": [1, 2], "x": "y"}


def test_validation_errors_and_405_match_the_document(served):
    owner = ApiClient(served)
    owner.create_study("ext-doc", external(SPACE))
    invalid = _post(served, "/api/v1/studies/ext-doc/trials", owner.token, {"hparams": 3})
    body = invalid.json()
    assert invalid.status_code == 422 and isinstance(body["detail"], str)
    assert body["detail"].startswith("invalid request: body.hparams:") and body["hint"]
    assert body["errors"][0]["loc"] == ["body", "hparams"]
    wrong = httpx.put(f"{served}/api/v1/studies/ext-doc/trials",
                      headers={"Authorization": f"Bearer {owner.token}"})
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, POST"
    assert wrong.json()["detail"] == "Method Not Allowed" and "GET and POST" in wrong.json()["hint"]
    doc = httpx.get(f"{served}/openapi.json").json()
    # limits as JSON Schema words (pydantic writes ge/le for a constrained type it cannot map)
    assert not re.search(r'"(ge|le|gt|lt)":', json.dumps(doc))
    threads = doc["components"]["schemas"]["EpochIn"]["properties"]["threads"]["anyOf"][0]
    assert (threads["minimum"], threads["maximum"]) == (0, 10_000_000)
    close = doc["paths"]["/api/v1/studies/{study}/close"]["post"]
    assert set(close["responses"]) == {"200", "400", "401", "403", "404", "413", "422", "503"}
    assert close["responses"]["404"]["content"]["application/json"]["schema"]["$ref"] \
        == "#/components/schemas/ErrorBody"


# ---- the controller -------------------------------------------------------------------------

@pytest.fixture
def world(tmp_path: Path) -> dict:
    data = LocalStore(tmp_path / "store")
    register_tiny_datasets(data, tmp_path, "user.t")
    spec = write_spec(tmp_path / "spec.yaml", "ext", "user.t:train", "user.t:val", search=(
        "search: {algorithm: external, objective: val_loss, max_trials: 3, parallel: 2}\n"))
    loaded = load_spec(spec, did_exists=data.exists)
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    c = Campaign(loaded, store, DryRunExecutor(), data, tmp_path / "runs",
                 api_url="http://127.0.0.1:9", poll_s=0)
    return {"tmp": tmp_path, "store": store, "campaign": c}


def _complete(world: dict, trial, val_loss: float) -> None:
    out = world["tmp"] / "runs" / "ext" / f"trial-{trial.number:04d}" / "outputs"
    out.mkdir(parents=True, exist_ok=True)
    report = EpochReport(1, {"loss": val_loss, "val_loss": val_loss}, epoch_time=0.1)
    (out / "metrics.jsonl").write_text(json.dumps(report.to_json()) + "\n")
    (out / "result.json").write_text(json.dumps({"state": "completed", "epochs": 1}))
    world["campaign"].finalize(trial, TaskStatus("completed"))


def test_controller_waits_for_enqueued_points_runs_them_in_order_and_ends_on_close(world):
    c, store = world["campaign"], world["store"]
    for _ in range(3):  # nothing enqueued yet: it proposes nothing and does not end
        assert c.step() is False
    assert store.list_trials(c.study.id) == []
    for lr in (0.001, 0.002, 0.003):
        store.create_trial(c.study.id, {"lr": lr}, source="external", state="queued")
    assert c.step() is False
    trials = store.list_trials(c.study.id)
    assert [(t.hparams["lr"], t.state) for t in trials] == [
        (0.001, "running"), (0.002, "running"), (0.003, "queued")]  # in order, 2 at a time
    _complete(world, trials[0], 0.5)
    assert c.step() is False
    assert store.list_trials(c.study.id)[2].state in RUNNING
    store.set_study_state(c.study.id, "closed")  # the optimizer is done: what runs still runs
    assert c.step() is False
    for trial in store.list_trials(c.study.id, states=RUNNING):
        _complete(world, trial, 0.4)
    assert c.step() is True
    assert [(t.state, t.objective) for t in store.list_trials(c.study.id)] == [
        ("completed", 0.5), ("completed", 0.4), ("completed", 0.4)]


def test_controller_ends_after_max_trials_once_the_optimizer_had_time_to_read(world, monkeypatch):
    c, store = world["campaign"], world["store"]
    for lr in (0.001, 0.002, 0.003):
        store.create_trial(c.study.id, {"lr": lr}, source="external", state="queued")
    c.step()
    for trial in store.list_trials(c.study.id, states=RUNNING):
        _complete(world, trial, 0.5)
    c.step()
    for trial in store.list_trials(c.study.id, states=RUNNING):
        _complete(world, trial, 0.5)
    assert c.step() is False  # all 3 done: the API stays up for the optimizer's last reads
    monkeypatch.setattr(controller_module, "EXTERNAL_GRACE_S", 0.0)
    assert c.step() is True


def test_the_example_client_drives_a_study_on_gridml_serve(served, tmp_path):
    """examples/external_skopt.py against `gridml serve` (--url/--token), a study created through
    its API; the trials are played over the API with the study token, in the order enqueued and
    at most `parallel` at a time, as a controller would (the server's own controller drives only
    grid executors)."""
    import subprocess
    import sys
    import threading

    from tests.helpers import ROOT

    owner = ApiClient(served)
    owner.create_study("ext-client", external(SPACE, max_trials=4))
    played: list[tuple[int, float]] = []
    stop = threading.Event()

    def worker() -> None:  # runs the queued trials in number order, 2 at a time
        while not stop.is_set():
            queued = owner.list_trials("ext-client", ["queued"])[:2]
            for trial in queued:
                played.append((trial["number"], trial["hparams"]["lr"]))
                owner.post_epoch(trial["id"], EpochReport(
                    1, {"val_loss": abs(trial["hparams"]["lr"] - 0.01)}, 0.1))
                _post(served, f"/api/v1/trials/{trial['id']}/finish", owner.token,
                      {"state": "completed"})
            stop.wait(0.2)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        client = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "external_skopt.py"), "--study", "ext-client",
             "--url", served, "--token", owner.token, "--poll", "0.2", "--timeout", "120"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    finally:
        stop.set()
        thread.join(10)
    assert client.returncode == 0, client.stdout + client.stderr
    trials = owner.list_trials("ext-client")
    assert [t["state"] for t in trials] == ["completed"] * 4
    assert [n for n, _ in played] == [0, 1, 2, 3]  # run in the order enqueued
    assert owner.get_study("ext-client")["state"] == "closed"
    assert "best trial" in client.stdout
    bad = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "external_skopt.py"), "--study", "ext-client",
         "--url", served, "--token", "gms_wrong"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and bad.stderr.startswith("error: GET /api/v1/studies/ext-client: "
                                                         "HTTP 401: unknown or revoked token (")


def test_api_record_keeps_a_valid_token_and_is_the_users_only(tmp_path):
    """runs/<study>/api.json: the study's first token; on a rerun the one recorded while it is
    valid, else one more (the old ones keep working); mode 0600."""
    import stat

    from gridml.runner import _record_api, _study_token

    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    study = store.create_study("rec", external(), "h")
    record = tmp_path / "runs" / "rec" / "api.json"
    first = _study_token(store, study, record)
    assert first == study.token
    _record_api(record, "http://127.0.0.1:4567", first)
    assert json.loads(record.read_text()) == {"url": "http://127.0.0.1:4567", "token": first,
                                              "port": 4567}
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    again = store.get_study("rec")  # as on resume: no plain token any more
    assert again.token is None and _study_token(store, again, record) == first
    record.write_text(json.dumps({"url": "x", "port": 1, "token": "gms_revoked"}))
    fresh = _study_token(store, again, record)
    assert fresh not in (first, "gms_revoked") and store.check_study_token(again.id, fresh)
    assert store.check_study_token(again.id, first)
