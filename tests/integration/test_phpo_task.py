"""`backend.executor: phpo`: the study as one PanDA HPO task, built by panda-client's phpo.

`gridml submit spec.yaml --dry-run --json` prints the task parameters PhpoScript builds for the
study (steering: `gridml steer` with iDDS's placeholders; evaluation: `gridml evaluate`), with
gridml's cores, memory, walltime and sandbox; a golden file holds them. The same parameters are
accepted by the PanDA double through the real panda-client (insertTaskParams).
"""

from __future__ import annotations

import json
import os
import re
from urllib.parse import unquote
from pathlib import Path

import pytest

from tests.helpers import gridml
from tests.panda_double import PandaDouble
from tests.panda_double.campaign import panda_spec, register_sample_data

pytestmark = [pytest.mark.slow]
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "panda" / "phpo.json"
SANDBOX = re.compile(r"jobO\.gridml-[0-9a-f]{16}\.tar\.gz")


@pytest.fixture()
def dry(tmp_path: Path, gridml_home: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    for key in ("PANDA_URL_SSL", "PANDA_URL", "PANDA_AUTH", "X509_USER_PROXY", "PANDACACHE_URL"):
        monkeypatch.delenv(key, raising=False)
    train, val = register_sample_data(tmp_path, n_train=200, n_val=100)
    spec = panda_spec(tmp_path, "hpo", train, val,
                      backend="backend: {executor: phpo, data: local, server: embedded}\n",
                      resources="resources: {cores: 4, gpus: 1, vram_gb: 24, memory_gb: 8, "
                                "walltime: 3h, container: 'docker://ghcr.io/gridml/payload:0.1'}\n",
                      panda="panda: {nickname: jdoe, site: ANALY_GPU_X}\n")
    tasks = json.loads(gridml("submit", str(spec), "--dry-run", "--json").stdout)
    return {"tasks": tasks, "train": train, "val": val}


def normalised(task: dict) -> dict:
    return json.loads(SANDBOX.sub("jobO.gridml-SANDBOX.tar.gz", json.dumps(task)))


def test_dry_run_shows_one_phpo_task_built_by_panda_client(dry: dict) -> None:
    tasks = dry["tasks"]
    assert len(tasks) == 1  # one task for the whole study, however many trials run at once
    task = tasks[0]
    hpo = task["hpoRequestData"]
    assert task["hpoWorkflow"] is True and task["taskName"] == "user.jdoe.hpo.phpo/"
    assert hpo["arguments"].startswith("gridml steer --in %IN --out %OUT --num-points %NUM_POINTS "
                                       "--max-points %MAX_POINTS --algorithm bayes --seed 7")
    assert hpo["max_points"] == 4 and hpo["num_points_per_generation"] == 2
    assert hpo["opt_space"]["units"] == {"type": "int", "low": 8, "high": 32, "log": False}
    assert task["nEvents"] == 2 and task["totNumJobs"] == 4  # nParallelEvaluation, maxPoints
    assert task["coreCount"] == 4 and task["ramCount"] == 2048 and task["maxWalltime"] == 3
    assert task["architecture"] == "#&nvidia:vram>=24576" and task["site"] == "ANALY_GPU_X"
    values = [str(p["value"]) for p in task["jobParameters"]]
    assert any(SANDBOX.fullmatch(v.split()[1]) for v in values if v.startswith("-a "))
    assert "gridml evaluate --trial gridml_trial.json" in unquote(" ".join(values)), values
    inputs = [p for p in task["jobParameters"] if p.get("param_type") == "input"]
    assert inputs[0]["dataset"] == f"{dry['train']},{dry['val']}"
    path = GOLDEN
    if os.environ.get("GRIDML_UPDATE_GOLDEN"):
        path.write_text(json.dumps(normalised(task), indent=2, sort_keys=True) + "\n")
    assert normalised(task) == json.loads(path.read_text()), "update with GRIDML_UPDATE_GOLDEN=1"


def test_the_phpo_task_is_accepted_by_the_double(dry: dict, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from gridml.executors.panda import client as pc

    task = dry["tasks"][0]
    with PandaDouble(tmp_path / "panda") as panda:
        for key, value in panda.client_env().items():
            monkeypatch.setenv(key, value)
        task_id, message = pc.submit(task)
        assert "jediTaskID" in message
        assert pc.task_params(task_id)["hpoRequestData"] == task["hpoRequestData"]
        assert panda.api.calls[-2:] == ["POST task/submit", "GET task/get_task_parameters"]
