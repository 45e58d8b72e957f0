"""`gridml scale --nodes 1,2` on the real two-node Slurm cluster: the same 2-rank Keras + Horovod
(MPI) training on 1 node x 2 ranks and on 2 nodes x 1 rank, same global batch. Tiny data: the
figures in docs/hpc.md come from a larger run of the same command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import gridml, make_registered_sample_data, write_spec
from tests.slurm.slurm_fixtures import SlurmCluster
from tests.slurm.test_slurm_campaign import trial_logs

pytestmark = [pytest.mark.service, pytest.mark.slow]


def test_scale_over_one_and_two_nodes(tmp_path: Path, gridml_home: Path, slurm_env: SlurmCluster) -> None:
    data = make_registered_sample_data(tmp_path, n_train=1200, n_val=200, files=2)
    spec = write_spec(
        tmp_path / "spec.yaml", "ssc", *data,
        training="training: {epochs: 2, batch_size: 128, workers: 2, horovod: mpi, metrics: [accuracy]}\n",
        resources="resources: {nodes: 2, cores: 1, memory_gb: 1, walltime: 20m}\n",
        backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n",
        slurm=f"slurm: {{partition: {slurm_env.partition}}}\n")
    doc = json.loads(gridml("scale", str(spec), "--workers", "2", "--nodes", "1,2", "--hparams",
                            '{"learning_rate": 0.01, "units": 16, "dropout": 0.1, "activation": "relu"}',
                            "--json", timeout=900).stdout)
    rows = doc["rows"]
    assert [(r["workers"], r["nodes"]) for r in rows] == [(2, 1), (2, 2)], rows
    assert all(r["samples_per_s"] > 0 and r["global_batch"] == 128 for r in rows), rows
    one = set(re.findall(r"rank \d on node (n\d)", trial_logs("ssc-scale-w2-n1", 0)))
    two = set(re.findall(r"rank \d on node (n\d)", trial_logs("ssc-scale-w2-n2", 0)))
    assert len(one) == 1 and two == {"n1", "n2"}, (one, two)
