"""Campaigns on the real two-node Slurm cluster (scripts/slurm-cluster.sh): trials as batch jobs,
one trial's ranks on both nodes, a lost node, walltime, Ctrl-C and kill -9 with resume, a bad
partition. Small on purpose (tiny data, 1-2 epochs, 2 trials where a campaign needs several):
CI has two cores, and every Keras rank pays TensorFlow's import. The walltime campaign cannot be
shorter than Slurm's minute (plus its 30 s check): it is started with the lost-node test, and
its sleeping job waits out its minute beside that test's and the Ctrl-C test's jobs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import (gridml, gridml_json, make_registered_sample_data, start_gridml,
                           wait_for, write_spec)
from tests.slurm.slurm_fixtures import SlurmCluster

pytestmark = [pytest.mark.service, pytest.mark.slow]

TWO_NODES = dict(
    training="training: {epochs: 2, batch_size: 64, workers: 2, horovod: mpi, metrics: [accuracy]}\n",
    resources="resources: {nodes: 2, cores: 1, memory_gb: 1, walltime: 20m}\n",
    backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n")
ONE_NODE = dict(
    training="training: {epochs: 1, batch_size: 64, workers: 1, metrics: [accuracy]}\n",
    resources="resources: {cores: 1, memory_gb: 1, walltime: 20m}\n",
    backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n")


def search(max_trials: int, parallel: int) -> str:
    return (f"search:\n  algorithm: random\n  max_trials: {max_trials}\n  parallel: {parallel}\n"
            "  seed: 3\n  space:\n    learning_rate: {type: real, low: 1.0e-3, high: 3.0e-2, log: true}\n"
            "    units: {type: int, low: 8, high: 16}\n")


@pytest.fixture
def data(tmp_path: Path, gridml_home: Path, slurm_env: SlurmCluster) -> tuple[str, str]:
    return make_registered_sample_data(tmp_path, n_train=600, n_val=200, files=2)


def spec_for(tmp_path: Path, name: str, data: tuple[str, str], cluster: SlurmCluster,
             max_trials: int, parallel: int, slurm: str = "", **sections: str) -> Path:
    return write_spec(tmp_path / f"{name}.yaml", name, *data, search=search(max_trials, parallel),
                      slurm=f"slurm: {{partition: {cluster.partition}{slurm}}}\n", **sections)


def start_submit(spec: Path) -> subprocess.Popen[str]:
    return start_gridml("submit", str(spec), "--quiet")


def start_resume(study: str) -> subprocess.Popen[str]:
    return start_gridml("resume", study, "--quiet")


def wait_jobs(cluster: SlurmCluster, prefix: str, states: tuple[str, ...], count: int,
              timeout: float = 300) -> list[tuple[str, str, str]]:
    """Wait until ``count`` jobs whose name starts with ``prefix`` are in one of ``states``."""
    rows: list[tuple[str, ...]] = []

    def mine() -> list[tuple[str, str, str]]:
        rows[:] = [tuple(line.split("|")) for line in cluster.squeue("-o", "%i|%j|%T").split()]
        found = [(r[0], r[1], r[2]) for r in rows if r[1].startswith(prefix) and r[2] in states]
        return found if len(found) >= count else []

    return wait_for(mine, timeout, lambda: f"{count} jobs {prefix}* in {states}: {rows}", interval=0.5)


def jobs_of(cluster: SlurmCluster, prefix: str) -> dict[str, list[tuple[str, str]]]:
    """Job name -> [(job id, state)] for every job of the study Slurm still shows."""
    out: dict[str, list[tuple[str, str]]] = {}
    for line in cluster.squeue("-o", "%i|%j|%T").split():
        job, name, state = line.split("|")
        if name.startswith(prefix):
            out.setdefault(name, []).append((job, state))
    return {k: sorted(v, key=lambda r: int(r[0])) for k, v in out.items()}


def trial_logs(study: str, number: int) -> str:
    runs = Path(os.environ["GRIDML_HOME"]) / "runs" / study / f"trial-{number:04d}"
    return "\n".join(p.read_text(errors="replace") for p in sorted(runs.glob("attempt-*/payload.log")))


# How the controller logs a job lost to the infrastructure (a retry not used up).
LOST = re.compile(r"Slurm job \d+ (NODE_FAIL|FAILED).*no retry used|not the payload")


def controller_log(study: str) -> str:
    path = Path(os.environ["GRIDML_HOME"]) / "runs" / study / "controller.log"
    return path.read_text(errors="replace") if path.exists() else ""


def finish(proc: subprocess.Popen[str], timeout: float = 900) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"{proc.returncode}\n{out}\n{err}"
    return out


def test_campaign_of_two_node_trials(data: tuple[str, str], tmp_path: Path, slurm_env: SlurmCluster) -> None:
    """2 trials at once, each 2 ranks on 2 nodes (one per node), real TF + Horovod over MPI;
    metrics from the spool (the nodes cannot reach the embedded API on loopback); the best model
    fetched."""
    spec = spec_for(tmp_path, "slurm-two", data, slurm_env, 2, 2, **TWO_NODES)
    t0 = time.time()
    gridml("submit", str(spec), "--quiet", timeout=1200)
    doc = gridml_json("status", "slurm-two")
    trials = doc["trials"]
    assert [t["state"] for t in trials] == ["completed"] * 2, [(t["state"], t["error"]) for t in trials]
    assert all(t["epochs_done"] == 2 and t["attempts"] == 1 for t in trials)
    for t in trials:
        assert t["external_id"].startswith("slurm:")
        log = trial_logs("slurm-two", t["number"])
        assert re.search(r"rank 0 on node n[12]", log) and re.search(r"rank 1 on node n[12]", log)
        nodes = set(re.findall(r"rank \d on node (n\d)", log))
        assert nodes == {"n1", "n2"}, log[-2000:]
    jobs = jobs_of(slurm_env, "gridml.slurm-two.")
    assert sorted(jobs) == [f"gridml.slurm-two.trial-{n:04d}" for n in range(2)]
    assert all(len(v) == 1 and v[0][1] == "COMPLETED" for v in jobs.values()), jobs
    out = tmp_path / "best"
    gridml("fetch", "slurm-two", "--best", "-o", str(out))
    assert any(p.suffix == ".keras" for p in out.rglob("*")), list(out.rglob("*"))
    status = gridml("status", "slurm-two", env={"COLUMNS": "250"}).stdout
    assert re.search(r"\d+ COMPLETED", status), status  # the job column: "<job id> <Slurm state>"
    # submit -> first epoch stored (a figure for docs/hpc.md)
    lags: list[float] = []
    for t in trials:
        one = gridml_json("status", "slurm-two", "--trial", str(t["number"]))
        print("\n", one["trial"], one["epochs"][0])
        break
    print(f"\n[slurm] 2 two-node trials in {time.time() - t0:.0f} s {lags}")


@pytest.fixture(scope="module")
def walltime_campaign(tmp_path_factory: pytest.TempPathFactory, slurm_cluster: SlurmCluster
                      ) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """(home, the submit) of a campaign whose one job outlasts its walltime (1 minute, Slurm's
    least: the node's setup alone sleeps 10 min), submitted in the background with a home of its
    own. Its job sleeps on one core of n1 (of 2 cores on each of 2 nodes): the lost-node and
    Ctrl-C campaigns run beside it meanwhile (the lost node is n2)."""
    tmp = tmp_path_factory.mktemp("slurm-time")
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("GRIDML_HOME", str(tmp / "home"))
        for key, value in slurm_cluster.env.items():
            mp.setenv(key, value)
        data = make_registered_sample_data(tmp, n_train=200, n_val=100, files=1)
        sections = dict(ONE_NODE, resources="resources: {cores: 1, memory_gb: 1, walltime: 1m}\n")
        spec = spec_for(tmp, "slurm-time", data, slurm_cluster, 1, 1,
                        slurm=", setup: ['sleep 600'], options: {nodelist: n1}", **sections)
        proc = start_submit(spec)  # the environment is the child's from here on
    finally:
        mp.undo()
    yield tmp / "home", proc
    if proc.poll() is None:
        proc.kill()
        proc.communicate(timeout=60)


def test_a_lost_node_resubmits_without_using_a_retry(
        data: tuple[str, str], tmp_path: Path, slurm_env: SlurmCluster,
        walltime_campaign: tuple[Path, subprocess.Popen[str]]) -> None:
    """slurmd on n2 killed (with its processes) mid-trial: the job ends NODE_FAIL (or FAILED with
    the node marked down), the trial is resubmitted as a new job although retries is 0.
    (``walltime_campaign`` is only started here: its minute passes while this test runs.)"""
    # n2 is stopped as soon as both ranks are up: their banner is echoed before python starts,
    # so the first job is still importing TensorFlow (seconds) then, whatever its epochs; the
    # resubmitted job runs them all (2, as the two-node campaign's)
    spec = spec_for(tmp_path, "slurm-lost", data, slurm_env, 1, 1, **TWO_NODES)
    proc = start_submit(spec)
    try:
        wait_jobs(slurm_env, "gridml.slurm-lost.", ("RUNNING",), 1)
        wait_for(lambda: all(re.search(rf"rank {r} on node n[12]", trial_logs("slurm-lost", 0))
                             for r in (0, 1)), 120, "the ranks up on both nodes", interval=0.5)
        t_kill = time.monotonic()
        slurm_env.node_stop("n2")
        # the controller judges the job lost (Slurm's node state) and resubmits the trial before
        # the job has even ended: FAILED (mpirun gave up), NODE_FAIL (Slurm's verdict) or
        # CANCELLED (gridml cancelled it)
        wait_for(lambda: len(jobs_of(slurm_env, "gridml.slurm-lost.").get(
            "gridml.slurm-lost.trial-0000", [])) == 2, 180, "the trial's second job", interval=0.5)
        print(f"\n[slurm] lost node: slurmd killed -> trial resubmitted in {time.monotonic() - t_kill:.1f} s")
        wait_jobs(slurm_env, "gridml.slurm-lost.", ("NODE_FAIL", "FAILED", "CANCELLED"), 1, timeout=180)
        # the controller has seen the job lost (it resubmits) before the node comes back
        wait_for(lambda: LOST.search(controller_log("slurm-lost")), 120,
                 lambda: f"the controller to see the lost job: {controller_log('slurm-lost')[-2000:]}",
                 interval=0.5)
        slurm_env.node_start("n2")
        # the campaign goes on with a new job; lower the epochs of nothing: let it finish
        finish(proc, timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
        slurm_env.node_start("n2")
    trial = gridml_json("status", "slurm-lost")["trials"][0]
    assert trial["state"] == "completed" and trial["attempts"] == 2, trial
    jobs = jobs_of(slurm_env, "gridml.slurm-lost.")["gridml.slurm-lost.trial-0000"]
    assert [s for _, s in jobs][-1] == "COMPLETED" and len(jobs) == 2, jobs
    controller = controller_log("slurm-lost")
    assert LOST.search(controller), controller


def test_ctrl_c_cancels_and_kill_9_resumes_without_a_job_twice(data: tuple[str, str], tmp_path: Path,
                                                               slurm_env: SlurmCluster) -> None:
    spec = spec_for(tmp_path, "slurm-stop", data, slurm_env, 2, 2, **ONE_NODE)
    prefix = "gridml.slurm-stop."
    proc = start_submit(spec)
    wait_jobs(slurm_env, prefix, ("RUNNING", "PENDING"), 2)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    wait_for(lambda: all(s in ("CANCELLED", "COMPLETING") for v in jobs_of(slurm_env, prefix).values()
                         for _, s in v), 10, lambda: f"every job cancelled: {jobs_of(slurm_env, prefix)}",
             interval=0.2)
    doc = gridml_json("status", "slurm-stop")
    assert doc["study"]["state"] == "stopped" and {t["state"] for t in doc["trials"]} == {"queued"}
    # resume, kill -9 the controller once the new jobs are queued, resume again
    proc = start_resume("slurm-stop")
    wait_jobs(slurm_env, prefix, ("RUNNING", "PENDING", "COMPLETED"), 2)
    proc.kill()
    proc.communicate(timeout=60)
    finish(start_resume("slurm-stop"))
    doc = gridml_json("status", "slurm-stop")
    assert [t["state"] for t in doc["trials"]] == ["completed"] * 2, doc["trials"]
    jobs = jobs_of(slurm_env, prefix)
    for name, runs in jobs.items():  # one cancelled job, then exactly one more: none twice
        assert [s for _, s in runs] == ["CANCELLED", "COMPLETED"], (name, runs)


def test_a_job_over_its_walltime_fails_with_timeout(
        slurm_env: SlurmCluster, walltime_campaign: tuple[Path, subprocess.Popen[str]]) -> None:
    home, proc = walltime_campaign
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1 and "no trial completed" in err, (proc.returncode, err)
    trial = gridml_json("status", "slurm-time", env={"GRIDML_HOME": str(home)})["trials"][0]
    assert trial["state"] == "failed" and trial["attempts"] == 1, trial
    assert re.match(r"Slurm job \d+ TIMEOUT on n\d: it hit its walltime", trial["error"]), trial["error"]


def test_a_bad_partition_is_one_line_naming_it_and_sinfo(data: tuple[str, str], tmp_path: Path,
                                                         slurm_env: SlurmCluster) -> None:
    spec = write_spec(tmp_path / "bad.yaml", "slurm-bad", *data, search=search(1, 1),
                      slurm="slurm: {partition: nosuchpart}\n", **ONE_NODE)
    proc = gridml("submit", str(spec), "--quiet", check=False)
    assert proc.returncode != 0
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and "'nosuchpart'" in lines[0] and "sinfo" in lines[0], lines

