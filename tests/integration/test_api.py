"""The metrics API over real HTTP: uvicorn on loopback (EmbeddedServer) and ApiClient."""

from __future__ import annotations

import math
import re

import httpx
import pytest

from gridml.client import ApiClient
from gridml.errors import ConflictError, NotFoundError, SpecError, StoreError
from gridml.store import EpochReport
from tests.conftest import database

pytestmark = pytest.mark.service

SPEC = {"name": "demo", "search": {
    "algorithm": "random", "objective": "val_loss", "direction": "minimize", "seed": 3,
    "space": {"lr": {"type": "real", "low": 1e-4, "high": 0.1, "log": True},
              "units": {"type": "int", "low": 8, "high": 64},
              "act": {"type": "categorical", "choices": ["relu", "tanh"]}}}}
POINT = {"lr": 0.01, "units": 16, "act": "relu"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request, tmp_path_factory):
    """The API on a real uvicorn, on SQLite and on PostgreSQL."""
    from gridml.server.embedded import EmbeddedServer

    sqlite = tmp_path_factory.mktemp("home") / "gridml.db"
    with database(request.param, request.getfixturevalue("pg_server"), sqlite) as url, \
            EmbeddedServer(url) as srv:
        yield srv


@pytest.fixture
def owner(server, request) -> ApiClient:
    """A client holding the study token of a fresh study."""
    client = ApiClient(server.url, retries=1, backoff=0.01)
    name = re.sub(r"[^a-z0-9]+", "-", request.node.originalname.lower())[:60]
    client.create_study(name, SPEC)
    client.study = name  # type: ignore[attr-defined]
    yield client
    client.close()


def epoch(n: int, loss: float = 0.5) -> EpochReport:
    return EpochReport(n, {"loss": loss, "val_loss": loss + 0.1}, epoch_time=2.0,
                       samples_per_s=500.0, input_wait_frac=0.02)


def test_create_and_get_study(owner):
    summary = owner.get_study(owner.study)
    assert summary["name"] == owner.study and summary["counts"]["queued"] == 0
    assert summary["best"] is None and summary["spec"]["search"]["objective"] == "val_loss"
    assert owner.get_study(summary["id"])["name"] == owner.study
    assert [s["name"] for s in owner.list_studies()] == [owner.study]


def test_duplicate_study_409(owner, server):
    with pytest.raises(ConflictError, match="already exists"):
        ApiClient(server.url).create_study(owner.study, SPEC)


def test_unknown_study_404_with_hint(owner):
    with pytest.raises(NotFoundError) as err:
        owner.get_study("no-such-study")
    assert "no-such-study" in str(err.value) and "gridml status" in str(err.value)


def test_enqueue_validates_against_space(owner):
    trial = owner.enqueue_trial(owner.study, POINT)
    assert (trial["number"], trial["state"], trial["source"]) == (0, "queued", "external")
    with pytest.raises(SpecError, match="lr"):
        owner.enqueue_trial(owner.study, {**POINT, "lr": 5.0})
    with pytest.raises(SpecError, match="colour"):
        owner.enqueue_trial(owner.study, {**POINT, "colour": "red"})
    with pytest.raises(SpecError, match="act"):
        owner.enqueue_trial(owner.study, {**POINT, "act": "sigmoid"})


def test_epochs_idempotent_201_200_409(owner, server):
    trial = owner.enqueue_trial(owner.study, POINT)
    url = f"{server.url}/api/v1/trials/{trial['id']}/epochs"
    auth = {"Authorization": f"Bearer {owner.token}"}
    body = epoch(1).to_json()
    assert httpx.post(url, json=body, headers=auth).status_code == 201
    assert httpx.post(url, json=body, headers=auth).status_code == 200
    changed = {**body, "metrics": {"loss": 9.0}}
    assert httpx.post(url, json=changed, headers=auth).status_code == 409
    assert owner.post_epoch(trial["id"], epoch(2, 0.3)) is True
    assert owner.post_epoch(trial["id"], epoch(2, 0.3)) is False
    with pytest.raises(ConflictError):
        owner.post_epoch(trial["id"], epoch(2, 0.1))
    assert [e.epoch for e in owner.list_epochs(trial["id"])] == [1, 2]
    listed = owner.list_trials(owner.study)[0]
    assert listed["epochs_done"] == 2 and listed["state"] == "running"


