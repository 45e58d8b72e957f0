"""The campaign loop with real parts and no training: SqlStore (SQLite), LocalStore, real searchers.

The executor is the real dry-run backend (it records what it was given and never runs anything);
trials are finished by hand the way the local executor reports them, so every branch of the loop
(propose, submit, retry, crash recovery, spool ingestion) is exercised in a second.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gridml.controller import Campaign
from gridml.data.local import LocalStore
from gridml.errors import SpecError
from gridml.executors.base import TaskStatus
from gridml.executors.dryrun import DryRunExecutor
from gridml.store import open_store
from gridml.spec import load_spec
from gridml.store import EpochReport
from tests.helpers import register_tiny_datasets, write_spec


@pytest.fixture
def world(tmp_path: Path) -> dict:
    data = LocalStore(tmp_path / "store")
    register_tiny_datasets(data, tmp_path, "user.t")
    spec = write_spec(tmp_path / "spec.yaml", "ctl", "user.t:train", "user.t:val")
    loaded = load_spec(spec, did_exists=data.exists)
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    return {"tmp": tmp_path, "data": data, "loaded": loaded, "store": store, "spec": spec}


def campaign(world: dict, executor: DryRunExecutor | None = None) -> Campaign:
    return Campaign(world["loaded"], world["store"], executor or DryRunExecutor(), world["data"],
                    world["tmp"] / "runs", api_url="http://127.0.0.1:9", poll_s=0)


def finish(world: dict, c: Campaign, number: int, val_loss: float | None, epochs: int = 2) -> None:
    """Play the payload: write the spool and the result as train_keras does."""
    out = world["tmp"] / "runs" / "ctl" / f"trial-{number:04d}" / "outputs"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "metrics.jsonl", "w") as fh:
        for e in range(1, epochs + 1):
            rep = EpochReport(e, {"loss": 1.0 / e, "val_loss": (val_loss or 0) + 1.0 / e - 1.0 / epochs},
                              epoch_time=0.5)
            fh.write(json.dumps(rep.to_json()) + "\n")
    (out / "result.json").write_text(json.dumps({"state": "completed", "epochs": epochs}))
    (out / "model.keras").write_bytes(b"model bytes")


def test_first_cycle_fills_the_parallel_slots_with_distinct_points(world: dict) -> None:
    ex = DryRunExecutor()
    c = campaign(world, ex)
    assert c.step() is False
    trials = world["store"].list_trials(c.study.id)
    assert [t.state for t in trials] == ["running", "running"]
    assert trials[0].hparams != trials[1].hparams
    doc = json.loads(Path(ex.rendered[0]["trial_file"]).read_text())
    assert doc["api"]["url"] == "http://127.0.0.1:9" and doc["api"]["token"]
    assert doc["data"]["train"][0].endswith("train.h5") and Path(doc["data"]["train"][0]).exists()
    assert doc["inputs"][0]["adler32"] and doc["seed"] > 0


def test_finished_trials_are_ingested_stored_and_the_budget_is_kept(world: dict) -> None:
    c = campaign(world)
    c.step()
    store = world["store"]
    for _ in range(2):
        for t in store.list_trials(c.study.id, states=("running",)):
            finish(world, c, t.number, val_loss=0.5 - 0.1 * t.number)
            c.finalize(t, TaskStatus("completed"))
        done = c.step()
    trials = store.list_trials(c.study.id)
    assert done is True and len(trials) == 4
    assert all(t.state == "completed" and t.epochs_done == 2 for t in trials)
    assert [round(t.objective, 6) for t in trials] == [0.5, 0.4, 0.3, 0.2]
    assert trials[3].outputs and world["data"].exists(trials[3].outputs[0]["did"])
    assert len({json.dumps(t.hparams, sort_keys=True) for t in trials}) == 4


def test_a_failed_trial_is_retried_once_then_recorded_with_its_error(world: dict) -> None:
    c = campaign(world)
    c.step()
    store = world["store"]
    t = store.list_trials(c.study.id)[0]
    c.finalize(t, TaskStatus("failed", "payload exited with code 1: OSError: bad file", "log"))
    assert store.get_trial(t.id).state == "queued"
    c.step()  # resubmitted, same hyperparameters, attempt 2
    t2 = store.get_trial(t.id)
    assert t2.state == "running" and t2.attempts == 2 and t2.hparams == t.hparams
    c.finalize(t2, TaskStatus("failed", "payload exited with code 1: OSError: bad file"))
    t3 = store.get_trial(t.id)
    assert t3.state == "failed" and "OSError: bad file" in t3.error


def test_spool_reports_are_ingested_once(world: dict) -> None:
    c = campaign(world)
    c.step()
    t = world["store"].list_trials(c.study.id)[0]
    finish(world, c, t.number, 0.3, epochs=3)
    spool = world["tmp"] / "runs" / "ctl" / f"trial-{t.number:04d}" / "outputs" / "metrics.jsonl"
    with open(spool, "a") as fh:
        fh.write('{"epoch": 4, "metr')  # a torn line from a killed payload
    assert c.ingest_spool(t, spool) == 3
    assert c.ingest_spool(t, spool) == 0
    assert [e.epoch for e in world["store"].list_epochs(t.id)] == [1, 2, 3]


def test_controller_crash_between_record_and_submit_resubmits_the_same_attempt(world: dict) -> None:
    class Crashing(DryRunExecutor):
        def submit(self, req):  # the controller dies right after recording the submission
            raise KeyboardInterrupt

    c = campaign(world, Crashing())
    with pytest.raises(KeyboardInterrupt):
        c.step()
    store = world["store"]
    t = store.list_trials(c.study.id)[0]
    assert t.state == "submitted" and t.external_id is None and t.attempts == 1
    ex = DryRunExecutor()
    c2 = campaign(world, ex)  # the restarted controller
    c2.step()
    again = store.get_trial(t.id)
    assert again.state == "running" and again.attempts == 1  # same attempt: no duplicate
    assert [r["trial"] for r in ex.rendered].count(t.number) == 1


def test_same_name_with_a_different_spec_is_refused(world: dict) -> None:
    campaign(world)
    spec: Path = world["spec"]
    spec.write_text(spec.read_text().replace("high: 32", "high: 40"))
    with pytest.raises(SpecError, match="already exists with a different spec"):
        campaign({**world, "loaded": load_spec(spec)})


def test_silence_is_judged_only_on_evidence(world: dict) -> None:
    """Issue 24, point 3: a restarted controller does not count its own downtime as a trial's
    silence; what the trial wrote is a sign of life; a trial whose training is over is finishing."""
    import os
    from datetime import timedelta

    from gridml.controller import now

    c = campaign(world)
    c.step()
    store = world["store"]
    t = store.list_trials(c.study.id)[0]
    long_ago = now() - timedelta(hours=2)
    t = store.update_trial(t.id, started=long_ago, last_heartbeat=long_ago)
    assert c._silent(t) is False  # just restarted: the trial could not report while it was down
    c._listening_since = long_ago  # this controller has listened for two hours: silent
    assert c._silent(t) is True
    out = world["tmp"] / "runs" / "ctl" / f"trial-{t.number:04d}" / "outputs"
    out.mkdir(parents=True, exist_ok=True)
    (out / "progress.txt").write_text("x")  # written just now: alive
    assert c._silent(t) is False
    os.utime(out / "progress.txt", (long_ago.timestamp(), long_ago.timestamp()))
    assert c._silent(t) is True
    finish(world, c, t.number, 0.3, epochs=2)  # every epoch spooled (training.epochs: 2)
    for p in out.iterdir():
        os.utime(p, (long_ago.timestamp(), long_ago.timestamp()))
    assert c._silent(t) is False  # training over: it is saving its model / draining its posts
    assert store.get_trial(t.id).epochs_done == 2  # and its spool was adopted


def test_the_cycle_is_the_executors_own_else_two_seconds(world: dict) -> None:
    """A local campaign cycles every 0.5 s (a finished trial's slot refilled at once); an executor
    naming no interval gets 2 s; an interval given by hand wins."""
    from gridml.controller import DEFAULT_POLL_S
    from gridml.executors.local import LocalExecutor

    args = (world["loaded"], world["store"])
    rest = (world["data"], world["tmp"] / "runs")
    assert Campaign(*args, LocalExecutor(), *rest).poll_s == LocalExecutor.poll_s == 0.5
    assert Campaign(*args, DryRunExecutor(), *rest).poll_s == DEFAULT_POLL_S == 2.0
    assert Campaign(*args, LocalExecutor(), *rest, poll_s=3.0).poll_s == 3.0


def test_a_requeued_job_is_not_judged_stalled_on_the_progress_of_its_run_before(
        world: dict) -> None:
    """A Slurm job that went back to the queue (a preemption with PreemptMode=REQUEUE,
    ``scontrol requeue``, a lost node) stays the same attempt; Slurm counts its restarts
    (``TaskStatus.restarts``, ``$SLURM_RESTART_COUNT`` in the job). Its time in the queue is no
    stall: running again, it is not judged on what its run before wrote; once the new run
    writes, the clock runs again. A job that is only pending after its submission is no requeue:
    its attempt hung before the controller's first look is judged."""
    import time

    spec = write_spec(world["tmp"] / "requeue.yaml", "ctl", "user.t:train", "user.t:val",
                      backend="backend: {executor: local, data: local, server: embedded, "
                              "stall_timeout: 1s}\n")

    class Requeued(DryRunExecutor):
        state, restarts = "submitted", 0  # pending after the submission, as on a busy cluster

        def poll(self, handle: str) -> TaskStatus:
            if handle in self._killed:
                return super().poll(handle)
            return TaskStatus(self.state, restarts=self.restarts)

    ex = Requeued()
    c = campaign({**world, "loaded": load_spec(spec, did_exists=world["data"].exists)}, ex)
    c.step()
    store = world["store"]
    t, other = store.list_trials(c.study.id)[:2]

    def progress(trial: Any, pid: int, epoch: int, restart: int) -> None:  # as rank 0 writes it
        path = c.paths.progress(trial.number)  # (payloads/runtime/channel.py)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(
            {"epoch": epoch, "batch": 4, "batches": 10, "total": 4, "epoch_done": False,
             "time": time.time(), "pid": pid, "attempt": 1, "restart": restart}))

    def follow(trial: Any = None) -> str:
        trial = trial or t
        time.sleep(0.15)  # the stall check reads the file at most every tenth of the timeout
        c._follow(store.get_trial(trial.id))
        return store.get_trial(trial.id).state

    assert follow() == "submitted" and follow(other) == "submitted"
    ex.state = "running"
    progress(other, 55, 1, 0)  # other's attempt started and hung before the controller looked
    progress(t, 101, 1, 0)
    assert follow() == "running" and follow(other) == "running"
    assert follow(other) == "running"  # first sight: its own attempt's progress, judged from now
    progress(t, 101, 2, 0)  # training
    assert follow() == "running"
    ex.state, ex.restarts = "submitted", 1  # t requeued: pending longer than the stall timeout
    assert follow() == "submitted"
    time.sleep(1.2)
    ex.state = "running"  # started again; the new run has not written yet
    assert follow() == "running"
    assert follow() == "running" and f"dryrun:{t.id}:1" not in ex._killed, \
        "the queue time was judged a stall"
    progress(t, 202, 2, 1)  # the new run trains (from its checkpoint), then hangs
    assert follow() == "running"
    time.sleep(1.2)
    assert c.live.stalled(store.get_trial(t.id), 1) == "stalled: no batch for 1 s"
    assert (c.live.stalled(store.get_trial(other.id), 0) or "").startswith("stalled: no batch")
