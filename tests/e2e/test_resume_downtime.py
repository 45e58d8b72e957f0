"""Resume never destroys finished work (issue 24, point 3): the real `gridml submit` killed with
SIGKILL as soon as its trials are started, kept down for 3 x ``backend.heartbeat_timeout`` while
they train and finish on their own (their reports cannot reach the dead controller's API: they
spool them, and retry their posts), then a real `gridml resume` while they may still be
retrying: every trial is completed with its model and all its epochs, and none is run again.

Robust on a loaded machine: the controller dies before any trial could be judged silent, so a
torch start-up slower than the heartbeat timeout (as under a load of 15 on 2 cores) is never
taken for a hang; the test waits on each trial's spool holding all its epochs, never on time
alone; the payloads train a few short epochs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gridml.errors import GridmlError
from gridml.store import open_store
from tests.helpers import gridml, make_registered_sample_data, start_gridml, wait_for, write_spec

pytest.importorskip("torch")
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HEARTBEAT_TIMEOUT_S = 10
EPOCHS = 3
MODEL = '''
import time
from torch import nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, 1)

    def forward(self, x):
        if self.training:
            time.sleep(0.1)  # epochs of about a second: still training when the controller dies
        return self.lin(x)


def build_model(hparams, input_shape):
    return Model(int(input_shape[0]))
'''


def test_resume_after_3_heartbeat_timeouts_adopts_every_finished_trial(
        tmp_path: Path, gridml_home: Path) -> None:
    data = make_registered_sample_data(tmp_path, n_train=600, n_val=200, files=1)
    (tmp_path / "model.py").write_text(MODEL)
    spec = write_spec(
        tmp_path / "spec.yaml", "downtime", *data,
        payload=f"payload: {{framework: torch, model: {tmp_path / 'model.py'}}}\n",
        search=("search:\n  algorithm: random\n  objective: val_loss\n  max_trials: 2\n"
                "  parallel: 2\n  seed: 1\n  space:\n    units: {type: int, low: 1, high: 9}\n"),
        training=f"training: {{epochs: {EPOCHS}, batch_size: 64, workers: 1, metrics: [accuracy]}}\n",
        backend=("backend: {executor: local, data: local, server: embedded, retries: 2, "
                 f"heartbeat_timeout: {HEARTBEAT_TIMEOUT_S}s}}\n"))
    proc = start_gridml("submit", str(spec), "--quiet")
    store = open_store()
    runs = gridml_home / "runs" / "downtime"
    try:
        def trials() -> list[Any]:
            try:
                return store.list_trials(store.get_study("downtime").id)
            except GridmlError:  # the study is not created yet
                return []

        def all_started() -> list[Any]:
            ts = trials()
            return ts if len(ts) == 2 and all(t.external_id for t in ts) else []

        before = wait_for(all_started, 300, lambda: f"both trials started: {trials()}",
                          interval=0.1)
        proc.kill()  # SIGKILL: the controller and its embedded API are gone at once
        proc.wait(timeout=30)
        down_since = time.monotonic()
        attempts = {t.number: t.attempts for t in before}
        folders = {n: sorted(p.name for p in (runs / f"trial-{n:04d}").glob("attempt-*"))
                   for n in attempts}

        def trained_alone() -> bool:  # every epoch of each trial in its spool
            spools = [runs / f"trial-{t.number:04d}" / "outputs" / "metrics.jsonl" for t in before]
            return all(p.exists() and len(p.read_text().splitlines()) >= EPOCHS for p in spools)

        wait_for(trained_alone, 400, "the trials to train without their controller",
                 interval=0.5)
        # the controller stays down for 3 heartbeat timeouts: no heartbeat reached anyone
        wait_for(lambda: time.monotonic() - down_since >= 3 * HEARTBEAT_TIMEOUT_S,
                 4 * HEARTBEAT_TIMEOUT_S, "3 heartbeat timeouts of downtime", interval=0.5)
        assert all(t.state in ("submitted", "running") for t in trials())  # as it was left
        assert all(t.epochs_done < EPOCHS for t in trials())  # their reports did not get through
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        gridml("resume", "downtime", "--quiet", timeout=300)
        after = trials()
        assert [t.state for t in after] == ["completed", "completed"], \
            [(t.number, t.state, t.error) for t in after]
        for t in after:
            assert t.attempts == attempts[t.number], t  # adopted, never run again
            assert sorted(p.name for p in (runs / f"trial-{t.number:04d}").glob("attempt-*")) \
                == folders[t.number]
            assert t.epochs_done == EPOCHS and t.objective is not None
            assert [e.epoch for e in store.list_epochs(t.id)] == list(range(1, EPOCHS + 1))
            assert any(o["name"].endswith("model.pt") for o in t.outputs), t.outputs
    finally:
        store.close()
