"""`gridml serve` drives a Slurm campaign: the user registers the study with a running server
(`gridml --server URL submit`, which returns at once: the user may log out) and the server's
controller submits the trials as batch jobs and follows them to the end. The server listens on
the test cluster's bridge address, which the nodes reach: the ranks post their epochs live. A
second test kills the server with SIGKILL mid-campaign and restarts it: no epoch lost (spool), no
job submitted twice. The first trains the torch example (skipped without torch), the second the
default Keras one: what it guards (the spool, the restarted controller) is no framework's."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gridml.server.process import free_port
from tests.helpers import (ROOT, TORCH_PAYLOAD, gridml, gridml_json, make_registered_sample_data,
                           wait_for, write_spec)
from tests.slurm.slurm_fixtures import SlurmCluster
from tests.slurm.test_slurm_campaign import jobs_of, search, trial_logs

pytestmark = [pytest.mark.service, pytest.mark.slow]


def bridge_address(cluster: SlurmCluster) -> str:
    """slurmctld's address on the cluster's bridge (SlurmctldHost=name(ADDRESS))."""
    found = re.search(r"^SlurmctldHost=\S+\((\S+)\)", cluster.conf.read_text(), re.M)
    assert found, cluster.conf.read_text()
    return found.group(1)


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Serve:
    """`gridml serve` on the cluster's bridge: killed with SIGKILL and started again on the same
    host:port, database and GRIDML_HOME (the environment of the test)."""

    def __init__(self, host: str, log: Path) -> None:
        self.host, self.port, self.log = host, free_port(), log
        self.url = f"http://{host}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout: float = 60) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gridml.serve", "--host", self.host, "--port", str(self.port),
                 "--open-reads", "--poll", "1"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                env=os.environ.copy(), start_new_session=True)
        self.starts += 1
        proc = self.proc

        def up() -> bool:  # a restart may wait for the port to be free again
            assert proc.poll() is None, self.log.read_text()[-3000:]
            return healthy(self.url)

        wait_for(up, timeout, lambda: f"gridml serve to answer: {self.log.read_text()[-3000:]}",
                 interval=0.2)

    def kill(self) -> None:
        """SIGKILL the whole process group (a crash: no shutdown handler runs)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)


@pytest.fixture
def serve(slurm_env: SlurmCluster, gridml_home: Path, tmp_path: Path) -> Iterator[Serve]:
    srv = Serve(bridge_address(slurm_env), tmp_path / "serve.log")
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()
        text = srv.log.read_text()
        assert "Traceback" not in text, text[-3000:]


@pytest.fixture
def server(serve: Serve) -> str:
    return serve.url


@pytest.mark.usefixtures("needs_torch")
def test_a_slurm_campaign_registered_with_gridml_serve_runs_to_the_end(
        tmp_path: Path, slurm_env: SlurmCluster, server: str) -> None:
    data = make_registered_sample_data(tmp_path, n_train=400, n_val=200, files=2)
    spec = write_spec(
        tmp_path / "spec.yaml", "slurm-serve", *data, search=search(2, 2),
        payload=TORCH_PAYLOAD,
        training="training: {epochs: 1, batch_size: 64, workers: 1, metrics: [auc]}\n",
        resources="resources: {cores: 1, memory_gb: 1, walltime: 20m}\n",
        backend=f"backend: {{executor: slurm, data: local, server: '{server}', retries: 0}}\n",
        slurm=f"slurm: {{partition: {slurm_env.partition}}}\n")
    t0 = time.monotonic()
    out = gridml("submit", str(spec), timeout=120).stdout  # returns once registered
    assert "registered with" in out and time.monotonic() - t0 < 60, out
    doc = wait_finished(server, "slurm-serve", 600)
    print(f"\n[slurm] serve-driven campaign of 2 trials finished {time.monotonic() - t0:.0f} s after submit")
    trials = doc["trials"]
    assert doc["study"]["state"] == "finished", (doc["study"], [(t["state"], t["error"]) for t in trials])
    assert [t["state"] for t in trials] == ["completed"] * 2, \
        ([(t["state"], t["error"]) for t in trials], trial_logs("slurm-serve", 0)[-3000:])
    for t in trials:
        assert t["external_id"].startswith("slurm:") and t["attempts"] == 1
        epochs = gridml_json("--server", server, "status", "slurm-serve", "--trial", str(t["number"]))["epochs"]
        assert [e["epoch"] for e in epochs] == [1] and "val_auc" in epochs[0]["metrics"]
        # the nodes were given the server (reachable on the bridge), not a spool-only document
        attempt = Path(os.environ["GRIDML_HOME"]) / "runs" / "slurm-serve" / f"trial-{t['number']:04d}" / "attempt-1"
        assert server in (attempt / "trial.json").read_text()
    jobs = jobs_of(slurm_env, "gridml.slurm-serve.")
    assert len(jobs) == 2 and all([s for _, s in v] == ["COMPLETED"] for v in jobs.values()), jobs


