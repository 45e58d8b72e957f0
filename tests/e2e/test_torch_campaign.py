"""A torch campaign on one machine: gridml submit -> local executor -> torchrun (2 ranks, gloo)
-> the metrics API -> fetch of model.pt and model.onnx."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import ROOT, gridml, gridml_json, make_registered_sample_data, write_spec

pytest.importorskip("torch")
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_torch_campaign_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    train, val = make_registered_sample_data(tmp_path, n_train=600, n_val=200)
    spec = write_spec(
        tmp_path / "spec.yaml", "torche2e", train, val,
        payload=f"payload:\n  framework: torch\n  model: {ROOT / 'examples/models/deepsets_torch.py'}\n",
        search=textwrap.dedent("""\
            search:
              algorithm: random
              objective: val_auc
              direction: maximize
              max_trials: 2
              parallel: 1
              seed: 3
              space:
                learning_rate: {type: real, low: 1.0e-3, high: 1.0e-2, log: true}
                units: {type: int, low: 8, high: 16}
            """))
    proc = gridml("submit", str(spec), "--quiet", timeout=900)
    trials = gridml_json("status", "torche2e")["trials"]
    assert [t["state"] for t in trials] == ["completed"] * 2, [t["error"] for t in trials]
    for t in trials:
        epochs = gridml_json("status", "torche2e", "--trial", str(t["number"]))["epochs"]
        assert [e["epoch"] for e in epochs] == [1, 2]
        assert {"loss", "auc", "val_loss", "val_auc"} <= set(epochs[0]["metrics"])
        assert all(e["samples_per_s"] > 0 and e["input_wait_frac"] is not None for e in epochs)
    best = gridml_json("best", "torche2e")
    assert f"best trial {best['number']}" in proc.stdout
    dest = tmp_path / "fetched"
    gridml("fetch", "torche2e", "--best", "-o", str(dest))
    names = {p.name for p in dest.iterdir()}
    prefix = f"torche2e.trial-{best['number']:04d}."
    assert {f"{prefix}model.pt", f"{prefix}model.onnx", f"{prefix}model_source.py"} <= names
    code = ("import sys, numpy as np, onnxruntime as ort; s = ort.InferenceSession(sys.argv[1]); "
            "p = s.run(None, {s.get_inputs()[0].name: np.zeros((3, 10), 'f4')})[0]; "
            "assert p.shape == (3, 1); print('ok')")
    run = subprocess.run([sys.executable, "-c", code, str(dest / f"{prefix}model.onnx")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-2000:]


def test_gridml_scale_with_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    train, val = make_registered_sample_data(tmp_path, n_train=1200, n_val=200)
    spec = write_spec(
        tmp_path / "spec.yaml", "tsc", train, val,
        payload=f"payload:\n  framework: torch\n  model: {ROOT / 'examples/models/deepsets_torch.py'}\n",
        training="training:\n  epochs: 2\n  batch_size: 128\n  workers: 2\n")
    doc = json.loads(gridml("scale", str(spec), "--workers", "1,2", "--hparams",
                            '{"learning_rate": 0.01, "units": 16, "dropout": 0.1, "activation": "relu"}',
                            "--json", timeout=900).stdout)
    rows = doc["rows"]
    assert [r["workers"] for r in rows] == [1, 2]
    assert all(r["samples_per_s"] > 0 and r["epoch_time"] > 0 for r in rows)
    assert rows[1]["global_batch"] == 128
    # two ranks under torchrun: it was told the per-rank threads (no "in default" banner)
    (log,) = (tmp_path / "home" / "runs" / "tsc-scale-w2").glob("trial-*/attempt-1/payload.log")
    text = log.read_text()
    assert "process group gloo" in text and "Setting OMP_NUM_THREADS" not in text, text[-3000:]