def test_non_finite_metric_round_trips_as_null(owner):
    trial = owner.enqueue_trial(owner.study, POINT)
    report = EpochReport(1, {"loss": float("nan"), "val_loss": float("inf")}, epoch_time=1.0)
    assert owner.post_epoch(trial["id"], report) is True
    assert owner.post_epoch(trial["id"], report) is False
    (back,) = owner.list_epochs(trial["id"])
    assert math.isnan(back.metrics["loss"]) and math.isnan(back.metrics["val_loss"])


def test_trial_token_writes_only_its_own_trial(owner, server):
    from gridml.store import open_store

    first = owner.enqueue_trial(owner.study, POINT)
    second = owner.enqueue_trial(owner.study, POINT)
    store = open_store(server.store_url)
    token = store.issue_trial_token(first["id"])
    store.close()
    payload = ApiClient(server.url, token=token, retries=0)
    assert payload.post_epoch(first["id"], epoch(1)) is True
    assert payload.heartbeat(first["id"])["state"] == "running"
    with pytest.raises(StoreError, match="403|only its own trial"):
        payload.post_epoch(second["id"], epoch(1))
    with pytest.raises(StoreError, match="only its own trial"):
        payload.finish(second["id"], "completed")
    with pytest.raises(StoreError, match="study token"):
        payload.enqueue_trial(owner.study, POINT)


def test_study_token_cannot_touch_another_study(owner, server):
    other = ApiClient(server.url, retries=0)
    other.create_study("another-study", SPEC)
    foreign = other.enqueue_trial("another-study", POINT)
    with pytest.raises(StoreError, match="does not open"):
        owner.get_study("another-study")
    with pytest.raises(StoreError, match="does not open"):
        owner.post_epoch(foreign["id"], epoch(1))
    with pytest.raises(StoreError, match="does not open"):
        owner.list_epochs(foreign["id"])


def test_writes_need_a_token(owner, server):
    trial = owner.enqueue_trial(owner.study, POINT)
    anon = ApiClient(server.url, retries=0)
    with pytest.raises(StoreError, match="missing bearer token"):
        anon.post_epoch(trial["id"], epoch(1))
    bogus = ApiClient(server.url, token="gmt_forged", retries=0)
    with pytest.raises(StoreError, match="unknown or revoked"):
        bogus.heartbeat(trial["id"])


def test_finish_takes_objective_from_last_epoch(owner):
    good = owner.enqueue_trial(owner.study, POINT)
    bad = owner.enqueue_trial(owner.study, {**POINT, "units": 32})
    for n, loss in ((1, 0.5), (2, 0.2)):
        owner.post_epoch(good["id"], epoch(n, loss))
    owner.post_epoch(bad["id"], epoch(1, 0.9))
    assert owner.finish(good["id"], "completed")["objective"] == pytest.approx(0.3)
    assert owner.finish(bad["id"], "completed", objective=1.0)["objective"] == 1.0
    assert owner.finish(good["id"], "completed")["state"] == "completed"  # a repeat: no-op
    with pytest.raises(ConflictError, match="already finished"):
        owner.finish(good["id"], "failed")
    summary = owner.get_study(owner.study)
    assert summary["best"]["id"] == good["id"] and summary["counts"]["completed"] == 2


def test_trials_filter_and_paginate(owner, server):
    ids = [owner.enqueue_trial(owner.study, POINT)["id"] for _ in range(3)]
    owner.finish(ids[1], "failed")
    assert [t["id"] for t in owner.list_trials(owner.study, ["failed"])] == [ids[1]]
    page = httpx.get(f"{server.url}/api/v1/studies/{owner.study}/trials",
                     params={"limit": 2, "offset": 1},
                     headers={"Authorization": f"Bearer {owner.token}"}).json()
    assert page["total"] == 3 and [t["id"] for t in page["trials"]] == ids[1:]


def test_ask_proposes_points_inside_the_space(owner):
    owner.enqueue_trial(owner.study, POINT)
    points = owner.ask(owner.study, n=3)
    assert len(points) == 3 and POINT not in points
    for p in points:
        assert 1e-4 <= p["lr"] <= 0.1 and 8 <= p["units"] <= 64 and p["act"] in ("relu", "tanh")


def test_should_stop_without_rule(owner):
    trial = owner.enqueue_trial(owner.study, POINT)
    stop, reason = owner.should_stop(trial["id"])
    assert stop is False and "early_stopping" in reason


def test_prometheus_metrics(owner, server):
    trial = owner.enqueue_trial(owner.study, POINT)
    owner.post_epoch(trial["id"], epoch(1))
    text = httpx.get(f"{server.url}/metrics").text
    assert "gridml_epoch_reports_ingested_total" in text
    assert 'gridml_trials{state="running"}' in text
    assert 'route="/api/v1/trials/{trial}/epochs"' in text


