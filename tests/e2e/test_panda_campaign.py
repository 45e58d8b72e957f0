"""A whole campaign through PanDA: 2 trials x 2 Horovod ranks x 2 epochs, real panda-client.

``gridml submit spec.yaml`` runs in its own process, as a user runs it, with
``backend.executor: panda`` and PANDA_URL_SSL pointing at the PanDA double in this process, which
plays JEDI and the pilot: every trial's task is defined from its parameters, its
job stages the input files in from the local store, runs the pilot wrapper and the real Keras +
Horovod payload, and stages the outputs out into the task's output datasets, from where the
executor fetches metrics and results and ``gridml fetch`` gets the best model. The first job
loses its worker node, so one trial goes through the controller's retry (``retryTask``).

Small on purpose: every rank pays TensorFlow's import, so 2 trials (both at once: the one whose
first job is lost and one that is not) on tiny data; this is the Keras + Horovod PanDA campaign
(tests/e2e/test_panda_torch_campaign.py runs torch's).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gridml.executors.panda.executor import task_id_of
from tests.helpers import gridml, gridml_json, search_section
from tests.panda_double import PandaDouble
from tests.panda_double.campaign import make_campaign, panda_spec, register_sample_data

TRIALS = 2
SEARCH = search_section(max_trials=TRIALS, parallel=2)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.service]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("panda-campaign")
    mp = pytest.MonkeyPatch()
    mp.setenv("GRIDML_HOME", str(tmp / "home"))
    train, val = register_sample_data(tmp, n_train=800, n_val=300)
    spec = panda_spec(tmp, "grid", train, val, search=SEARCH,
                      # retries: 2, a busy machine may fail a real job
                      backend="backend: {executor: panda, data: local, server: embedded, retries: 2}\n")
    with PandaDouble(tmp / "panda") as panda:
        for key, value in panda.client_env().items():
            mp.setenv(key, value)
        panda.jedi.fail_next = 1  # the first job's worker node goes away
        proc = gridml("submit", str(spec), "--quiet", timeout=1500)
        c = make_campaign(spec)  # the same study, read back from the store
        yield {"tmp": tmp, "campaign": c, "panda": panda, "submit": proc}
    mp.undo()


def test_every_trial_ran_as_a_panda_task_to_completion(campaign: dict[str, Any]) -> None:
    c, panda = campaign["campaign"], campaign["panda"]
    trials = c.store.list_trials(c.study.id)
    assert len(trials) == TRIALS
    jobs = {t.task_id: (t.history, [j.diag for j in t.jobs]) for t in panda.jedi.tasks.values()}
    assert [t.state for t in trials] == ["completed"] * TRIALS, ([t.error for t in trials], jobs)
    tasks = {task_id_of(t.external_id): t for t in trials}
    assert len(tasks) == TRIALS and set(tasks) == set(panda.jedi.tasks)
    for task_id, trial in tasks.items():
        task = panda.jedi.get(task_id)
        assert task.params["taskName"] == f"user.jtester.grid.trial-{trial.number:04d}/"
        assert task.status == "done" and task.history[:4] == ["registered", "defined", "ready", "running"]
        epochs = c.store.list_epochs(trial.id)
        assert [e.epoch for e in epochs] == [1, 2] and trial.objective is not None
        assert all(e.epoch_time > 0 for e in epochs)


def test_a_lost_worker_node_is_retried_with_retry_task(campaign: dict[str, Any]) -> None:
    c, panda = campaign["campaign"], campaign["panda"]
    lost = [t for t in panda.jedi.tasks.values() if "worker node went away" in t.jobs[0].diag]
    assert len(lost) == 1
    task = lost[0]
    assert task.history == ["registered", "defined", "ready", "running", "failed",
                            "ready", "running", "done"]  # retryTask: the same task, a second job
    assert [j.status for j in task.jobs] == ["failed", "finished"]
    for other in panda.jedi.tasks.values():  # a busy machine may fail a real job too: retried alike
        assert other.history[-1] == "done" and other.history.count("running") == len(other.jobs)
    trial = next(t for t in c.store.list_trials(c.study.id) if t.external_id == f"panda:{task.task_id}")
    assert trial.attempts == 2


def test_outputs_were_staged_out_by_the_pilot_and_recorded(campaign: dict[str, Any]) -> None:
    c = campaign["campaign"]
    for trial in c.store.list_trials(c.study.id):
        names = {o["name"].rsplit(".", 2)[-2] + "." + o["name"].rsplit(".", 1)[-1] for o in trial.outputs}
        assert {"model.keras", "curves.png", "metrics.jsonl", "provenance.json", "result.json"} <= names
        if _has("tf2onnx"):  # the export works for this model: the optional output came back too
            assert "model.onnx" in names, names
        assert all(o["did"].startswith("user.jtester:user.jtester.") and o["bytes"] > 0 for o in trial.outputs)
        outputs = c.runs_dir / "grid" / f"trial-{trial.number:04d}" / "outputs"
        assert (outputs / "metrics.jsonl").is_file() and (outputs / "result.json").is_file()


def test_the_best_model_is_fetched_and_predicts(campaign: dict[str, Any]) -> None:
    env = {"GRIDML_HOME": str(campaign["tmp"] / "home")}
    best = gridml_json("best", "grid", env=env)
    assert f"best trial {best['number']}" in campaign["submit"].stdout
    c = campaign["campaign"]
    objectives = [t.objective for t in c.store.list_trials(c.study.id)]
    assert best["objective"] == min(objectives)
    dest = Path(campaign["tmp"]) / "fetched"
    gridml("fetch", "grid", "--best", "-o", str(dest), env=env)
    model = next(p for p in dest.iterdir() if p.name.endswith(".keras"))
    onnx = None
    if _has("tf2onnx"):  # the optional output, as locally; checked in the same interpreter
        onnx = next(p for p in dest.iterdir() if p.name.endswith(".model.onnx"))
    code = ("import sys, numpy as np, tensorflow as tf\n"
            "m = tf.keras.models.load_model(sys.argv[1])\n"
            "x = np.random.default_rng(0).normal(size=(5, 10)).astype('float32')\n"
            "p = m.predict(x, verbose=0)\n"
            "assert p.shape == (5, 1) and np.all((p >= 0) & (p <= 1)), p\n"
            "if len(sys.argv) > 2:\n"
            "    import onnxruntime as ort\n"
            "    s = ort.InferenceSession(sys.argv[2], providers=['CPUExecutionProvider'])\n"
            "    o = s.run(None, {s.get_inputs()[0].name: x})[0]\n"
            "    assert o.shape == (5, 1) and np.all((o >= 0) & (o <= 1)), o\n"
            "print('ok')")
    proc = subprocess.run([sys.executable, "-c", code, str(model), *([str(onnx)] if onnx else [])],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
