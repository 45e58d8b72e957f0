"""A torch phpo campaign through the PanDA double: tests/e2e/test_phpo_campaign.py with
``payload.framework: torch``. iDDS steers with the real ``gridml steer``; each evaluation job runs
the real ``gridml evaluate``, which starts the torch payload with torchrun, 2 ranks; the study
shows every evaluation as a trial, and ``gridml fetch`` returns the best one's model.pt, which
rebuilds from its model_source.py, and its model.onnx, which gives the same outputs in
onnxruntime.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import (ROOT, TORCH_PAYLOAD, assert_torch_model_matches_onnx, gridml,
                           gridml_json, small_search)
from tests.panda_double import PandaDouble
from tests.panda_double.campaign import make_campaign, panda_spec, register_sample_data

pytest.importorskip("torch")
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.service]

MODEL = ROOT / "examples" / "models" / "deepsets_torch.py"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("phpo-torch")
    mp = pytest.MonkeyPatch()
    mp.setenv("GRIDML_HOME", str(tmp / "home"))
    train, val = register_sample_data(tmp, n_train=400, n_val=200, files=1)
    spec = panda_spec(
        tmp, "hpotorch", train, val,
        backend="backend: {executor: phpo, data: local, server: embedded}\n",
        payload=TORCH_PAYLOAD,
        training="training: {epochs: 1, batch_size: 64, metrics: [accuracy], workers: 2}\n",
        resources="resources: {cores: 2, gpus: 0, memory_gb: 2, walltime: 20m}\n",
        search=small_search("bayes", 11))
    with PandaDouble(tmp / "panda") as panda:
        for key, value in panda.client_env().items():
            mp.setenv(key, value)
        proc = gridml("submit", str(spec), "--quiet", timeout=900)
        c = make_campaign(spec)
        yield {"tmp": tmp, "campaign": c, "panda": panda, "submit": proc}
    mp.undo()


def test_every_point_ran_the_torch_payload_with_two_ranks(campaign: dict[str, Any]) -> None:
    c, panda = campaign["campaign"], campaign["panda"]
    assert panda.jedi.inserts == 1 and len(panda.jedi.tasks) == 1
    task = next(iter(panda.jedi.tasks.values()))
    assert task.params["hpoWorkflow"] is True
    assert task.status == "done", (task.error, [j.diag for j in task.jobs])
    assert len(task.jobs) == 2 and all(j.status == "finished" for j in task.jobs)
    trials = c.store.list_trials(c.study.id)
    assert [t.state for t in trials] == ["completed"] * 2, [t.error for t in trials]
    for t in trials:
        assert t.source == "phpo" and t.objective is not None
        epochs = c.store.list_epochs(t.id)
        assert [e.epoch for e in epochs] == [1] and "val_accuracy" in epochs[0].metrics


def test_the_best_torch_model_is_fetched_rebuilds_and_matches_its_onnx(
        campaign: dict[str, Any]) -> None:
    c, tmp = campaign["campaign"], campaign["tmp"]
    trials = c.store.list_trials(c.study.id)
    winner = min(trials, key=lambda t: t.objective)
    assert gridml_json("best", "hpotorch")["number"] == winner.number
    dest = tmp / "fetched"
    gridml("fetch", "hpotorch", "--best", "-o", str(dest))
    prefix = f"hpotorch.trial-{winner.number:04d}."
    names = {p.name for p in dest.iterdir()}
    assert {prefix + n for n in ("model.pt", "model.onnx", "model_source.py", "provenance.json",
                                 "evaluation.json", "metrics.jsonl", "payload.log")} <= names, names
    assert prefix + "model.keras" not in names
    prov = json.loads((dest / f"{prefix}provenance.json").read_text())
    source = (dest / f"{prefix}model_source.py").read_bytes()
    assert source == MODEL.read_bytes()
    assert prov["model"]["sha256"] == hashlib.sha256(source).hexdigest()
    assert prov["framework"] == "torch" and prov["runtime"]["torch"], prov["runtime"]
    assert prov["training"]["workers"] == 2  # torchrun started 2 ranks
    log = (dest / f"{prefix}payload.log").read_text(errors="replace")
    assert "torch" in log and "2 ranks" in log and "trial finished (completed)" in log, log[-3000:]
    assert_torch_model_matches_onnx(dest / f"{prefix}model.pt", dest / f"{prefix}model.onnx")
