"""Packed allocations, job arrays and a lost node on the real two-node test cluster.

* ``slurm.pack: 2``: 4 one-core trials run as job steps of shared allocations (sbatch once per 2
  trials at most); the controller dies while two steps run and a new one adopts them (no step
  twice, no retry used), then starts the queued trials in the freed slots; allocations end.
* A packed step warned (USR1, as ``srun --signal`` sends it) checkpoints, exits 75 and is
  continued as a new step (no retry used).
* ``slurm.array: true`` + ``array_throttle: 2``: a cycle's 3 trials as one job array (one sbatch).
* A running two-node job and an array task whose node is lost (slurmd killed): judged lost from
  Slurm's node state (NOT_RESPONDING) before Slurm's own NODE_FAIL, cancelled, no retry used.

The trials run the benchmark's trivial payload (``payload_override``): seconds per trial.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gridml import controller as ctl
from gridml.executors.slurm import cli
from gridml.executors.slurm.executor import SlurmExecutor
from tests.helpers import register_tiny_datasets, wait_for, write_spec
from tests.slurm.slurm_fixtures import SlurmCluster

pytestmark = [pytest.mark.service, pytest.mark.slow]

EPOCH = {"epoch": 1, "metrics": {"loss": 0.5, "val_loss": 0.5}, "epoch_time": 0.01}


def payload(seconds: float) -> list[str]:
    return ["bash", "-c", f"sleep {seconds}; mkdir -p ../outputs && "
                          f"echo '{json.dumps(EPOCH)}' > ../outputs/metrics.jsonl"]


class Run:
    """A campaign whose trials run a trivial payload; ``restart()``: a controller that died and
    a new one on the same store and journals."""

    def __init__(self, home: Path, slurm: str, trials: int, parallel: int, argv: list[str],
                 resources: str = "{cores: 1, memory_gb: 0.1, walltime: 5m}",
                 training: str = "{epochs: 1, batch_size: 8, workers: 1}") -> None:
        from gridml.data import open_data_manager
        from gridml.settings import settings
        from gridml.spec import load_spec
        from gridml.store.sql import open_sql_store

        self.name = f"pk-{uuid.uuid4().hex[:6]}"
        home.mkdir(parents=True, exist_ok=True)
        self.data = open_data_manager("local")
        train, val = register_tiny_datasets(self.data, home, f"user.{self.name}")
        spec = write_spec(
            home / f"{self.name}.yaml", self.name, train, val,
            training=f"training: {training}\n", resources=f"resources: {resources}\n",
            backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n",
            search=f"search:\n  algorithm: random\n  max_trials: {trials}\n  parallel: {parallel}\n"
                   "  space:\n    learning_rate: {type: real, low: 1.0e-4, high: 1.0e-1, log: true}\n",
            slurm=f"slurm: {{partition: gridml{slurm}}}\n")
        self.loaded = load_spec(spec, did_exists=self.data.exists)
        self.store = open_sql_store(settings().db_url)
        self.journal = settings().runs_dir / ".journal" / "slurm"
        self.runs = settings().runs_dir
        self.argv = argv
        self.restart()

    def restart(self) -> None:
        self.executor = SlurmExecutor(journal=self.journal, payload_override=self.argv)
        self.campaign = ctl.Campaign(self.loaded, self.store, self.executor, self.data, self.runs,
                                     api_url=None, poll_s=0.3)

    def trials(self) -> list[Any]:
        return self.store.list_trials(self.campaign.study.id)

    def until(self, cond: Any, timeout: float, what: str) -> None:
        def step() -> bool:
            over = self.campaign.step()
            return bool(cond() or over)

        wait_for(step, timeout, lambda: f"{what}: {[(t.number, t.state) for t in self.trials()]}",
                 interval=0.3)

    def finish(self, timeout: float = 120) -> None:
        wait_for(self.campaign.step, timeout,
                 lambda: f"the campaign to end: {[(t.number, t.state) for t in self.trials()]}",
                 interval=0.3)
        self.executor.close()

    def started(self) -> list[int]:
        """The trials whose step was started (srun) and has not ended yet."""
        out = []
        for t in self.trials():
            try:
                entry = self.entry(t.number)
            except (OSError, KeyError, ValueError):
                continue
            if entry.get("alloc") and entry.get("state") == "STEP":
                out.append(t.number)
        return out

    def entry(self, number: int, attempt: int = 1) -> dict[str, Any]:
        doc = json.loads((self.runs / self.name / f"trial-{number:04d}" / "slurm.json").read_text())
        return doc["attempts"][str(attempt)]


@pytest.fixture
def runs(gridml_home: Path, slurm_env: SlurmCluster) -> Iterator[Any]:
    made: list[Run] = []

    def make(*args: Any, **kw: Any) -> Run:
        made.append(Run(gridml_home / f"r{len(made)}", *args, **kw))
        return made[-1]

    yield make
    for r in made:
        for job, _name, state in slurm_env.sacct("--name", f"gridml.{r.name}.alloc,gridml.{r.name}.array"):
            if state in ("RUNNING", "PENDING"):
                cli.cancel(job)
        r.store.close()


def _steps(alloc: str) -> list[tuple[str, str]]:
    """(step name, state) of an allocation's numbered steps, from accounting."""
    return sorted((name, info.state) for name, info in cli.step_accounting(alloc).items())


