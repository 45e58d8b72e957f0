"""The path a real site takes: jobs that have left the queue, requeues and preemption, on the
two-node test cluster with accounting (scripts/slurm-cluster.sh: slurmdbd on MariaDB, MinJobAge=5).

* A finished job that left ``squeue`` is judged from ``sacct`` (COMPLETED and FAILED), with the
  attempt's exit-code file removed so that only accounting can tell.
* ``gridml resume`` after the job of a killed controller ended and left the queue adopts the
  completed trial: no second job, no retry used.
* ``scontrol requeue`` of a running (requeueable) job is followed as the same attempt.
* PREEMPTED: a job of the "urgent" partition (PriorityTier 10, PreemptMode=REQUEUE) takes both
  nodes; a ``--no-requeue`` job ends PREEMPTED (lost to the infrastructure: resubmitted without
  using a retry), a requeueable one goes back to the queue and is followed as the same attempt.
* OUT_OF_MEMORY: the cluster holds each job to its ``--mem`` (task/cgroup on the cgroup v1 memory
  controller, ConstrainRAMSpace); a trial whose payload allocates 4 x its ``resources.memory_gb``
  is killed by the kernel's OOM killer, its job ends OUT_OF_MEMORY in ``sacct``, and the campaign
  fails it "ran out of memory" after using its retry. Skipped, saying why, where the cluster script
  found no writable v1 memory controller (it then runs task/none).

Most tests drive :class:`SlurmExecutor` directly with a trivial payload (the benchmark's
``payload_override``), so each job lasts seconds; the resume test runs the real CLI and payload.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gridml import controller as ctl
from gridml.executors.slurm import cli
from gridml.executors.slurm.executor import SlurmExecutor, job_id_of
from tests.helpers import (gridml_json, make_registered_sample_data, register_tiny_datasets,
                           start_gridml, wait_for, write_spec)
from tests.slurm.slurm_fixtures import SlurmCluster

pytestmark = [pytest.mark.service, pytest.mark.slow]

EPOCH = {"epoch": 1, "metrics": {"loss": 0.5, "val_loss": 0.5}, "epoch_time": 0.01}
SPOOL = f"mkdir -p ../outputs && echo '{json.dumps(EPOCH)}' > ../outputs/metrics.jsonl"


def payload(before: str = "", code: int = 0) -> list[str]:
    return ["bash", "-c", f"{before}{SPOOL}; exit {code}"]


class Harness:
    """A campaign whose trials run a trivial payload as real Slurm jobs."""

    def __init__(self, home: Path, name: str, argv: list[str], slurm: str = "", retries: int = 0) -> None:
        from gridml.data import open_data_manager
        from gridml.settings import settings
        from gridml.spec import load_spec
        from gridml.store.sql import open_sql_store

        home.mkdir(parents=True, exist_ok=True)
        self.data = open_data_manager("local")
        train, val = register_tiny_datasets(self.data, home, f"user.{name}")
        spec = write_spec(
            home / f"{name}.yaml", name, train, val,
            training="training: {epochs: 1, batch_size: 8, workers: 1}\n",
            resources="resources: {cores: 1, memory_gb: 0.1, walltime: 5m}\n",
            backend=f"backend: {{executor: slurm, data: local, server: embedded, retries: {retries}}}\n",
            search="search:\n  algorithm: random\n  max_trials: 1\n  parallel: 1\n"
                   "  space:\n    learning_rate: {type: real, low: 1.0e-4, high: 1.0e-1, log: true}\n",
            slurm=f"slurm: {{partition: gridml{slurm}}}\n")
        self.name = name
        self.loaded = load_spec(spec, did_exists=self.data.exists)
        self.store = open_sql_store(settings().db_url)
        self.journal = settings().runs_dir / ".journal" / "slurm"
        self.argv = argv
        self.executor = self.new_executor()
        self.campaign = ctl.Campaign(self.loaded, self.store, self.executor, self.data,
                                     settings().runs_dir, api_url=None, poll_s=0.5)
        self.trial = self.store.create_trial(self.campaign.study.id, {"learning_rate": 0.01})
        self.req = self.campaign.request_for(self.trial)
        self.run = self.req.workdir / f"attempt-{self.req.attempt}"

    def new_executor(self) -> SlurmExecutor:
        """A fresh executor on the same journal: a restarted controller."""
        return SlurmExecutor(journal=self.journal, payload_override=self.argv)

    def submit(self) -> str:
        handle = self.executor.submit(self.req)
        self.job = job_id_of(handle)
        return handle

    def journal_entry(self) -> dict[str, Any]:
        from gridml.executors.slurm import journal

        return journal.attempt(self.req.workdir, self.req.attempt)

    def close(self) -> None:
        cli.cancel(self.job) if getattr(self, "job", None) else None
        self.store.close()


@pytest.fixture
def harness(gridml_home: Path, slurm_env: SlurmCluster) -> Iterator[Any]:
    made: list[Harness] = []

    def make(argv: list[str], slurm: str = "", retries: int = 0) -> Harness:
        h = Harness(gridml_home / f"h{len(made)}", f"acct-{len(made)}-{uuid.uuid4().hex[:6]}", argv,
                    slurm, retries)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def state(job: str) -> str:
    info = cli.queue([job]).get(job)
    return info.state if info else "GONE"


def wait_gone(job: str, timeout: float = 120) -> None:
    """Until squeue no longer shows the job (MinJobAge) and sacct has its end."""
    wait_for(lambda: job not in cli.queue([job]), timeout, f"job {job} to leave squeue", interval=0.5)
    wait_for(lambda: (info := cli.accounting(job)) is not None and info.state not in ("RUNNING", "PENDING"),
             30, f"sacct to know how job {job} ended", interval=0.5)


@pytest.mark.parametrize("code", [0, 3])
def test_a_job_that_left_the_queue_is_judged_from_sacct(harness: Any, code: int) -> None:
    h = harness(payload(code=code))
    handle = h.submit()
    wait_gone(h.job)
    (h.run / "exit_code").unlink(missing_ok=True)  # only accounting can tell now
    status = h.new_executor().poll(handle)  # a restarted controller: journal, squeue, sacct
    info = cli.accounting(h.job)
    assert info is not None
    if code == 0:
        assert info.state == "COMPLETED" and info.exit_code == "0:0"
        assert status.state == "completed" and f"Slurm job {h.job} COMPLETED" in status.message
    else:
        assert info.state == "FAILED" and info.exit_code == "3:0"
        assert status.state == "failed" and not status.infrastructure
        assert f"Slurm job {h.job} FAILED" in status.message, status.message
    assert "keeps no accounting" not in status.message


def poll_until(executor: SlurmExecutor, handle: str, states: tuple[str, ...], seen: list[str],
               timeout: float = 180) -> Any:
    """Poll as the controller does until the trial is in one of ``states``; ``seen``: every
    state on the way."""
    def over() -> Any:
        status = executor.poll(handle)
        seen.append(status.state)
        return status if status.state in states else None

    return wait_for(over, timeout, lambda: f"{handle} in {states}: {seen[-5:]}", interval=0.5)


def _scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True, timeout=60)


def _start_now(job: str) -> None:
    """A requeued job waits 120 s (Slurm's requeue delay) before it may start: not in a test."""
    wait_for(lambda: state(job) == "PENDING", 60, f"job {job} pending again", interval=0.2)
    _scontrol("update", f"jobid={job}", "StartTime=now")


def test_scontrol_requeue_is_followed_as_the_same_attempt(harness: Any) -> None:
    # 10 s a run: the requeue comes the moment the job is seen running (polled every 0.5 s)
    h = harness(payload(before="sleep 10; "), slurm=", options: {requeue: true}")
    handle = h.submit()
    wait_for(lambda: h.executor.poll(handle).state == "running", 120, "the job running", interval=0.5)
    _scontrol("requeue", h.job)
    _start_now(h.job)
    seen: list[str] = []
    status = poll_until(h.executor, handle, ("completed", "failed", "killed"), seen)
    assert status.state == "completed", status
    assert "failed" not in seen and "killed" not in seen, seen
    entry = h.journal_entry()
    assert entry["job_id"] == h.job and entry.get("restarts") == 1 and not entry.get("killed"), entry
    # the trial is judged from its exit file; the job's own end reaches accounting a moment later
    info = wait_for(lambda: (i := cli.accounting(h.job)) is not None and i.state != "RUNNING" and i,
                    60, f"job {h.job} ended in accounting", interval=0.5)
    assert info.state == "COMPLETED", info


def _preempt() -> str:
    """A job of the urgent partition on both nodes, every core: it preempts what runs there."""
    cores = os.cpu_count() or 1
    out = subprocess.run(["sbatch", "--parsable", "-p", "urgent", "-N2", "-c", str(cores),
                          "--wrap", "sleep 3", "-o", "/dev/null"], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    return out.strip().split(";")[0]


def test_a_preempted_job_is_lost_to_the_infrastructure(harness: Any) -> None:
    h = harness(payload(before="sleep 120; "))
    handle = h.submit()
    wait_for(lambda: h.executor.poll(handle).state == "running", 120, "the job running", interval=0.5)
    _preempt()
    status = poll_until(h.executor, handle, ("completed", "failed", "killed", "submitted"), [])
    assert status.state == "failed" and status.infrastructure, status
    assert f"Slurm job {h.job} PREEMPTED" in status.message and "without using a retry" in status.message
    wait_gone(h.job)  # the same verdict from accounting
    status = h.new_executor().poll(handle)
    assert status.state == "failed" and status.infrastructure and "PREEMPTED" in status.message


def test_a_preempted_requeueable_job_is_followed_as_the_same_attempt(harness: Any) -> None:
    h = harness(payload(before="sleep 15; "), slurm=", options: {requeue: true}")
    handle = h.submit()
    wait_for(lambda: h.executor.poll(handle).state == "running", 120, "the job running", interval=0.5)
    urgent = _preempt()
    _start_now(h.job)
    seen: list[str] = []
    status = poll_until(h.executor, handle, ("completed", "failed", "killed"), seen)
    assert status.state == "completed" and "failed" not in seen, (status, seen)
    assert h.journal_entry().get("restarts") == 1
    assert cli.accounting(urgent) is not None


# -- OUT_OF_MEMORY: the job's cgroup memory limit ----------------------------------------------------
HOG_MB = 400  # 4 x the trial's --mem=102M (resources.memory_gb: 0.1), written so it is resident
HOG = ["python3", "-c", f"b = b'x' * ({HOG_MB} << 20); print('still', 'alive')"]


def test_a_trial_over_its_memory_ends_out_of_memory_and_uses_its_retry(harness: Any,
                                                                       slurm_env: SlurmCluster) -> None:
    if "TaskPlugin=task/cgroup" not in slurm_env.conf.read_text():
        pytest.skip("the test cluster sets no memory limit here: scripts/slurm-cluster.sh found no "
                    "writable cgroup v1 memory controller at /sys/fs/cgroup/memory (task/none)")
    h = harness(HOG, retries=1)
    trials = lambda: h.store.list_trials(h.campaign.study.id)  # noqa: E731
    t0 = time.perf_counter()
    wait_for(h.campaign.step, 120, lambda: f"the campaign to end: {[(t.state, t.attempts) for t in trials()]}",
             interval=0.3)
    seconds = time.perf_counter() - t0
    (trial,) = trials()
    assert trial.state == "failed" and trial.attempts == 2, trial  # its one retry used, then failed
    assert "OUT_OF_MEMORY" in (trial.error or "") and \
        "it ran out of memory (raise resources.memory_gb)" in (trial.error or ""), trial.error
    assert "still alive" not in (trial.error or "")
    jobs = slurm_env.jobs_named(f"gridml.{h.name}.trial-0000")
    assert len(jobs) == 2, jobs
    for job in jobs:
        info = wait_for(lambda j=job: (i := cli.accounting(j)) is not None
                        and i.state not in ("RUNNING", "PENDING", "COMPLETING") and i, 30,
                        f"sacct to know how job {job} ended", interval=0.5)
        assert info.state == "OUT_OF_MEMORY", info
    print(f"\n[slurm] 2 attempts over --mem=102M, both OUT_OF_MEMORY, in {seconds:.1f} s")


# -- the real CLI: resume after the job left the queue ---------------------------------------------
ONE_NODE = dict(
    training="training: {epochs: 1, batch_size: 64, workers: 1, metrics: [accuracy]}\n",
    resources="resources: {cores: 1, memory_gb: 1, walltime: 20m}\n",
    backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n",
    search="search:\n  algorithm: random\n  max_trials: 1\n  parallel: 1\n  seed: 3\n  space:\n"
           "    learning_rate: {type: real, low: 1.0e-3, high: 3.0e-2, log: true}\n")


def test_resume_after_the_job_left_the_queue_adopts_the_completed_trial(
        tmp_path: Path, gridml_home: Path, slurm_env: SlurmCluster) -> None:
    train, val = make_registered_sample_data(tmp_path, n_train=600, n_val=200, files=1)
    spec = write_spec(tmp_path / "acct-resume.yaml", "acct-resume", train, val,
                      slurm=f"slurm: {{partition: {slurm_env.partition}}}\n", **ONE_NODE)
    proc = start_gridml("submit", str(spec), "--quiet")
    try:
        jobs = wait_for(lambda: slurm_env.jobs_named("gridml.acct-resume.trial-0000") or None, 120,
                        "the trial's job", interval=0.5)
        proc.send_signal(signal.SIGKILL)  # the controller dies; the job goes on
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    job = jobs[0]
    wait_for(lambda: state(job) == "GONE", 600, f"job {job} to end and leave squeue", interval=1)
    info = wait_for(lambda: (i := cli.accounting(job)) is not None
                    and i.state not in ("RUNNING", "PENDING") and i, 30,
                    f"sacct to know how job {job} ended", interval=0.5)
    assert info.state == "COMPLETED", info
    t0 = time.time()
    out = start_gridml("resume", "acct-resume", "--quiet")
    stdout, stderr = out.communicate(timeout=600)
    assert out.returncode == 0, (stdout, stderr)
    trial = gridml_json("status", "acct-resume")["trials"][0]
    assert trial["state"] == "completed" and trial["attempts"] == 1, trial
    assert trial["epochs_done"] == 1, trial
    assert slurm_env.jobs_named("gridml.acct-resume.trial-0000") == [job]  # no second job
    print(f"\n[slurm] resume adopted job {job} (from sacct) in {time.time() - t0:.1f} s")
