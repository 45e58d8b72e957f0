"""`gridml evaluate` end to end: one phpo point trained by the real Keras + Horovod payload
(2 ranks on the job's 2 cores), output.json with the loss, the metrics tarball; a broken model
gives a non-zero status and the reason."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.helpers import ROOT, write_spec

pytestmark = [pytest.mark.slow]


def job_dir(tmp: Path, model: str | None = None) -> Path:
    sys.path.insert(0, str(ROOT / "examples"))
    from make_sample_data import make_sample_data  # type: ignore[import-not-found]

    train, val = make_sample_data(tmp / "data", n_train=600, n_val=200, n_files=1, seed=3)
    job = tmp / "job"
    job.mkdir()
    payload = {}
    if model is not None:
        (tmp / "broken.py").write_text(model)
        payload["payload"] = f"payload:\n  model: {tmp / 'broken.py'}\n"
    write_spec(job / "spec.yaml", "phpo-eval", "user.t:a", "user.t:b", **payload,
               training="training: {epochs: 1, batch_size: 128, metrics: [accuracy], workers: 2}\n",
               resources="resources: {cores: 2, gpus: 0, memory_gb: 2, walltime: 20m}\n")
    (job / "input.json").write_text(json.dumps(
        {"learning_rate": 0.01, "units": 12, "dropout": 0.1, "activation": "relu"}))
    (job / "input_ds.json").write_text(json.dumps({"train": list(map(str, train)),
                                                   "validation": list(map(str, val))}))
    return job


def evaluate(job: Path) -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "ATHENA_CORE_NUMBER": "2", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "gridml.cli", "evaluate", "--spec", "spec.yaml",
                           "--evaluationMetrics", "metrics.tgz"], cwd=job, env=env,
                          capture_output=True, text=True, timeout=900, check=False)


def test_a_point_is_trained_and_its_loss_written(tmp_path: Path) -> None:
    job = job_dir(tmp_path)
    proc = evaluate(job)
    out = json.loads((job / "output.json").read_text())
    assert proc.returncode == 0 and out["status"] == 0, (out, proc.stderr[-3000:])
    assert isinstance(out["loss"], float) and out["loss"] > 0 and "val_loss" in out["message"]
    trial = json.loads((job / "trial.json").read_text())
    assert trial["training"]["workers"] == 2 and trial["hparams"]["units"] == 12
    with tarfile.open(job / "metrics.tgz") as tar:
        assert {"metrics.jsonl", "curves.png", "provenance.json", "result.json"} <= set(tar.getnames())
    result = json.loads((job / "outputs" / "result.json").read_text())
    assert out["loss"] == pytest.approx(result["objective_metrics"]["val_loss"])


def test_a_broken_model_gives_a_status_and_the_reason(tmp_path: Path) -> None:
    job = job_dir(tmp_path, model="def build_model(hparams, input_shape):\n    raise ValueError('no such layer: Densse')\n")
    proc = evaluate(job)
    out = json.loads((job / "output.json").read_text())
    assert proc.returncode != 0 and out["status"] != 0 and out["loss"] is None
    assert "Densse" in out["message"], out
