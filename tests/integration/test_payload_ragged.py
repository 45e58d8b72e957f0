"""A model with a variable-length track input, trained by the real payload with bucketing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_payload_train import ROOT, run_payload, write_trial

pytestmark = pytest.mark.slow


def test_ragged_tracks_with_bucketing_train_on_two_ranks(tmp_path: Path) -> None:
    from make_sample_data import make_sample_data

    train, val = make_sample_data(tmp_path / "data", n_train=4000, n_val=1000, n_files=2,
                                  ragged=True)
    trial = write_trial(
        tmp_path, train, val, model_file=str(ROOT / "examples/models/deepsets.py"),
        hparams={"units": 16, "learning_rate": 0.003},
        data={"features": ["x", "tracks"], "ragged": ["tracks"]},
        training={"epochs": 2, "batch_size": 64, "bucket_by_length": True})
    proc = run_payload(trial)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "outputs"
    reports = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in reports] == [1, 2]
    assert reports[-1]["metrics"]["val_auc"] > 0.6
    assert json.loads((out / "result.json").read_text())["state"] == "completed"
