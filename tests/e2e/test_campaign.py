"""A real campaign on one machine: real Horovod + TF payloads, skopt, HTTP metrics API, local store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import gridml, gridml_json, make_registered_sample_data, search_section, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SEARCH = search_section(max_trials=4, parallel=4)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """4 trials x 1 Horovod rank x 2 epochs, bayes, all 4 at once: run once, inspected by the
    tests. One rank (the payload started alone: still Horovod, on Gloo in one process): every rank is one more
    TensorFlow import (~7 s of CPU) and nothing here asserts about ranks; two ranks of the Keras
    payload are run by tests/e2e/test_scale.py. All 4 at once: the
    4 points are bayes' Sobol design points whatever the batches (n_initial_points >= 5), and
    one wave of trials does not wait for the slower trial of the first."""
    tmp = tmp_path_factory.mktemp("campaign")
    mp = pytest.MonkeyPatch()
    mp.setenv("GRIDML_HOME", str(tmp / "home"))
    train, val = make_registered_sample_data(tmp)
    training = "training: {epochs: 2, batch_size: 128, metrics: [accuracy, auc], workers: 1}\n"
    spec = write_spec(tmp / "spec.yaml", "e2e", train, val, training=training, search=SEARCH,
                      resources="resources: {cores: 1, gpus: 0, memory_gb: 2, walltime: 20m}\n")
    proc = gridml("submit", str(spec), "--quiet", timeout=1500)
    yield {"tmp": tmp, "spec": spec, "submit": proc}
    mp.undo()


def test_every_trial_has_per_epoch_metrics_and_time(campaign: dict[str, object]) -> None:
    doc = gridml_json("status", "e2e")
    trials = doc["trials"]
    assert len(trials) == 4
    assert [t["state"] for t in trials] == ["completed"] * 4, [t["error"] for t in trials]
    for t in trials:
        assert t["epochs_done"] == 2
        assert t["time_per_epoch"] > 0 and t["objective"] > 0
        assert set(t["hparams"]) == {"learning_rate", "units", "dropout", "activation"}
        epochs = gridml_json("status", "e2e", "--trial", str(t["number"]))["epochs"]
        assert [e["epoch"] for e in epochs] == [1, 2]
        assert {"loss", "val_loss", "val_accuracy"} <= set(epochs[0]["metrics"])
        assert all(e["epoch_time"] > 0 and e["samples_per_s"] > 0 for e in epochs)
    # four distinct proposals
    assert len({tuple(sorted(t["hparams"].items())) for t in trials}) == 4
    assert doc["study"]["convergence_plot"] and Path(doc["study"]["convergence_plot"]).stat().st_size > 0


def test_best_trial_is_reported_and_fetched_and_its_model_predicts(campaign: dict[str, object]) -> None:
    out = campaign["submit"].stdout  # type: ignore[attr-defined]
    best = gridml_json("best", "e2e")
    doc = gridml_json("status", "e2e")
    objectives = [t["objective"] for t in doc["trials"]]
    assert best["objective"] == min(objectives)
    assert f"best trial {best['number']}" in out
    dest = Path(campaign["tmp"]) / "fetched"  # type: ignore[arg-type]
    gridml("fetch", "e2e", "--best", "-o", str(dest))
    names = sorted(p.name for p in dest.iterdir())
    prefix = f"e2e.trial-{best['number']:04d}."
    assert f"{prefix}metrics.jsonl" in names and f"{prefix}provenance.json" in names
    assert f"{prefix}curves.png" in names
    model = next(dest / n for n in names if n.endswith((".keras", ".h5")))
    code = ("import sys, numpy as np, tensorflow as tf; m = tf.keras.models.load_model(sys.argv[1]); "
            "p = m.predict(np.random.default_rng(0).normal(size=(5, 10)).astype('float32'), verbose=0); "
            "assert p.shape == (5, 1) and np.all((p >= 0) & (p <= 1)); print('ok')")
    proc = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def test_resubmitting_the_same_spec_continues_the_study(campaign: dict[str, object]) -> None:
    proc = gridml("submit", str(campaign["spec"]), "--quiet")
    assert "best trial" in proc.stdout
    assert len(gridml_json("status", "e2e")["trials"]) == 4  # nothing new was run