def test_packed_trials_run_as_job_steps_and_survive_a_controller_restart(
        runs: Any, slurm_env: SlurmCluster) -> None:
    t0 = time.monotonic()
    r = runs(", pack: 2, pack_walltime: 20m", 4, 2, payload(4))
    r.until(lambda: len(r.started()) == 2, 90, "two trials started as steps")
    running = r.started()
    allocs = {str(r.entry(n)["alloc"]) for n in running}
    r.restart()  # the controller dies (no close, no kill); a new one adopts the running steps
    r.finish()
    trials = r.trials()
    assert [t.state for t in trials] == ["completed"] * 4, [(t.number, t.error) for t in trials]
    assert all(t.attempts == 1 for t in trials), [(t.number, t.attempts) for t in trials]
    # every trial ran as exactly one step; the adopted ones were not started again
    jobs = {str(r.entry(t.number)["alloc"]) for t in trials}
    assert allocs <= jobs and len(jobs) <= 2, jobs  # one sbatch per 2 trials at most
    # a step's end reaches the accounting database on its own time (slurmdbd, a loaded machine:
    # the full run once saw the last step still RUNNING there after its trial completed): wait,
    # with a deadline, until every step has a final state
    want = [f"gridml.{r.name}.trial-{n:04d}.a1" for n in range(4)]

    def all_ended() -> list[tuple[str, str]] | None:
        steps = [s for job in sorted(jobs) for s in _steps(job)]
        ended = sorted(name for name, _ in steps) == want and all(
            state not in ("RUNNING", "PENDING", "COMPLETING") for _, state in steps)
        return steps if ended else None

    steps = wait_for(all_ended, 60, lambda: f"sacct to end the steps {want}: "
                     f"{[s for job in sorted(jobs) for s in _steps(job)]}", interval=0.5)
    assert all(state == "COMPLETED" for _, state in steps), steps
    for t in trials:  # the step's own output, in the attempt folder
        log = (r.runs / r.name / f"trial-{t.number:04d}" / "attempt-1" / "payload.log").read_text()
        assert "[gridml] job" in log, log
    # no allocation outlives the campaign: released (scancel) or ended by itself
    wait_for(lambda: all(cli.allocations(sorted(jobs)).get(j) is None
                         or cli.allocations([j])[j].state not in ("RUNNING", "PENDING") for j in jobs),
             60, f"allocations {jobs} to end", interval=0.5)
    print(f"\n[slurm] 4 packed trials (K=2) in {len(jobs)} allocations, "
          f"{time.monotonic() - t0:.1f} s with a controller restart")


# a payload that checkpoints on USR1 (advertised to step.sh's trap as a rank does) and leaves
# with 75; its continuation finds the checkpoint and ends the trial
CHECKPOINTING = (
    "if [ -e ../outputs/checkpoint/state.json ]; then "
    f"echo '{json.dumps(EPOCH)}' > ../outputs/metrics.jsonl; exit 0; fi; "
    "trap 'mkdir -p ../outputs/checkpoint && echo {} > ../outputs/checkpoint/state.json; "
    "echo 75 > payload_exit_code; exit 75' USR1; "
    'echo > "$GRIDML_SIGNAL_DIR/$SLURMD_NODENAME.$$"; while :; do sleep 0.2; done')


def test_a_warned_packed_step_continues_in_a_new_step(runs: Any, slurm_env: SlurmCluster) -> None:
    """USR1 to a running step (what ``srun --signal=USR1@<grace>`` sends before its end): step.sh's
    trap tells the 'rank', which checkpoints and exits 75; the trial is continued as a new step
    (no retry used: ``retries: 0``), which finds the checkpoint."""
    t0 = time.monotonic()
    r = runs(", pack: 2, pack_walltime: 20m", 1, 1, ["gridml_run", "bash", "-c", CHECKPOINTING])
    run1 = r.runs / r.name / "trial-0000" / "attempt-1"
    r.until(lambda: r.started() == [0] and list((run1 / "ranks").glob("*.*")), 90,
            "the step's payload up")
    alloc = str(r.entry(0)["alloc"])
    step = cli.steps([alloc])[alloc][str(r.entry(0)["step"])]
    signalled = time.time()
    subprocess.run(["scancel", "--signal=USR1", f"{alloc}.{step}"], check=True, timeout=60)
    r.finish()
    [t] = r.trials()
    assert t.state == "completed" and t.attempts == 2, (t.state, t.attempts, t.error)
    assert (r.runs / r.name / "trial-0000" / "continued").read_text() == "1"
    assert (run1 / "exit_code").read_text().strip() == "75" and (run1 / "signalled_at").exists()
    second = r.entry(0, 2)
    assert second.get("alloc") and second.get("step", "").endswith(".a2"), second
    print(f"\n[slurm] packed continuation: USR1 -> continued step started "
          f"{float(second['started_at']) - signalled:.1f} s later, "
          f"allocations {alloc} -> {second['alloc']}, {time.monotonic() - t0:.1f} s in all")