def wait_finished(server: str, study: str, timeout: float) -> dict:
    """The study's `gridml status` once it is finished (fails after ``timeout``)."""
    last: list[dict] = []

    def finished() -> bool:
        last[:] = [gridml_json("--server", server, "status", study)]
        return last[0]["study"]["state"] == "finished"

    wait_for(finished, timeout, lambda: f"{study} to finish: {last[0]['study'] if last else None}, "
             f"trials {[(t['state'], t['error']) for t in last[0]['trials']] if last else None}",
             interval=0.5)
    return last[0]


def test_serve_killed_mid_slurm_campaign_loses_no_report_and_submits_no_duplicate(
        tmp_path: Path, slurm_env: SlurmCluster, serve: Serve) -> None:
    """SIGKILL `gridml serve` (API and controller) while its trials run on the nodes, keep it down
    until a rank has given up a post (after its retries, 0.5+1+...+16 s: that report stays in the
    spool only), start it again on the same address and database: the controller follows the jobs
    it had submitted (no second sbatch), ingests the spools, and no epoch is missing. The default
    (Keras) payload: nothing here needs torch."""
    trials_n, epochs_n = 2, 4
    data = make_registered_sample_data(tmp_path, n_train=60000, n_val=6000, files=2)
    spec = write_spec(
        tmp_path / "spec.yaml", "slurm-restart", *data, search=search(trials_n, trials_n),
        training=f"training: {{epochs: {epochs_n}, batch_size: 64, workers: 1, metrics: [auc]}}\n",
        resources="resources: {cores: 1, memory_gb: 1, walltime: 20m}\n",
        backend=f"backend: {{executor: slurm, data: local, server: '{serve.url}', retries: 0}}\n",
        slurm=f"slurm: {{partition: {slurm_env.partition}}}\n")
    t0 = time.monotonic()
    out = gridml("submit", str(spec), timeout=120).stdout
    assert "registered with" in out, out
    # kill once a running trial has reported an epoch and has epochs still to run
    trials: list[dict] = []

    def between_epochs() -> bool:
        try:
            page = httpx.get(f"{serve.url}/api/v1/studies/slurm-restart/trials", timeout=5).json()
        except httpx.HTTPError:
            page = {"trials": []}
        trials[:] = page.get("trials", [])
        finished = trials and all(t["state"] in ("completed", "failed") for t in trials)
        assert not finished, ("no trial caught between epochs", trials)
        return any(t["state"] == "running" and 1 <= t["epochs_done"] < epochs_n for t in trials)

    wait_for(between_epochs, 400, lambda: f"a trial between epochs: {trials}", interval=0.2)
    at_kill = {t["number"]: (t["state"], t["epochs_done"]) for t in trials}
    serve.kill()
    t_kill = time.monotonic()
    assert not healthy(serve.url)
    # the ranks post to a dead server: retries, given up, left in the spool
    wait_for(lambda: "not posted" in "\n".join(trial_logs("slurm-restart", n) for n in at_kill),
             300, "a rank to give up a post to the dead server (its report left in the spool)",
             interval=0.5)
    serve.start()
    print(f"\n[slurm] serve killed {t_kill - t0:.0f} s after submit (trials: {at_kill}), "
          f"down {time.monotonic() - t_kill:.0f} s")
    doc = wait_finished(serve.url, "slurm-restart", 600)
    print(f"[slurm] campaign finished {time.monotonic() - t0:.0f} s after submit")
    trials = doc["trials"]
    assert doc["study"]["state"] == "finished", (doc["study"], [(t["state"], t["error"]) for t in trials])
    assert [t["state"] for t in trials] == ["completed"] * trials_n, \
        ([(t["state"], t["error"]) for t in trials], trial_logs("slurm-restart", 0)[-3000:])
    for t in trials:
        assert t["attempts"] == 1 and t["external_id"].startswith("slurm:"), t
        epochs = gridml_json("--server", serve.url, "status", "slurm-restart", "--trial",
                             str(t["number"]))["epochs"]
        assert [e["epoch"] for e in epochs] == list(range(1, epochs_n + 1)), (t["number"], epochs)
        assert all("val_auc" in e["metrics"] for e in epochs)
    # one batch job per trial, each completed: the restarted controller submitted none again
    jobs = jobs_of(slurm_env, "gridml.slurm-restart.")
    assert len(jobs) == trials_n and all([s for _, s in v] == ["COMPLETED"] for v in jobs.values()), jobs
    # the server was down longer than a rank retries a post: some report reached the store only
    # through the spool the restarted controller ingested when the job ended
    logs = "\n".join(trial_logs("slurm-restart", t["number"]) for t in trials)
    assert "not posted" in logs, logs[-3000:]
    assert serve.starts == 2 and serve.log.read_text().count("gridml server on") >= 2
