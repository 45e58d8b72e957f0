"""`gridml serve` drives a Slurm campaign: the user registers the study with a running server
(`gridml --server URL submit`, which returns at once: the user may log out) and the server's
controller submits the trials as batch jobs and follows them to the end. The server listens on
the test cluster's bridge address, which the nodes reach: the ranks post their epochs live."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gridml.server.process import free_port
from tests.helpers import ROOT, gridml, gridml_json, make_registered_sample_data, write_spec
from tests.slurm.slurm_fixtures import SlurmCluster
from tests.slurm.test_slurm_campaign import jobs_of, search, trial_logs

pytest.importorskip("torch")
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


@pytest.fixture
def server(slurm_env: SlurmCluster, gridml_home: Path, tmp_path: Path) -> Iterator[str]:
    host, port = bridge_address(slurm_env), free_port()
    url = f"http://{host}:{port}"
    log = tmp_path / "serve.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gridml.serve", "--host", host, "--port",
                                 str(port), "--open-reads", "--poll", "1"], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, env=os.environ.copy(), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not healthy(url):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
        text = log.read_text()
        assert "Traceback" not in text, text[-3000:]


def test_a_slurm_campaign_registered_with_gridml_serve_runs_to_the_end(
        tmp_path: Path, slurm_env: SlurmCluster, server: str) -> None:
    data = make_registered_sample_data(tmp_path, n_train=400, n_val=200, files=2)
    spec = write_spec(
        tmp_path / "spec.yaml", "slurm-serve", *data, search=search(2, 2),
        payload=f"payload:\n  framework: torch\n  model: {ROOT / 'examples/models/deepsets_torch.py'}\n",
        training="training: {epochs: 1, batch_size: 64, workers: 1, metrics: [auc]}\n",
        resources="resources: {cores: 1, memory_gb: 1, walltime: 20m}\n",
        backend=f"backend: {{executor: slurm, data: local, server: '{server}', retries: 0}}\n",
        slurm=f"slurm: {{partition: {slurm_env.partition}}}\n")
    t0 = time.monotonic()
    out = gridml("submit", str(spec), timeout=120).stdout  # returns once registered
    assert "registered with" in out and time.monotonic() - t0 < 60, out
    deadline = time.monotonic() + 600
    while True:
        doc = gridml_json("--server", server, "status", "slurm-serve")
        if doc["study"]["state"] == "finished" or time.monotonic() > deadline:
            break
        time.sleep(2)
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