def test_a_cycles_trials_go_as_one_job_array(runs: Any, slurm_env: SlurmCluster) -> None:
    r = runs(", array: true, array_throttle: 2", 3, 3, payload(1))
    r.finish()
    trials = r.trials()
    assert [t.state for t in trials] == ["completed"] * 3, [(t.number, t.error) for t in trials]
    jobs = {str(r.entry(t.number)["job_id"]) for t in trials}
    assert len(jobs) == 1, jobs  # one sbatch for the three
    job = jobs.pop()
    assert sorted(int(r.entry(t.number)["task"]) for t in trials) == [0, 1, 2]
    # each task's end reaches the accounting database on its own time (slurmdbd, a loaded
    # machine): wait, with a deadline, until sacct lists all three
    want = [f"{job}_{i}" for i in range(3)]

    def all_listed() -> dict | None:
        tasks = cli.step_accounting(job)
        return tasks if sorted(tasks) == want else None

    tasks = wait_for(all_listed, 60, lambda: f"sacct to list {want}: {cli.step_accounting(job)}",
                     interval=0.5)
    assert all(info.state == "COMPLETED" for info in tasks.values()), tasks
    script = Path(str(r.entry(0)["array_folder"])) / "array.sh"
    assert "#SBATCH --array=0-2%2" in script.read_text()


def test_a_lost_node_is_judged_from_slurms_node_state(runs: Any, slurm_env: SlurmCluster) -> None:
    """slurmd of n2 killed under a running two-node job and a running array task pinned on n2:
    each trial is failed as lost to the infrastructure once Slurm marks n2 NOT_RESPONDING,
    before the job's (the task's) NODE_FAIL; the array task through the same path."""
    r = runs("", 1, 1, payload(120), resources="{nodes: 2, cores: 1, memory_gb: 0.1, walltime: 5m}",
             training="{epochs: 1, batch_size: 8, workers: 2, horovod: mpi}")
    arr = runs(", array: true, options: {nodelist: n2}", 1, 1, payload(120))
    r.until(lambda: r.trials()[0].external_id, 60, "the trial submitted")
    arr.until(lambda: arr.trials()[0].external_id, 60, "the array's trial submitted")
    handle, task = r.trials()[0].external_id, arr.trials()[0].external_id
    wait_for(lambda: r.executor.poll(handle).state == "running" and arr.executor.poll(task).state
             == "running", 90, "the job and the array task running", interval=0.5)
    job = handle.rsplit(":", 1)[-1]
    try:
        t_kill = time.monotonic()
        slurm_env.node_stop("n2")
        status = wait_for(lambda: (s := r.executor.poll(handle)).state != "running" and s, 90,
                          "the job judged lost", interval=0.5)
        judged = time.monotonic() - t_kill
        assert status.state == "failed" and status.infrastructure, status
        assert "n2 was lost" in status.message, status.message
        info = cli.queue([job]).get(job) or cli.accounting(job)
        assert info is not None and info.state != "NODE_FAIL", info  # before Slurm's verdict
        lost = wait_for(lambda: (s := arr.executor.poll(task)).state != "running" and s, 60,
                        "the array task judged lost", interval=0.5)
        assert lost.state == "failed" and lost.infrastructure and "n2 was lost" in lost.message, lost
        array_judged = time.monotonic() - t_kill
        r.until(lambda: any(t.state in ("submitted", "running") and t.external_id != handle
                            for t in r.trials()), 60, "the trial resubmitted")
        resubmitted = time.monotonic() - t_kill
    finally:
        slurm_env.node_start("n2")
        for run in (r, arr):
            for t in run.trials():
                if t.external_id:
                    run.executor.kill(t.external_id)
    wait_for(lambda: all(not cli.is_lost(s) for s in cli.node_states("n1,n2").values()), 90,
             "n2 back in service", interval=0.5)
    print(f"\n[slurm] lost node: judged lost {judged:.1f} s (array task {array_judged:.1f} s) "
          f"after slurmd was killed, trial "
          f"resubmitted after {resubmitted:.1f} s (SlurmdTimeout 10 s; NODE_FAIL came at ~27 s)")
