"""A trial whose objective goes NaN after epoch 1 ends ``diverged`` (issue 24, point 2): never
best, never on the front, told to the searcher as a failure, and `gridml fetch --best` never
returns its model, although its epoch 1 was the best value of the study."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from gridml.controller import Campaign
from gridml.data.local import LocalStore
from gridml.executors.base import TaskStatus
from gridml.executors.dryrun import DryRunExecutor
from gridml.search.study import observations
from gridml.spec import load_spec
from gridml.store import EpochReport, best_trial, open_store
from gridml.store.best import pareto_front
from tests.helpers import gridml, register_tiny_datasets, write_spec


def _play(home: Path, number: int, val_losses: list[float]) -> None:
    """The payload's outputs: the spool, result.json, a model whose bytes name the trial."""
    out = home / "runs" / "nan" / f"trial-{number:04d}" / "outputs"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "metrics.jsonl", "w") as fh:
        for e, v in enumerate(val_losses, 1):
            fh.write(json.dumps(EpochReport(e, {"loss": v, "val_loss": v}, 0.5).to_json()) + "\n")
    (out / "result.json").write_text(json.dumps({"state": "completed", "epochs": len(val_losses)}))
    (out / "model.keras").write_bytes(f"trial {number}".encode())


@pytest.fixture
def campaign(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Campaign:
    home = tmp_path / "home"
    monkeypatch.setenv("GRIDML_HOME", str(home))
    data = LocalStore(home / "store")
    register_tiny_datasets(data, tmp_path, "user.t")
    spec = write_spec(tmp_path / "spec.yaml", "nan", "user.t:train", "user.t:val")
    store = open_store(f"sqlite:///{home / 'gridml.db'}")
    return Campaign(load_spec(spec, did_exists=data.exists), store, DryRunExecutor(), data,
                    home / "runs", api_url="http://127.0.0.1:9", poll_s=0)


def test_a_trial_that_goes_nan_after_epoch_1_is_diverged_and_never_best(
        campaign: Campaign, tmp_path: Path) -> None:
    c, store = campaign, campaign.store
    home = tmp_path / "home"
    c.step()
    ok, bad = store.list_trials(c.study.id)
    _play(home, ok.number, [0.6, 0.5])
    _play(home, bad.number, [0.1, math.nan])  # epoch 1 the best of the study, then NaN
    c.finalize(ok, TaskStatus("completed"))
    c.finalize(bad, TaskStatus("completed"))
    ok, bad = store.get_trial(ok.id), store.get_trial(bad.id)
    assert ok.state == "completed" and ok.objective == pytest.approx(0.5)
    assert bad.state == "diverged" and bad.objective is None and "diverged" in bad.error
    assert bad.attempts == 1  # not retried: it ran to its end
    trials = store.list_trials(c.study.id)
    assert best_trial(c.study, trials).id == ok.id
    assert store.best_trial(c.study).id == ok.id
    assert [t.id for t in pareto_front(c.study, trials)] == [ok.id]
    # the searcher is told it as a failure (None), and the campaign goes on with new points
    told = [replace(t, state="failed") if t.state == "diverged" else t for t in trials]
    assert observations(told)[1] == [pytest.approx(0.5), None]
    assert c.step() is False
    assert len(store.list_trials(c.study.id)) == 4

    env = {"GRIDML_HOME": str(home)}
    proc = gridml("fetch", "nan", "--best", "-o", str(tmp_path / "best"), env=env)
    fetched = {p.name: p.read_bytes() for p in (tmp_path / "best").iterdir()}
    assert all(n.startswith(f"nan.trial-{ok.number:04d}.") for n in fetched), proc.stdout
    assert fetched[f"nan.trial-{ok.number:04d}.model.keras"] == f"trial {ok.number}".encode()
    doc = json.loads(gridml("status", "nan", "--json", env=env).stdout)
    assert [t["state"] for t in doc["trials"]][:2] == ["completed", "diverged"]
    assert doc["study"]["best"]["number"] == ok.number
    text = gridml("status", "nan", env=env).stdout + gridml("status", "nan", env=env).stderr
    assert "diverged" in text


def test_a_failed_run_with_a_nan_last_epoch_is_still_a_failure(campaign: Campaign,
                                                               tmp_path: Path) -> None:
    c, store = campaign, campaign.store
    c.step()
    t = store.list_trials(c.study.id)[0]
    _play(tmp_path / "home", t.number, [0.3, math.inf])
    c.finalize(t, TaskStatus("failed", "model file exited with code 3"))
    assert store.get_trial(t.id).state == "queued"  # a crash is retried (backend.retries)