def test_openapi_published(server):
    doc = httpx.get(f"{server.url}/openapi.json").json()
    for path in ("/api/v1/studies", "/api/v1/studies/{study}/ask",
                 "/api/v1/trials/{trial}/epochs", "/api/v1/trials/{trial}/should-stop"):
        assert path in doc["paths"]


def test_client_retries_then_names_the_server():
    with pytest.raises(StoreError, match="cannot reach the metrics API") as err:
        ApiClient("http://127.0.0.1:9", retries=2, backoff=0.01).health()
    assert "gridml serve" in err.value.hint


def test_closed_reads_need_a_token(tmp_path):
    from gridml.server.embedded import EmbeddedServer

    with EmbeddedServer(f"sqlite:///{tmp_path / 'g.db'}", open_reads=False) as srv:
        owner = ApiClient(srv.url, retries=0)
        owner.create_study("closed", SPEC)
        assert owner.get_study("closed")["name"] == "closed"
        with pytest.raises(StoreError, match="missing bearer token"):
            ApiClient(srv.url, retries=0).get_study("closed")


def test_trial_token_fast_path_same_replies(owner, server):
    """Payload posts (trial token) take the lean path after the first: same statuses and bodies,
    and what it does not handle (invalid body, NaN literal) still gets FastAPI's answers."""
    from gridml.store import open_store

    trial = owner.enqueue_trial(owner.study, POINT)
    store = open_store(server.store_url)
    token = store.issue_trial_token(trial["id"])
    store.close()
    url = f"{server.url}/api/v1/trials/{trial['id']}/epochs"
    auth = {"Authorization": f"Bearer {token}"}
    replies = [httpx.post(url, json=epoch(n).to_json(), headers=auth) for n in (1, 2, 2)]
    assert [r.status_code for r in replies] == [201, 201, 200]
    assert replies[2].json() == {"trial_id": trial["id"], "epoch": 2, "stored": False}
    conflict = httpx.post(url, json=epoch(2, 0.9).to_json(), headers=auth)
    assert conflict.status_code == 409 and "epoch 2" in conflict.json()["detail"]
    assert conflict.json()["hint"]
    invalid = httpx.post(url, json={"epoch": 0, "metrics": {}}, headers=auth)
    assert invalid.status_code == 422
    nan = httpx.post(url, content=b'{"epoch": 3, "metrics": {"loss": NaN}, "epoch_time": 1}',
                     headers={**auth, "content-type": "application/json"})
    assert nan.status_code == 201
    other = owner.enqueue_trial(owner.study, POINT)
    foreign = httpx.post(f"{server.url}/api/v1/trials/{other['id']}/epochs",
                         json=epoch(1).to_json(), headers=auth)
    assert foreign.status_code == 403
    assert [e.epoch for e in owner.list_epochs(trial["id"])] == [1, 2, 3]
    text = httpx.get(f"{server.url}/metrics").text
    assert 'route="/api/v1/trials/{trial}/epochs",status="201"' in text


def test_should_stop_applies_the_studys_rule(server):
    """A median rule on the stored curves: the worst trial is told to stop, the best is not."""
    owner = ApiClient(server.url, retries=0)
    spec = {"search": {**SPEC["search"], "early_stopping": {"rule": "median", "min_epochs": 1}}}
    owner.create_study("stopping", spec)
    ids = [owner.enqueue_trial("stopping", POINT)["id"] for _ in range(4)]
    for tid, loss in zip(ids, (0.2, 0.3, 0.4, 0.9)):
        owner.post_epoch(tid, epoch(1, loss))
    worst, best = owner.should_stop(ids[3]), owner.should_stop(ids[0])
    assert worst[0] is True and "median" in worst[1]
    assert best[0] is False


def test_creation_token_guards_a_group_server(tmp_path):
    from gridml.server.embedded import EmbeddedServer

    with EmbeddedServer(f"sqlite:///{tmp_path / 'g.db'}", create_token="s3cret") as srv:
        with pytest.raises(StoreError, match="creation token"):
            ApiClient(srv.url, retries=0).create_study("guarded", SPEC)
        with pytest.raises(StoreError, match="creation token"):
            ApiClient(srv.url, token="wrong", retries=0).create_study("guarded", SPEC)
        creator = ApiClient(srv.url, token="s3cret", retries=0)
        study = creator.create_study("guarded", SPEC)
        assert study["token"].startswith("gms_") and creator.token == study["token"]
        assert creator.enqueue_trial("guarded", POINT)["number"] == 0
