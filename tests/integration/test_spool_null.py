"""A diverged epoch (a NaN metric, written as null) reaches the store the same way by both paths:
posted live by the payload's reporter to the real metrics API (uvicorn on loopback, SQLite), and
written only to the spool (a worker node without network) and ingested by the controller.

Before the report was defined once (payloads/runtime/report.py), the spooled `null` was taken
for a torn line and the epoch was lost.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

from gridml.controller import Campaign
from gridml.data.local import LocalStore
from gridml.executors.dryrun import DryRunExecutor
from gridml.spec import load_spec
from gridml.store import EpochReport, open_store
from payloads.runtime import profile
from payloads.runtime.core import build_report
from payloads.runtime.reporter import HttpApi, Reporter
from payloads.runtime.spool import Spool
from tests.helpers import register_tiny_datasets, write_spec

pytestmark = pytest.mark.service


def _reports() -> list[dict]:
    """Epoch 1 fine, epoch 2 diverged (NaN loss, inf val_loss), as rank 0 builds them."""
    prof = profile.combine([profile.rank_profile(2.0, 1.5, 0.1, 0, 1.0)], 640)
    costs = {"n_params": 321.0, "model_mb": 0.01}
    return [build_report(e, logs, prof, {"cache": {"hit_rate": 1.0}}, costs).to_json()
            for e, logs in ((1, {"loss": 0.7, "val_loss": 0.71}),
                            (2, {"loss": float("nan"), "val_loss": float("inf")}))]


@pytest.fixture
def world(tmp_path: Path):
    from gridml.server.embedded import EmbeddedServer

    data = LocalStore(tmp_path / "store")
    register_tiny_datasets(data, tmp_path, "user.t")
    spec = write_spec(tmp_path / "spec.yaml", "nulls", "user.t:train", "user.t:val")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    store = open_store(url)
    with EmbeddedServer(url) as server:
        campaign = Campaign(load_spec(spec, did_exists=data.exists), store, DryRunExecutor(),
                            data, tmp_path / "runs", api_url=server.url, poll_s=0)
        yield campaign, store, server
    store.close()


def test_diverged_epoch_from_the_spool_is_stored_as_when_posted_live(world, tmp_path, caplog):
    campaign, store, server = world
    live = store.create_trial(campaign.study.id, {"units": 8}, state="running")
    offline = store.create_trial(campaign.study.id, {"units": 9}, state="running")
    reports = _reports()
    assert reports[1]["metrics"]["loss"] is None and reports[1]["metrics"]["val_loss"] is None
    assert reports[1]["metrics"]["n_params"] == 321.0

    # live: the payload's reporter spools, then posts to the API with the trial token
    api = HttpApi(server.url, store.issue_trial_token(live.id), live.id, retries=2, backoff=0.05)
    reporter = Reporter(Spool(tmp_path / "live" / "metrics.jsonl"), api, heartbeat_s=60)
    for r in reports:
        reporter.report(r)
    reporter.close()
    assert reporter.posted == [1, 2] and reporter.failed == []

    # offline: no API; the controller ingests the spool (its torn last line is skipped)
    offline_spool = Spool(tmp_path / "offline" / "metrics.jsonl")
    for r in reports:
        Reporter(offline_spool, None).report(r)
    with open(offline_spool.path, "a") as fh:
        fh.write('{"epoch": 3, "metr')
    with caplog.at_level(logging.WARNING, logger="gridml"):
        assert campaign.ingest_spool(offline, offline_spool.path) == 2
        # and the live trial's own spool adds nothing and differs in nothing from what it posted
        assert campaign.ingest_spool(live, reporter.spool.path) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text

    by_live, by_spool = store.list_epochs(live.id), store.list_epochs(offline.id)
    assert [e.epoch for e in by_spool] == [1, 2]
    assert [e.to_json() for e in by_spool] == [e.to_json() for e in by_live]
    assert math.isnan(by_spool[1].metrics["loss"]) and math.isnan(by_spool[1].metrics["val_loss"])
    assert by_spool[1].to_json() == reports[1]  # what the payload wrote, null for null
    bodies = store.study_epochs(campaign.study.id, as_json=True)
    assert json.dumps(bodies[offline.id], sort_keys=True) == json.dumps(bodies[live.id],
                                                                         sort_keys=True)
    assert store.get_trial(offline.id).epochs_done == store.get_trial(live.id).epochs_done == 2


def test_a_broken_line_before_the_last_is_skipped_loudly(world, tmp_path, caplog):
    campaign, store, _ = world
    trial = store.create_trial(campaign.study.id, {"units": 8}, state="running")
    first, second = _reports()
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join([json.dumps(first), '{"epoch": 9, "metrics": 3}',
                               json.dumps(second)]) + "\n")
    with caplog.at_level(logging.WARNING, logger="gridml"):
        assert campaign.ingest_spool(trial, path) == 2
    assert "line 2" in caplog.text and "not an epoch report" in caplog.text
    assert [e.epoch for e in store.list_epochs(trial.id)] == [1, 2]


def test_the_store_and_the_payload_share_one_report_type() -> None:
    from payloads.runtime import report

    assert EpochReport is report.EpochReport
