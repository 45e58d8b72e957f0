"""The Executor contract, one suite over every backend: local (real processes), dryrun, PanDA
(the real panda-client against the PanDA wire double) and Slurm (the real two-node cluster of
scripts/slurm-cluster.sh). A new backend joins by adding itself to ``BACKENDS``.

What every executor promises the controller:
- ``submit`` is idempotent per attempt: the same request again, from the same executor or from a
  fresh one (a restarted controller), gives the same handle and starts nothing new;
- ``poll`` reports a live state after submit, and a fresh executor (after a restart) reports the
  same for the old handle, from its own journal;
- after ``kill`` the task is never reported running again, and the trial's next attempt gets a
  new task: it never follows the killed one, even while the backend is still acting on the kill;
- a task that runs to its end is reported ``completed`` (local here; PanDA in tests/e2e).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gridml import executors
from gridml.controller import Campaign, _write_private
from gridml.data import open_data_manager
from gridml.settings import settings
from gridml.spec import load_spec
from gridml.store import Trial, open_store
from tests.helpers import register_tiny_datasets, wait_for, write_spec

pytestmark = [pytest.mark.service]

BACKENDS = ("local", "dryrun", "panda", "slurm")
LIVE = ("submitted", "running")
OVER = ("completed", "failed", "killed")


@dataclass
class Backend:
    name: str
    campaign: Campaign
    trial: Trial
    executor: Any
    started: Callable[[], int | None]  # tasks/processes started so far (None: cannot tell)
    panda: Any = None

    def fresh(self) -> Any:
        """A new executor, as a restarted controller creates it."""
        return _create(self.name, self.campaign.data)

    def request(self, attempt: int) -> Any:
        """The trial's request for ``attempt``, its trial file written, as the controller does."""
        store = self.campaign.store
        self.trial = store.update_trial(self.trial.id, attempts=attempt, state="submitted")
        req = self.campaign.request_for(self.trial)
        _write_private(req.trial_file, req.trial.dumps())
        return req


def _create(name: str, data: Any) -> Any:
    if name == "dryrun":
        return executors.create("local", data=data, dry_run=True)
    return executors.create(name, data=data, journal=settings().runs_dir / ".journal" / name)


def _wait(executor: Any, handle: str, states: tuple[str, ...], timeout_s: float = 120) -> Any:
    """The task's status once it is in one of ``states`` (fails after ``timeout_s``)."""
    last: list[Any] = []

    def reached() -> bool:
        last[:] = [executor.poll(handle)]
        return last[0].state in states

    wait_for(reached, timeout_s, lambda: f"{handle} in {states}: last {last}", interval=0.3)
    return last[0]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path, gridml_home: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    name = request.param
    cluster = request.getfixturevalue("slurm_env") if name == "slurm" else None
    data = open_data_manager("local")
    train, val = register_tiny_datasets(data, tmp_path, "user.test", rows=64)
    executor_name = "local" if name == "dryrun" else name
    spec = write_spec(
        tmp_path / "spec.yaml", f"contract-{name}", train, val,
        training="training: {epochs: 1, batch_size: 16, workers: 1}\n",
        backend=f"backend: {{executor: {executor_name}, data: local, server: embedded}}\n",
        resources="resources: {cores: 1, gpus: 0, memory_gb: 2, walltime: 20m}\n",
        **({"slurm": f"slurm: {{partition: {cluster.partition}}}\n"} if cluster else {}))
    loaded = load_spec(spec, did_exists=data.exists)
    store = open_store(settings().db_url)
    double = None
    if name == "panda":
        from tests.panda_double import PandaDouble

        double = PandaDouble(tmp_path / "panda").__enter__()
        for key, value in double.client_env().items():
            monkeypatch.setenv(key, value)
        double.jedi.hold = True  # tasks wait in "ready": no job runs
        double.jedi.command_delay_s = 3600  # JEDI acts on a kill much later, as on a busy server
    executor = _create(name, data)
    campaign = Campaign(loaded, store, executor, data, settings().runs_dir, api_url=None)
    trial = store.create_trial(campaign.study.id, {"learning_rate": 0.01, "units": 8,
                                                   "dropout": 0.0, "activation": "relu"})
    # the cluster lives for the whole session: count only this test's jobs
    job_name = f"gridml.contract-slurm.trial-{trial.number:04d}"
    before = set(cluster.jobs_named(job_name)) if cluster else set()
    counters: dict[str, Callable[[], int | None]] = {
        "local": lambda: len(list((settings().runs_dir).rglob("attempt-*/pid"))),
        "dryrun": lambda: None,
        "panda": lambda: len(double.jedi.tasks) if double else None,
        "slurm": lambda: len(set(cluster.jobs_named(job_name)) - before) if cluster else None,
    }
    be = Backend(name, campaign, trial, executor, counters[name], double)
    try:
        yield be
    finally:
        for ex in (be.executor,):
            for handle in getattr(ex, "_children", {}):
                ex.kill(handle)
        if double is not None:
            double.__exit__(None, None, None)
        if cluster is not None:  # nothing of this test left queued or running
            cluster.cancel(*(set(cluster.jobs_named(job_name)) - before))


def test_submit_is_idempotent_per_attempt(backend: Backend) -> None:
    req = backend.request(attempt=1)
    handle = backend.executor.submit(req)
    assert backend.executor.submit(req) == handle
    assert backend.fresh().submit(req) == handle  # a controller restarted right after submit
    assert backend.started() in (1, None)
    backend.executor.kill(handle)


def test_poll_reports_a_live_state_also_after_a_restart(backend: Backend) -> None:
    handle = backend.executor.submit(backend.request(attempt=1))
    assert backend.executor.poll(handle).state in LIVE
    assert backend.fresh().poll(handle).state in LIVE  # from the fresh executor's own journal
    backend.executor.kill(handle)


def test_after_kill_the_next_attempt_gets_a_new_task(backend: Backend) -> None:
    """Ctrl-C, then `gridml resume`: the killed task is never followed again, even while the
    backend has not acted on the kill yet (PanDA: the task is still "ready" for a while)."""
    first = backend.executor.submit(backend.request(attempt=1))
    backend.executor.kill(first)
    if backend.name == "panda":  # the kill is registered; JEDI acts on it much later (an hour)
        assert backend.executor.poll(first).state in (*LIVE, *OVER)
    else:
        assert _wait(backend.executor, first, OVER, timeout_s=30).state in OVER
    resumed = backend.fresh()
    second = resumed.submit(backend.request(attempt=2))
    assert second != first
    assert backend.started() in (2, None)
    assert resumed.poll(second).state in LIVE
    resumed.kill(second)


# A whole trial on every backend that runs one here (a dry run runs nothing; PanDA's whole trials
# run through the double in tests/e2e/test_panda_campaign.py).
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "slurm"], indirect=True)
def test_a_task_runs_to_completion_and_a_fresh_executor_sees_it(backend: Backend) -> None:
    handle = backend.executor.submit(backend.request(attempt=1))
    status = _wait(backend.executor, handle, OVER, timeout_s=600)
    assert status.state == "completed", status
    assert backend.fresh().poll(handle).state == "completed"
    outputs = backend.campaign.request_for(backend.trial).trial.output_dir
    assert (outputs / "result.json").is_file() and (outputs / "model_source.py").is_file()
