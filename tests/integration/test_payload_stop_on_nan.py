"""training.stop_on_nan: a torch trial whose loss goes NaN in epoch 2 stops there on every rank
(no epochs 3-5 run), and its result says ``diverged`` (the controller records it so: never best,
tests/integration/test_diverged.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from test_payload_torch import _epochs, run_torch, torch_trial

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

MODEL = """
from pathlib import Path

import torch
from torch import nn

SPOOL = Path(__file__).with_name("outputs") / "metrics.jsonl"


class GoesNaN(nn.Module):
    \"\"\"Learns in epoch 1; once epoch 1 is reported (rank 0 spooled it), its training output
    is NaN: the weights go NaN at the first step of epoch 2 (gradients are averaged over ranks).\"\"\"

    def __init__(self, n):
        super().__init__()
        self.net = nn.Linear(n, 1)

    def forward(self, x):
        out = self.net(x)
        spooled = SPOOL.exists() and SPOOL.stat().st_size > 0
        return out * float("nan") if self.training and spooled else out


def build_model(hparams, input_shape):
    return GoesNaN(int(input_shape[0]))
"""


@pytest.mark.parametrize("stop_on_nan", [True, False])
def test_stop_on_nan_ends_the_trial_diverged_at_the_first_nan_epoch(
        tmp_path: Path, stop_on_nan: bool) -> None:
    from make_sample_data import make_sample_data

    train, val = make_sample_data(tmp_path / "data", n_train=600, n_val=200, n_files=1)
    model = tmp_path / "goes_nan.py"
    model.write_text(MODEL)
    trial = torch_trial(tmp_path, train, val, model=model, epochs=4, batch_size=64,
                        metrics=["accuracy"], stop_on_nan=stop_on_nan)
    proc = run_torch(trial)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "outputs"
    result = json.loads((out / "result.json").read_text())
    reports = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert math.isfinite(reports[0]["metrics"]["val_loss"])
    assert reports[1]["metrics"]["val_loss"] is None  # NaN, written as null
    if stop_on_nan:
        assert _epochs(out) == [1, 2]
        assert result["state"] == "diverged" and result["epochs"] == 2
        assert "not finite after epoch 2" in result["reason"]
    else:  # without the option the trial runs its 4 epochs (and the controller judges it)
        assert _epochs(out) == [1, 2, 3, 4] and result["state"] == "completed"
