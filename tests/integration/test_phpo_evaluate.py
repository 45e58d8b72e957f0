"""`gridml evaluate` end to end: one phpo point trained by the real Keras + Horovod payload
(2 ranks on the job's 2 cores), output.json with the loss, the tarball with the metrics and the
trained model (each member's sha256 in its evaluation.json); a torch point returns model.pt and
model.onnx; a broken model gives a non-zero status and the reason."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gridml.executors.panda import phpo_outputs
from gridml.planner import output_name
from tests.helpers import ROOT, TORCH_PAYLOAD, assert_torch_model_matches_onnx, write_spec

pytestmark = [pytest.mark.slow]


def job_dir(tmp: Path, model: str | None = None, payload: str | None = None,
            workers: int = 2) -> Path:
    sys.path.insert(0, str(ROOT / "examples"))
    from make_sample_data import make_sample_data  # type: ignore[import-not-found]

    train, val = make_sample_data(tmp / "data", n_train=600, n_val=200, n_files=1, seed=3)
    job = tmp / "job"
    job.mkdir()
    sections = {}
    if model is not None:
        (tmp / "broken.py").write_text(model)
        sections["payload"] = f"payload:\n  model: {tmp / 'broken.py'}\n"
    if payload is not None:
        sections["payload"] = payload
    write_spec(job / "spec.yaml", "phpo-eval", "user.t:a", "user.t:b", **sections,
               training=f"training: {{epochs: 1, batch_size: 128, metrics: [accuracy], "
                        f"workers: {workers}}}\n",
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
        names = tar.getnames()
        ev = json.load(tar.extractfile("evaluation.json"))  # type: ignore[arg-type]
        for name, info in ev["files"].items():  # each member as evaluation.json lists it
            data = tar.extractfile(name).read()  # type: ignore[union-attr]
            assert info == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name
    assert {"metrics.jsonl", "curves.png", "provenance.json", "result.json", "payload.log",
            "model.keras", "model_source.py"} <= set(names) == set(ev["files"]) | {"evaluation.json"}
    assert names[0] == "evaluation.json" and names.index("model.keras") > names.index("payload.log")
    assert ("model.onnx" in names) == (importlib.util.find_spec("tf2onnx") is not None)
    assert out["metrics"] == names  # output.json (what runHPO parses) only names them
    result = json.loads((job / "outputs" / "result.json").read_text())
    assert out["loss"] == pytest.approx(result["objective_metrics"]["val_loss"])


def test_a_torch_point_returns_model_pt_that_rebuilds(tmp_path: Path) -> None:
    """payload.framework torch: the tarball carries model.pt, model_source.py and model.onnx;
    unpacked as `gridml fetch` unpacks it, model.pt rebuilds from its prefixed model_source.py and
    model.onnx runs in onnxruntime."""
    pytest.importorskip("torch")
    job = job_dir(tmp_path, payload=TORCH_PAYLOAD, workers=1)  # (two ranks: the Keras point's)
    proc = evaluate(job)
    out = json.loads((job / "output.json").read_text())
    assert proc.returncode == 0 and out["status"] == 0, (out, proc.stderr[-3000:])
    assert {"model.pt", "model_source.py", "model.onnx"} <= set(out["metrics"])
    assert "model.keras" not in out["metrics"]
    got = phpo_outputs.unpack(job / "metrics.tgz", tmp_path / "fetched",
                              lambda n: output_name("phpo-eval", 0, n))
    pt = next(p for p in got if p.name.endswith(".model.pt"))
    onnx = next(p for p in got if p.name.endswith(".model.onnx"))
    assert_torch_model_matches_onnx(pt, onnx)


def test_a_broken_model_gives_a_status_and_the_reason(tmp_path: Path) -> None:
    job = job_dir(tmp_path, model="def build_model(hparams, input_shape):\n    raise ValueError('no such layer: Densse')\n",
                  workers=1)
    proc = evaluate(job)
    out = json.loads((job / "output.json").read_text())
    assert proc.returncode != 0 and out["status"] != 0 and out["loss"] is None
    assert "Densse" in out["message"], out
