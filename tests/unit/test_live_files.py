"""The live channel's parts with a real SQLite store and real files: the spool read by byte offset
(torn line, restart, rewritten spool, idempotent), decisions written and read back, stalls
judged by progress.json's content."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gridml.layout import RunsLayout
from gridml.live import LiveChannel, SpoolReader, describe_progress
from gridml.store import Trial, open_store
from payloads.runtime import channel
from payloads.runtime.spool import Spool

SEARCH = {"objective": "val_loss", "direction": "minimize",
          "early_stopping": {"rule": "median", "min_epochs": 1, "min_trials": 1}}


def report(epoch: int, val_loss: float) -> dict:
    return {"epoch": epoch, "metrics": {"val_loss": val_loss}, "epoch_time": 1.0}


@pytest.fixture
def world(tmp_path: Path) -> dict:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    study = store.create_study("live", {"name": "live"}, "h")
    trials = [store.create_trial(study.id, {"x": i}, state="running") for i in range(2)]
    paths = RunsLayout(tmp_path / "runs").study("live")
    for t in trials:
        paths.trial_outputs(t.number).mkdir(parents=True)
    return {"store": store, "study": study, "trials": trials, "paths": paths}


def channel_of(world: dict, **kw: object) -> LiveChannel:
    return LiveChannel(world["store"], world["study"].id, world["paths"],
                       kw.pop("search", SEARCH), **kw)  # type: ignore[arg-type]


def spool_of(world: dict, t: Trial) -> Path:
    return world["paths"].trial_outputs(t.number) / "metrics.jsonl"


def test_offset_reader_leaves_a_torn_line_for_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": ')
    r = SpoolReader(path)
    assert r.read_new() == [b'{"a": 1}', b'{"b": 2}']
    assert r.read_new() == []  # nothing new: the torn line stays unread
    with open(path, "ab") as f:
        f.write(b'3}\n')
    assert r.read_new() == [b'{"c": 3}'] and r.offset == path.stat().st_size


def test_epochs_reach_the_store_once_and_a_restart_does_not_reread(world: dict) -> None:
    store, (a, b) = world["store"], world["trials"]
    Spool(spool_of(world, a)).append(report(1, 0.5))
    live = channel_of(world, search={"objective": "val_loss"})
    assert live.cycle([a, b]) == 1
    assert [e.epoch for e in store.list_epochs(a.id)] == [1]
    assert live.cycle([a, b]) == 0  # idle: nothing read
    Spool(spool_of(world, a)).append(report(2, 0.4))
    with open(spool_of(world, a), "a") as f:
        f.write('{"epoch": 3, "metr')  # a payload mid-write
    assert live.cycle([a, b]) == 1
    assert [e.epoch for e in store.list_epochs(a.id)] == [1, 2]
    # a restarted controller starts from the saved offsets
    again = channel_of(world, search={"objective": "val_loss"})
    assert again.cycle([a, b]) == 0
    # a resumed payload rewrites its spool (rename): read again from the start, idempotent
    Spool(spool_of(world, a)).truncate_after(2)
    assert again.cycle([a, b]) == 2
    assert [e.epoch for e in store.list_epochs(a.id)] == [1, 2]
    # the reports posted over HTTP too are the same epochs: no conflict, no duplicate
    live.readers.clear()
    live.cycle([a, b])
    assert [e.epoch for e in store.list_epochs(a.id)] == [1, 2]


def test_the_rule_decides_and_the_payload_reads_the_decision(world: dict) -> None:
    a, b = world["trials"]
    live = channel_of(world)
    live.cycle([a, b])  # no epoch yet: each trial gets "go on" at epoch 0
    trial_dir = world["paths"].trial(a.number)
    assert json.loads((trial_dir / channel.DECISION).read_text())["epoch"] == 0
    assert channel.read_decision(trial_dir, 1, wait_s=0.2) == (False, "no epoch yet")
    Spool(spool_of(world, b)).append(report(1, 0.2))
    Spool(spool_of(world, a)).append(report(1, 0.9))
    live.cycle([a, b])
    stop, reason = channel.read_decision(trial_dir, 1, wait_s=0)
    assert stop and "worse than median" in reason
    assert channel.read_decision(world["paths"].trial(b.number), 1, wait_s=0)[0] is False
    # without a decision.json (no controller answers through the folder) the payload goes on
    assert channel.read_decision(trial_dir.parent / "nowhere", 1) == (False, "")


def test_a_trial_is_told_before_its_job_starts_that_the_folder_answers(world: dict) -> None:
    a, b = world["trials"]
    live = channel_of(world)
    trial_dir = world["paths"].trial(a.number)
    # without early stopping no file: the payload never waits
    channel_of(world, search={"objective": "val_loss"}).announce(b)
    assert not (world["paths"].trial(b.number) / channel.DECISION).exists()
    live.announce(a)  # at submit, before any cycle: a payload quicker than the cycle still asks
    assert json.loads((trial_dir / channel.DECISION).read_text())["epoch"] == 0
    Spool(spool_of(world, b)).append(report(1, 0.2))
    Spool(spool_of(world, a)).append(report(1, 0.9))
    live.cycle([a, b])
    assert channel.read_decision(trial_dir, 1, wait_s=0)[0] is True
    # a retry keeps the decisions made: its payload resumes after them
    again = channel_of(world)
    again.announce(a)
    assert json.loads((trial_dir / channel.DECISION).read_text())["epoch"] == 1


def test_the_payload_waits_for_the_decision_on_its_epoch(tmp_path: Path) -> None:
    channel.write_decision(tmp_path, 1, False, "go on")
    t0 = time.monotonic()
    assert channel.read_decision(tmp_path, 2, wait_s=0.5) == (False, "go on")
    assert time.monotonic() - t0 >= 0.5  # waited for epoch 2's, in vain
    channel.write_decision(tmp_path, 2, True, "pruned")
    assert channel.read_decision(tmp_path, 2, wait_s=5) == (True, "pruned")


def test_a_trial_whose_batches_stop_is_stalled(world: dict) -> None:
    a, _ = world["trials"]
    live = channel_of(world, stall_timeout=1)
    progress = channel.Progress(world["paths"].trial(a.number), every_s=0)
    assert live.stalled(a) is None  # first sight: an earlier attempt's progress, not judged
    time.sleep(1.2)
    assert live.stalled(a) is None  # no progress yet at all: starting up, not judged
    progress.epoch_start(1, 266)
    for _ in range(120):
        progress.batch()
    assert live.stalled(a) is None
    assert describe_progress(live.progress(a.number)) == "epoch 1, batch 120/266"
    progress.batch()
    time.sleep(0.5)
    assert live.stalled(a) is None
    time.sleep(1.2)
    assert live.stalled(a) == "stalled: no batch for 1 s"
    progress.batch()  # moving again
    time.sleep(0.15)
    assert live.stalled(a) is None


def test_an_attempt_already_hung_when_first_seen_is_stalled_an_earlier_ones_progress_is_not(
        world: dict) -> None:
    """The controller may first look at a retried attempt after it hung (a busy submit host, a
    hang seconds after the restart): progress from another process than the attempt before
    starts the clock at that look; the earlier attempt's own progress (its pid) still waits
    for the new attempt's first write. Neither trial's progress moves after the retry."""
    store, (a, b) = world["store"], world["trials"]

    def progress(t: Trial, pid: int, epoch: int) -> None:  # as rank 0 writes it (channel.Progress)
        (world["paths"].trial(t.number) / channel.PROGRESS).write_text(json.dumps(
            {"epoch": epoch, "batch": 4, "batches": 10, "total": 4 + 10 * (epoch - 1),
             "epoch_done": False, "time": time.time(), "pid": pid}))

    live = channel_of(world, stall_timeout=1)
    for t in (a, b):  # attempt 1 of each, seen training
        progress(t, 101, 1)
        live.stalled(store.update_trial(t.id, attempts=1))
        time.sleep(0.15)
        progress(t, 101, 2)
        assert live.stalled(store.get_trial(t.id)) is None
    a = store.update_trial(a.id, attempts=2)  # both retried; a's new ranks hung in epoch 3
    b = store.update_trial(b.id, attempts=2)  # before the controller looked; b's not started
    progress(a, 202, 3)
    assert live.stalled(a) is None and live.stalled(b) is None  # first sight of attempt 2
    time.sleep(1.2)
    assert live.stalled(a) == "stalled: no batch for 1 s"
    assert live.stalled(b) is None  # attempt 1's progress: b's attempt 2 is not judged yet


def test_a_resumed_controller_judges_progress_that_names_the_current_attempt(
        world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """progress.json names its attempt ($GRIDML_ATTEMPT, set by the executor): a controller that
    first looks at a trial (restarted, nothing seen before) judges what the running attempt
    wrote, from that look, and leaves what an earlier attempt wrote until the next write."""
    store, (a, b) = world["store"], world["trials"]
    a = store.update_trial(a.id, attempts=2)  # attempt 2 hung while no controller ran
    b = store.update_trial(b.id, attempts=2)  # attempt 2 not started: attempt 1's file is there
    for t, attempt in ((a, "2"), (b, "1")):
        monkeypatch.setenv(channel.ATTEMPT_VAR, attempt)
        progress = channel.Progress(world["paths"].trial(t.number), every_s=0)
        progress.epoch_start(3, 10)
        progress.batch()
    assert json.loads(world["paths"].progress(a.number).read_text())["attempt"] == 2
    live = channel_of(world, stall_timeout=1)  # the restarted controller
    assert live.stalled(a) is None and live.stalled(b) is None  # first sight
    time.sleep(1.2)
    assert live.stalled(a) == "stalled: no batch for 1 s"
    assert live.stalled(b) is None
    monkeypatch.setenv(channel.ATTEMPT_VAR, "x")
    assert channel.attempt_number() is None  # not a number: not claimed
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")  # the job's third run (requeued twice)
    assert channel.Progress(world["paths"].trial(a.number)).restart == 2


def test_the_payload_and_the_controller_name_the_same_files(world: dict) -> None:
    paths = world["paths"]
    assert paths.progress(3).name == channel.PROGRESS
    assert paths.decision(3).name == channel.DECISION


def test_a_dump_request_makes_the_payload_write_its_stacks(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import time\nfrom payloads.runtime import channel\n"
            f"channel.watch_dump_requests({str(tmp_path)!r}, every_s=0.1)\n"
            "def stuck_in_forward():\n    time.sleep(3)\nstuck_in_forward()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    (tmp_path / channel.DUMP).write_text(json.dumps({"time": 1}))
    _, err = proc.communicate(timeout=30)
    assert "dump requested: stalled" in err and "in stuck_in_forward" in err, err
