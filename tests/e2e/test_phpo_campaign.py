"""A phpo campaign through the PanDA double: iDDS steers with the real `gridml steer`, each
evaluation job runs the real `gridml evaluate` (Keras payload, 1 rank, 1 epoch on tiny data).

``gridml submit spec.yaml`` (``backend.executor: phpo``) submits ONE task built by panda-client's
phpo through the real panda-client and follows it: the double's JEDI plays iDDS (steering in a
fresh process per step, one evaluation job at a time, 2 points in all) and runHPO (point in
input.json, staged files in input_ds.json, output.json read back, metrics tarball staged out);
gridml records every evaluation as a trial (point, epochs, loss) and ends when the task ends, so
``gridml status``/``best``/``fetch`` show the study like any other: ``gridml fetch`` unpacks the
trial's tarball into the files a local trial has, and the fetched model.keras predicts and its
model.onnx runs in onnxruntime; ``gridml resume`` afterwards follows the same task and submits
nothing.

Small on purpose (each evaluation pays TensorFlow's import): 2 points one after the other are two
steering steps, the second fed the first one's loss; evaluations side by side (nParallelEvaluation
2) run in tests/e2e/test_phpo_torch_campaign.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, gridml, gridml_json, search_section
from tests.panda_double import PandaDouble
from tests.panda_double.campaign import make_campaign, panda_spec, register_sample_data

POINTS = 2
SEARCH = search_section(max_trials=POINTS, parallel=1)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.service]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("phpo-campaign")
    mp = pytest.MonkeyPatch()
    mp.setenv("GRIDML_HOME", str(tmp / "home"))
    train, val = register_sample_data(tmp, n_train=400, n_val=200, files=1)
    spec = panda_spec(tmp, "hpo", train, val, search=SEARCH,
                      backend="backend: {executor: phpo, data: local, server: embedded}\n",
                      training="training: {epochs: 1, batch_size: 128, metrics: [accuracy], "
                               "workers: 1}\n",
                      resources="resources: {cores: 1, gpus: 0, memory_gb: 2, walltime: 20m}\n")
    with PandaDouble(tmp / "panda") as panda:
        for key, value in panda.client_env().items():
            mp.setenv(key, value)
        proc = gridml("submit", str(spec), "--quiet", timeout=900)
        c = make_campaign(spec)  # the same study, read back from the store
        yield {"tmp": tmp, "campaign": c, "panda": panda, "submit": proc, "spec": spec}
    mp.undo()


def test_one_phpo_task_ran_every_point_as_an_evaluation_job(campaign: dict[str, Any]) -> None:
    panda = campaign["panda"]
    assert panda.jedi.inserts == 1 and len(panda.jedi.tasks) == 1
    task = next(iter(panda.jedi.tasks.values()))
    assert task.params["hpoWorkflow"] is True and task.params["taskName"] == "user.jtester.hpo.phpo/"
    assert task.status == "done", (task.error, [j.diag for j in task.jobs])
    assert len(task.jobs) == POINTS and all(j.status == "finished" for j in task.jobs)
    steps = sorted((panda.jedi.workroot / str(task.task_id) / "idds").glob("step-*/out.json"))
    assert len(steps) >= 2  # a fresh `gridml steer` per step, results fed back
    second = json.loads((steps[1].parent / "in.json").read_text())["points"]
    assert second[0][1] is not None, second  # the first point's loss, fed to the next step
    assert all(loss is not None for _, loss in task.idds_points)


def test_every_evaluation_is_a_trial_of_the_study(campaign: dict[str, Any]) -> None:
    c, panda = campaign["campaign"], campaign["panda"]
    task = next(iter(panda.jedi.tasks.values()))
    trials = c.store.list_trials(c.study.id)
    assert [t.state for t in trials] == ["completed"] * POINTS, [t.error for t in trials]
    assert c.store.get_study(c.study.id).state == "finished"
    by_point = {json.dumps(p, sort_keys=True): loss for p, loss in task.idds_points}
    for t in trials:
        assert t.source == "phpo" and t.external_id.startswith(f"phpo:{task.task_id}:")
        assert t.objective == pytest.approx(by_point[json.dumps(t.hparams, sort_keys=True)])
        assert [e.epoch for e in c.store.list_epochs(t.id)] == [1]
        assert t.outputs and t.outputs[0]["name"].endswith(".tgz")


def test_best_status_and_fetch_show_the_phpo_study(campaign: dict[str, Any]) -> None:
    c, tmp = campaign["campaign"], campaign["tmp"]
    trials = c.store.list_trials(c.study.id)
    best = gridml_json("best", "hpo")
    winner = min(trials, key=lambda t: t.objective)
    assert best["number"] == winner.number and best["hparams"] == winner.hparams
    assert best["objective"] == pytest.approx(winner.objective)
    status = gridml_json("status", "hpo")
    assert status["study"]["n_trials"] == POINTS and status["study"]["best"]["number"] == winner.number
    assert "best trial" in campaign["submit"].stdout
    gridml("fetch", "hpo", "--best", "-o", str(tmp / "best"))
    prefix = f"hpo.trial-{winner.number:04d}."
    names = {p.name for p in (tmp / "best").iterdir()}
    assert {prefix + n for n in ("model.keras", "model_source.py", "curves.png", "metrics.jsonl",
                                 "provenance.json", "result.json", "evaluation.json")} <= names, names
    assert not any(n.endswith(".tgz") for n in names)  # unpacked, as a local or PanDA trial's
    ev = json.loads((tmp / "best" / f"{prefix}evaluation.json").read_text())
    assert ev["hparams"] == winner.hparams and ev["loss"] == pytest.approx(winner.objective)


def test_the_best_phpo_model_is_fetched_and_predicts(campaign: dict[str, Any]) -> None:
    """What the PanDA e2e tests check of a fetched model, for a phpo trial: model.keras loads
    and predicts, model.onnx runs in onnxruntime, model_source.py is the one provenance names."""
    c, tmp = campaign["campaign"], campaign["tmp"]
    winner = min(c.store.list_trials(c.study.id), key=lambda t: t.objective)
    dest = tmp / "fetched"
    gridml("fetch", "hpo", "--trial", str(winner.number), "-o", str(dest))
    prefix = dest / f"hpo.trial-{winner.number:04d}."
    prov = json.loads(Path(f"{prefix}provenance.json").read_text())
    source = Path(f"{prefix}model_source.py").read_bytes()
    assert prov["model"]["sha256"] == hashlib.sha256(source).hexdigest()
    assert source == (ROOT / "examples" / "models" / "mlp.py").read_bytes()
    code = ("import sys, numpy as np, tensorflow as tf; m = tf.keras.models.load_model(sys.argv[1]); "
            "p = m.predict(np.random.default_rng(0).normal(size=(5, 10)).astype('float32'), verbose=0); "
            "assert p.shape == (5, 1) and np.all((p >= 0) & (p <= 1)); print('ok')")
    proc = subprocess.run([sys.executable, "-c", code, f"{prefix}model.keras"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]
    if importlib.util.find_spec("tf2onnx") is None:  # the export cannot run: the reason is kept
        assert not Path(f"{prefix}model.onnx").exists() and prov["runtime"]["onnx"]["reason"]
        return
    code = ("import sys, numpy as np, onnxruntime as ort; "
            "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider']); "
            "p = s.run(None, {s.get_inputs()[0].name: np.random.default_rng(0).normal("
            "size=(5, 10)).astype('float32')})[0]; "
            "assert p.shape == (5, 1) and np.all((p >= 0) & (p <= 1)); print('ok')")
    proc = subprocess.run([sys.executable, "-c", code, f"{prefix}model.onnx"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def test_the_controller_keeps_no_model_copy_in_runs(campaign: dict[str, Any]) -> None:
    """Following the task reads each tarball's records only: the models stay in the data store."""
    evaluations = campaign["tmp"] / "home" / "runs" / "hpo" / "phpo" / "evaluations"
    folders = [p for p in evaluations.iterdir() if not p.name.startswith(".")]
    assert len(folders) == POINTS
    for folder in folders:
        names = {p.name for p in folder.iterdir()}
        assert {"evaluation.json", "metrics.jsonl", "result.json"} <= names, names
        assert not names & {"model.keras", "model.onnx", "model_source.py"}, names
        assert not any(n.endswith(".tgz") for n in names)


def test_resume_follows_the_same_task_and_submits_nothing(campaign: dict[str, Any]) -> None:
    c, panda = campaign["campaign"], campaign["panda"]
    gridml("resume", "hpo", "--quiet")
    assert panda.jedi.inserts == 1
    assert len(c.store.list_trials(c.study.id)) == POINTS
