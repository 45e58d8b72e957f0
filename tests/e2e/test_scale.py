"""`gridml scale`: the same training over 1 and 2 Horovod ranks, table and plot (real runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import gridml, make_registered_sample_data, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_scaling_study_over_one_and_two_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    train, val = make_registered_sample_data(tmp_path, n_train=6000, n_val=600)
    spec = write_spec(tmp_path / "spec.yaml", "sc", train, val,
                      training="training:\n  epochs: 3\n  batch_size: 256\n  workers: 2\n")
    doc = json.loads(gridml("scale", str(spec), "--workers", "1,2", "--hparams",
                            '{"learning_rate": 0.01, "units": 16, "dropout": 0.1, "activation": "relu"}',
                            "--json").stdout)
    rows = doc["rows"]
    assert [r["workers"] for r in rows] == [1, 2]
    assert rows[0]["speedup"] == 1.0 and rows[0]["efficiency"] == 1.0
    assert all(r["samples_per_s"] > 0 and r["epoch_time"] > 0 for r in rows)
    assert rows[1]["global_batch"] == 256  # global batch kept: 128 per rank
    assert rows[1]["efficiency"] == pytest.approx(rows[1]["speedup"] / 2, abs=1e-3)
    assert Path(doc["plot"]).stat().st_size > 0
    listed = gridml("data", "ls", "user.test:sc.out", "--json").stdout
    assert "sc.scaling.png" in listed
    # two ranks: Horovod's broadcast after batch 0 is no "slow callback" (payloads/runtime/fit.py)
    (log,) = (tmp_path / "home" / "runs" / "sc-scale-w2").glob("trial-*/attempt-1/payload.log")
    text = log.read_text()
    assert "2 ranks" in text and "Check your callbacks" not in text, text[-3000:]
