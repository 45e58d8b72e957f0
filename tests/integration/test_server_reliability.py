"""No lost reports: `gridml serve` killed with SIGKILL during a real campaign, then restarted.

The controller (gridml.controller.Campaign, local executor, real torchrun payloads of a one-layer
model whose training steps pause 30 ms: epochs of ~1 s, so the server dies while trials train,
at torch's start cost, half TensorFlow's; the spool and the retries are the payloads' shared
runtime, whatever the framework) runs in this process on the same database as a separate
`gridml serve` the payloads post to. The server
is killed twice mid-campaign; payloads spool and retry, the controller ingests spools, and at
the end every epoch of every trial is in the store exactly once. SQLite and PostgreSQL.
A hung trial (its processes frozen with SIGSTOP; a torch payload) is failed after the
heartbeat timeout and retried.
"""

from __future__ import annotations

import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gridml.server.process import ServerProcess
from tests.conftest import database

pytestmark = [pytest.mark.service, pytest.mark.slow, pytest.mark.e2e]

TRAINING = "training: {epochs: 3, batch_size: 64, metrics: [accuracy], workers: 1}\n"
RESOURCES = "resources: {cores: 1, gpus: 0, memory_gb: 2, walltime: 20m}\n"


def search(trials: int) -> str:
    return textwrap.dedent(f"""\
        search:
          algorithm: random
          objective: val_loss
          max_trials: {trials}
          parallel: {min(trials, 2)}
          seed: 11
          space:
            learning_rate: {{type: real, low: 1.0e-3, high: 3.0e-2, log: true}}
            units: {{type: int, low: 8, high: 24}}
        """)


@pytest.fixture
def db_url(request, tmp_path, monkeypatch):
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    with database(request.param, request.getfixturevalue("pg_server"),
                  tmp_path / "home" / "gridml.db") as url:
        yield url


def campaign(tmp_path, db_url: str, api_url: str, trials: int, backend: str = "",
             grace_s: float = 10.0):
    """A Campaign of the lead's controller on ``db_url`` whose payloads post to ``api_url``
    (the slow one-layer torch model of tests/helpers.py slow_torch_payload)."""
    from gridml import executors
    from gridml.controller import Campaign
    from gridml.data import open_data_manager
    from gridml.store import open_store
    from gridml.settings import settings
    from gridml.spec import load_spec
    from tests.helpers import make_registered_sample_data, slow_torch_payload, write_spec

    train, val = make_registered_sample_data(tmp_path, n_train=2000, n_val=400)
    extra = {"backend": backend} if backend else {}
    extra["payload"] = slow_torch_payload(tmp_path)
    spec = write_spec(tmp_path / "spec.yaml", "reliable", train, val, training=TRAINING,
                      search=search(trials), resources=RESOURCES, **extra)
    data = open_data_manager("local")
    loaded = load_spec(spec, did_exists=data.exists)
    store = open_store(db_url)
    return Campaign(loaded, store, executors.create("local", grace_s=grace_s), data,
                    settings().runs_dir,
                    api_url=api_url, poll_s=0.5), store


def _kill_twice(server: ServerProcess, store, study_id: int, done: threading.Event) -> None:
    """SIGKILL the server once the first epochs are in, and again a little later."""
    for target in (1, 4):
        while not done.is_set() and sum(t.epochs_done for t in store.list_trials(study_id)) < target:
            time.sleep(0.5)
        if done.is_set():
            return
        server.kill()
        time.sleep(4)  # payloads meet a dead server: retries, then the spool
        server.start()


@pytest.mark.parametrize("db_url", ["sqlite", "postgresql"], indirect=True)
def test_server_killed_mid_campaign_loses_no_report(tmp_path, db_url, needs_torch):
    server = ServerProcess(db_url, log=tmp_path / "serve.log").start()
    # 2 trials at once, 3 epochs each: the kills come at the 1st and the 4th epoch in, both while
    # the trials train (the last epochs meet the second, 4-s outage); 4 trials ran 2 more
    # payloads (~9 s of CPU each) through the same two outages
    camp, store = campaign(tmp_path, db_url, server.url, trials=2)
    done = threading.Event()
    killer = threading.Thread(target=_kill_twice, args=(server, store, camp.study.id, done))
    killer.start()
    try:
        camp.run()
    finally:
        done.set()
        killer.join()
        server.stop()
    trials = store.list_trials(camp.study.id)
    assert [t.state for t in trials] == ["completed"] * 2, [t.error for t in trials]
    for trial in trials:
        assert [e.epoch for e in store.list_epochs(trial.id)] == [1, 2, 3]
        assert trial.epochs_done == 3 and trial.objective is not None
    assert (tmp_path / "serve.log").read_text().count("gridml server on") == 3  # killed twice


def trial_processes(workdir: str) -> list[int]:
    """Live processes of one trial: their command line names its directory (trial.json)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if workdir in cmd:
                pids.append(int(entry))
    return pids


def _freeze_first_running(store, study_id: int, done: threading.Event, frozen: list) -> None:
    """SIGSTOP every process of the trial once it has reported an epoch: a hung node."""
    while not done.is_set():
        for trial in store.list_trials(study_id):
            if trial.epochs_done >= 1 and trial.state == "running" and trial.external_id:
                workdir = os.path.dirname(trial.external_id.rstrip("/"))
                pids = trial_processes(workdir)
                for pid in pids:
                    os.kill(pid, signal.SIGSTOP)
                frozen.append((trial.id, pids))
                return
        time.sleep(0.3)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_hung_trial_fails_after_heartbeat_timeout_and_is_retried(tmp_path, db_url, needs_torch):
    # the torch payload (the heartbeat is the controller's, whatever the framework): it starts in
    # seconds where TensorFlow took ~20 s on a busy machine, so 45 s of silence (a beat every 15 s,
    # planner) is a hang, not a slow start (75 s with TF); the frozen processes take no SIGTERM:
    # the kill's grace is short
    # epochs of about a second (32 batches of 64 rows): the trial is still training when the
    # freezer sees its first epoch
    backend = "backend: {executor: local, data: local, server: embedded, heartbeat_timeout: 45, " \
              "retries: 1}\n"
    with ServerProcess(db_url, log=tmp_path / "serve.log") as server:
        camp, store = campaign(tmp_path, db_url, server.url, trials=1, backend=backend,
                               grace_s=2.0)
        done, frozen = threading.Event(), []
        freezer = threading.Thread(target=_freeze_first_running,
                                   args=(store, camp.study.id, done, frozen))
        freezer.start()
        try:
            camp.run()
        finally:
            done.set()
            freezer.join()
            for _, pids in frozen:
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
    (trial,) = store.list_trials(camp.study.id)
    assert frozen and frozen[0][0] == trial.id
    assert trial.attempts == 2 and trial.state == "completed", trial.error
    assert [e.epoch for e in store.list_epochs(trial.id)] == [1, 2, 3]
