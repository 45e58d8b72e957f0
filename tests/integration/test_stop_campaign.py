"""`gridml stop` on a real local campaign (a `gridml submit` in the background, the real CLI in
the foreground): `--trial N` stops that trial only, after its epoch, with its model (the campaign
takes its next trial); `--trial N --now` cancels one; `gridml stop STUDY` ends the running ones
after their epoch, the study takes no new trial and ends `stopped`, and `submit` exits 0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gridml.errors import GridmlError
from gridml.store import open_store
from tests.helpers import (
    gridml,
    gridml_json,
    make_registered_sample_data,
    start_gridml,
    wait_for,
    write_spec,
)

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

SLOW_MODEL = '''
import time
from torch import nn


class Slow(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, 1)

    def forward(self, x):
        if self.training:
            time.sleep(0.2)  # epochs of about 2 s: stopped mid-campaign
        return self.lin(x)


def build_model(hparams, input_shape):
    return Slow(int(input_shape[0]))
'''


def test_gridml_stop_one_trial_now_and_the_whole_study(tmp_path: Path, gridml_home: Path) -> None:
    data = make_registered_sample_data(tmp_path, n_train=600, n_val=200, files=1)
    (tmp_path / "slow.py").write_text(SLOW_MODEL)
    spec = write_spec(
        tmp_path / "spec.yaml", "stop-me", *data,
        payload=f"payload: {{framework: torch, model: {tmp_path / 'slow.py'}}}\n",
        search=("search:\n  algorithm: random\n  objective: val_loss\n  max_trials: 4\n"
                "  parallel: 2\n  seed: 1\n"
                "  space:\n    units: {type: int, low: 1, high: 1000}\n"),
        training="training: {epochs: 40, batch_size: 64, workers: 1, metrics: [accuracy]}\n",
        backend="backend: {executor: local, data: local, server: embedded, retries: 2}\n")
    proc = start_gridml("submit", str(spec), "--quiet")
    store = None
    try:
        def trials() -> list[Any]:
            nonlocal store
            try:
                store = store or open_store()
                return store.list_trials(store.get_study("stop-me").id)
            except GridmlError:  # not created yet
                return []

        def by_number(n: int) -> Any:
            return next(t for t in trials() if t.number == n)

        def log() -> str:
            return proc.stderr.read() if proc.poll() is not None and proc.stderr else ""

        wait_for(lambda: len([t for t in trials() if t.epochs_done >= 1]) == 2, 240,
                 lambda: f"both trials' first epoch: {trials()} {log()}", interval=0.2)
        # one trial, gracefully: it ends its epoch, saves its model, ends stopped
        out = gridml("stop", "stop-me", "--trial", "0").stdout
        assert "1 running trial(s) asked to stop" in out, out
        t0 = wait_for(lambda: (t := by_number(0)).state == "stopped" and t, 120,
                      lambda: f"trial 0 stopped: {trials()} {log()}", interval=0.2)
        assert 1 <= t0.epochs_done < 40 and t0.error.startswith("stopped (gridml stop)")
        assert any(o["name"].endswith("model.pt") for o in t0.outputs), t0
        # the campaign goes on: trial 1 still runs, trial 2 took trial 0's slot
        wait_for(lambda: len(trials()) == 3, 60, lambda: f"a third trial: {trials()}",
                 interval=0.2)
        assert by_number(1).state == "running"
        # one trial now: its job is cancelled
        gridml("stop", "stop-me", "--trial", "1", "--now")
        t1 = wait_for(lambda: (t := by_number(1)).state == "stopped" and t, 60,
                      lambda: f"trial 1 stopped: {trials()} {log()}", interval=0.2)
        assert "--now" in t1.error and t1.epochs_done < 40, t1
        # the whole study: the running trial ends after its (first) epoch, no new trial
        doc = json.loads(gridml("stop", "stop-me", "--json").stdout)
        assert doc["state"] == "stopping" and doc["trials"], doc
        made = len(trials())
        proc.wait(timeout=120)
        err = proc.stderr.read() if proc.stderr else ""
        assert proc.returncode == 0, err[-3000:]
        assert "stopped (gridml stop)" in proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        if store is not None:
            store.close()
    status = gridml_json("status", "stop-me")
    assert status["study"]["state"] == "stopped"
    ended = status["trials"]
    assert len(ended) == made and all(t["state"] == "stopped" for t in ended), ended
    assert all(t["epochs_done"] < 40 for t in ended)
    # a finished study has nothing to stop: one line, no traceback
    again = gridml("stop", "stop-me", check=False)
    assert again.returncode != 0 and "nothing to stop" in again.stderr
    assert "Traceback" not in again.stderr
