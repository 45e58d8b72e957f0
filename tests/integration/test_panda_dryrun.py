"""`gridml submit spec.yaml --dry-run --json` with `backend.executor: panda`: the exact task
parameters of the first batch, nothing submitted (no PanDA server is configured at all)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridml.executors.panda.outputs import trial_doc_of
from gridml.executors.panda.render import exec_string
from tests.helpers import gridml
from tests.panda_double.campaign import panda_spec, register_sample_data

pytestmark = [pytest.mark.slow]


def test_dry_run_prints_the_task_parameters_of_the_first_batch(tmp_path: Path, gridml_home: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("PANDA_URL_SSL", "PANDA_URL", "PANDA_AUTH", "X509_USER_PROXY"):
        monkeypatch.delenv(key, raising=False)
    train, val = register_sample_data(tmp_path, n_train=200, n_val=100)
    spec = panda_spec(tmp_path, "dry", train, val,
                      resources="resources: {cores: 4, gpus: 1, vram_gb: 24, memory_gb: 8, "
                                "walltime: 3h, container: 'docker://ghcr.io/gridml/payload:0.1'}\n",
                      panda="panda: {nickname: jdoe, site: ANALY_GPU_X, rse: X_SCRATCHDISK}\n")
    proc = gridml("submit", str(spec), "--dry-run", "--json")
    tasks = json.loads(proc.stdout)
    assert [t["taskName"] for t in tasks] == ["user.jdoe.dry.trial-0000/", "user.jdoe.dry.trial-0001/"]
    for task in tasks:
        assert task["architecture"] == "#&nvidia:vram>=24576" and task["coreCount"] == 4
        assert task["container_name"] == "docker://ghcr.io/gridml/payload:0.1"
        assert task["site"] == "ANALY_GPU_X" and task["maxWalltime"] == 3
        assert task["dsForIN"] == train and task["nFilesPerJob"] == 2
        assert ("-- python -m payloads.hvdrun -np 2 -H localhost:2 --gloo python -m payloads.train_keras"
                in exec_string(task))
        doc = trial_doc_of(task)
        assert doc["data"]["train"] == ["train_000.h5", "train_001.h5"]  # the pilot stages them by name
        assert doc["hparams"] and doc["api"]["url"] == "http://SERVER"
