"""A torch campaign on the real two-node Slurm cluster: every trial one batch job whose torchrun
runs on both nodes (srun, one torchrun per node, a c10d rendezvous on the first node, gloo), the
ranks' RANK/WORLD_SIZE from torchrun, a shard each; every epoch stored. Tiny on purpose."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT, gridml, gridml_json, make_registered_sample_data, write_spec
from tests.slurm.slurm_fixtures import SlurmCluster
from tests.slurm.test_slurm_campaign import jobs_of, search, trial_logs

pytest.importorskip("torch")
pytestmark = [pytest.mark.service, pytest.mark.slow]

TORCH = f"payload:\n  framework: torch\n  model: {ROOT / 'examples/models/deepsets_torch.py'}\n"


def test_torch_campaign_with_each_trial_on_two_nodes(tmp_path: Path, gridml_home: Path,
                                                     slurm_env: SlurmCluster) -> None:
    data = make_registered_sample_data(tmp_path, n_train=600, n_val=200, files=2)
    spec = write_spec(
        tmp_path / "spec.yaml", "slurm-torch", *data, payload=TORCH, search=search(2, 2),
        training="training: {epochs: 1, batch_size: 64, workers: 2, metrics: [auc]}\n",
        resources="resources: {nodes: 2, cores: 1, memory_gb: 1, walltime: 20m}\n",
        backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n",
        slurm=f"slurm: {{partition: {slurm_env.partition}}}\n")
    proc = gridml("submit", str(spec), "--quiet", timeout=900, check=False)
    trials = gridml_json("status", "slurm-torch")["trials"]
    assert [t["state"] for t in trials] == ["completed"] * 2, \
        ([(t["state"], t["error"]) for t in trials], proc.stderr, trial_logs("slurm-torch", 0)[-4000:])
    for t in trials:
        assert t["external_id"].startswith("slurm:") and t["attempts"] == 1
        epochs = gridml_json("status", "slurm-torch", "--trial", str(t["number"]))["epochs"]
        assert [e["epoch"] for e in epochs] == [1] and {"loss", "val_loss", "val_auc"} <= set(epochs[0]["metrics"])
        # a shard each: 2 ranks x 300 rows make the epoch's 600 (each rank reading all would be 1200)
        assert epochs[0]["extra"]["ranks"] == 2 and epochs[0]["extra"]["train_samples"] == 600, epochs[0]
        log = trial_logs("slurm-torch", t["number"])
        # one torchrun per node, the first node hosting the rendezvous
        assert re.search(r"node n1: torchrun, rendezvous \S+:\d+ \(host: 1", log), log[-3000:]
        assert re.search(r"node n2: torchrun, rendezvous \S+:\d+ \(host: 0", log), log[-3000:]
        # RANK and WORLD_SIZE come from torchrun: ranks 0 and 1 of 2, one on each node
        ranks = dict(re.findall(r"rank (\d) on node (n\d) \(host [^,]*, local rank 0, world size 2\)", log))
        assert ranks.keys() == {"0", "1"} and set(ranks.values()) == {"n1", "n2"}, log[-3000:]
    jobs = jobs_of(slurm_env, "gridml.slurm-torch.")
    assert all(len(v) == 1 and v[0][1] == "COMPLETED" for v in jobs.values()) and len(jobs) == 2, jobs
    best = gridml_json("best", "slurm-torch")
    out = tmp_path / "best"
    gridml("fetch", "slurm-torch", "--best", "-o", str(out))
    assert (out / f"slurm-torch.trial-{best['number']:04d}.model.pt").is_file(), list(out.iterdir())
