"""A torch campaign through the PanDA wire double: 2 trials x 2 torchrun ranks x 1 epoch.

As tests/e2e/test_panda_campaign.py runs Keras: ``gridml submit`` in its own process with
``backend.executor: panda`` against the double, which plays JEDI and the pilot. Each job unpacks
the sandbox, runs the pilot wrapper and then the job's torchrun line (torchrun from the node's
PATH) around ``payloads.train_torch``; the outputs (model.pt, model.onnx, metrics, results) are
staged out, fetched by the executor, and ``gridml fetch`` returns the best trial's model.pt, which
rebuilds, and its model.onnx, which onnxruntime runs. The spec names a test split (``data.test``):
each job gets it as a third input stream (IN3), evaluates the trained model on it once, and its
figures come back stored apart from the epochs (test_metrics, roc_test.*), never seen by the search.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, TORCH_PAYLOAD, gridml, gridml_json, small_search
from tests.panda_double import PandaDouble
from tests.panda_double.campaign import make_campaign, panda_spec, register_sample_data

pytest.importorskip("torch")
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.service]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("panda-torch")
    mp = pytest.MonkeyPatch()
    mp.setenv("GRIDML_HOME", str(tmp / "home"))
    train, val = register_sample_data(tmp, n_train=800, n_val=300)
    test = register_test_split(tmp)
    spec = panda_spec(
        tmp, "gridtorch", train, val,
        data=f"data:\n  train: {train}\n  validation: {val}\n  test: {test}\n"
             "  features: x\n  labels: y\n",
        backend="backend: {executor: panda, data: local, server: embedded, retries: 2}\n",
        payload=TORCH_PAYLOAD,
        training="training: {epochs: 1, batch_size: 128, metrics: [accuracy, auc], workers: 2}\n",
        search=small_search("random", 5))
    with PandaDouble(tmp / "panda") as panda:
        for key, value in panda.client_env().items():
            mp.setenv(key, value)
        proc = gridml("submit", str(spec), "--quiet", timeout=1200)
        c = make_campaign(spec)
        yield {"tmp": tmp, "campaign": c, "panda": panda, "submit": proc}
    mp.undo()


def register_test_split(tmp: Path) -> str:
    """A test split (other events than validation's) in the local store: user.test:toy.test."""
    from gridml.data import open_data_manager
    from gridml.demo import make_sample_data

    _, files = make_sample_data(tmp / "testdata", n_train=10, n_val=300, n_files=1, seed=11)
    open_data_manager("local").upload(list(files), "user.test:toy.test", names=["toy_test_0.h5"])
    return "user.test:toy.test"


def test_both_trials_ran_torchrun_as_panda_jobs(campaign: dict[str, Any]) -> None:
    c, panda = campaign["campaign"], campaign["panda"]
    trials = c.store.list_trials(c.study.id)
    jobs = {t.task_id: (t.history, [j.diag for j in t.jobs]) for t in panda.jedi.tasks.values()}
    assert [t.state for t in trials] == ["completed"] * 2, ([t.error for t in trials], jobs)
    for task in panda.jedi.tasks.values():
        assert task.status == "done"
        job = task.jobs[-1]
        log = (job.workdir / "payload.stdout").read_text(errors="replace")
        assert "torchrun" in log and "payloads.train_torch" in log
        assert "pilot_wrapper: outputs:" in log and "model.pt" in log
    for trial in trials:
        epochs = c.store.list_epochs(trial.id)
        assert [e.epoch for e in epochs] == [1] and trial.objective is not None
        assert {"loss", "auc", "val_loss", "val_auc"} <= set(epochs[0].metrics)


def test_outputs_came_back_and_the_best_model_rebuilds(campaign: dict[str, Any]) -> None:
    c = campaign["campaign"]
    for trial in c.store.list_trials(c.study.id):
        names = {o["name"].rsplit(".", 2)[-2] + "." + o["name"].rsplit(".", 1)[-1]
                 for o in trial.outputs}
        assert {"model.pt", "model.onnx", "metrics.jsonl", "provenance.json", "result.json"} <= names, names
        assert "model.keras" not in names
    env = {"GRIDML_HOME": str(campaign["tmp"] / "home")}
    best = gridml_json("best", "gridtorch", env=env)
    assert f"best trial {best['number']}" in campaign["submit"].stdout
    dest = Path(campaign["tmp"]) / "fetched"
    gridml("fetch", "gridtorch", "--best", "-o", str(dest), env=env)
    model = next(p for p in dest.iterdir() if p.name.endswith("model.pt"))
    code = ("import sys, torch; from payloads.runtime.torch_model import rebuild; "
            "m = rebuild(sys.argv[1]); print(type(m).__name__)")
    proc = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    onnx = next(p for p in dest.iterdir() if p.name.endswith(".model.onnx"))  # as locally
    code = ("import sys, onnxruntime as ort; s = ort.InferenceSession(sys.argv[1], "
            "providers=['CPUExecutionProvider']); print(sorted(i.name for i in s.get_inputs()))")
    proc = subprocess.run([sys.executable, "-c", code, str(onnx)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, check=False)
    assert proc.returncode == 0 and "[" in proc.stdout, proc.stderr[-2000:]


def test_the_test_split_came_as_stream_in3_and_its_figures_are_stored_apart(
        campaign: dict[str, Any]) -> None:
    c, panda = campaign["campaign"], campaign["panda"]
    for task in panda.jedi.tasks.values():  # the test split: a third stream, staged by the pilot
        assert [d.split(":", 1)[-1] for d in task.jobs[-1].streams["IN3"]] == ["toy_test_0.h5"]
    trials = c.store.list_trials(c.study.id)
    for trial in trials:
        test = trial.test_metrics
        assert test is not None and {"loss", "auc", "rejection_at_50"} <= set(test), test
        assert 0.0 < test["auc"] <= 1.0
        epochs = c.store.list_epochs(trial.id)  # never an epoch metric, so never seen by the search
        assert not any(k.startswith("test") or "rejection" in k for e in epochs for k in e.metrics)
        assert test["auc"] != epochs[-1].metrics["val_auc"]  # other events than validation's
        names = {o["name"].split("._", 1)[-1].split(".", 1)[-1] for o in trial.outputs}
        assert {"roc_test.json", "roc_test.png", "scores_test.png"} <= names, names
    env = {"GRIDML_HOME": str(campaign["tmp"] / "home")}
    best = gridml_json("best", "gridtorch", env=env)
    shown = gridml("best", "gridtorch", env=env).stdout
    assert "test split" in shown and best["test_metrics"]["auc"] == pytest.approx(
        next(t for t in trials if t.number == best["number"]).test_metrics["auc"])
    dest = Path(campaign["tmp"]) / "fetched-test"
    gridml("fetch", "gridtorch", "--best", "-o", str(dest), env=env)
    roc = json.loads(next(p for p in dest.iterdir() if p.name.endswith("roc_test.json")).read_text())
    assert roc["rejection"]["rejection_at_50"] == pytest.approx(
        best["test_metrics"]["rejection_at_50"], rel=1e-9)
