"""The live channel with real payload processes (the torch payload, one rank: started alone, no torchrun) run
by the real local executor, the real controller loop and a SQLite store, and no metrics API (the
trial documents carry no API, as on a Slurm node that cannot reach the controller): epochs
reach the store while the trial runs, a trial is pruned through decision.json, and a trial hung
in ``forward`` is caught by its progress, its stacks dumped, retried once and failed "stalled".
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from gridml.controller import Campaign
from gridml.data.local import LocalStore
from gridml.executors.local import LocalExecutor
from gridml.live import describe_progress
from gridml.spec import load_spec
from gridml.store import open_store
from tests.helpers import ROOT, write_spec

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

MODEL = '''
import time
import torch
from torch import nn


class Model(nn.Module):
    """mode learn: learns; never: always says signal; hang: sleeps in forward in epoch 2."""

    def __init__(self, n, mode):
        super().__init__()
        self.lin = nn.Linear(n, 1)
        self.mode = mode
        self.calls = 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.mode == "hang" and self.calls > 14:  # 13 batches an epoch
                time.sleep(3600)
            if self.mode == "learn":
                time.sleep(0.08)  # epochs of about a second: seen while they run
        if self.mode == "never":
            return self.lin(x) * 0.0 + 20.0  # sure it is signal: a large loss on the background
        return self.lin(x)


def build_model(hparams, input_shape):
    return Model(int(input_shape[0]), hparams["mode"])
'''


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path]]:
    sys.path.insert(0, str(ROOT / "examples"))
    from make_sample_data import make_sample_data  # type: ignore[import-not-found]

    return make_sample_data(tmp_path_factory.mktemp("data"), n_train=800, n_val=200, n_files=1)


MEDIAN = "{rule: median, min_epochs: 1, min_trials: 1}"
ASHA = "{rule: asha, min_epochs: 1, reduction: 2}"
# the same trial is pruned after the same epoch by either rule (and on Slurm:
# tests/slurm/test_slurm_live.py); the reason says which rule decided
RULES = [pytest.param(MEDIAN, "worse than median", id="median"),
         pytest.param(ASHA, "outside the top 1 kept", id="asha")]


def campaign(tmp: Path, sample: tuple, modes: list[str], rule: str = MEDIAN,
             **backend: str) -> Campaign:
    data = LocalStore(tmp / "store")
    data.upload(list(sample[0]), "user.t:train")
    data.upload(list(sample[1]), "user.t:val")
    (tmp / "model.py").write_text(MODEL)
    extra = "".join(f", {k}: {v}" for k, v in backend.items())
    spec = write_spec(
        tmp / "spec.yaml", "live", "user.t:train", "user.t:val",
        payload=f"payload: {{framework: torch, model: {tmp / 'model.py'}}}\n",
        training=textwrap.dedent("""\
            training: {epochs: 3, batch_size: 64, metrics: [accuracy], workers: 1}
            """),
        search=textwrap.dedent(f"""\
            search:
              algorithm: random
              objective: val_loss
              max_trials: {len(modes)}
              parallel: 1
              early_stopping: {rule}
              space:
                mode: {{type: categorical, choices: [learn, never, hang]}}
            """),
        resources="resources: {cores: 2, gpus: 0, memory_gb: 2, walltime: 20m}\n",
        backend=f"backend: {{executor: local, data: local, server: embedded{extra}}}\n")
    store = open_store(f"sqlite:///{tmp / 'db.sqlite'}")
    c = Campaign(load_spec(spec, did_exists=data.exists), store, LocalExecutor(grace_s=3), data,
                 tmp / "runs", api_url=None, poll_s=0.3)
    for mode in modes:  # in this order, one at a time: the searcher is not asked
        store.create_trial(c.study.id, {"mode": mode})
    return c


def run(c: Campaign, timeout: float, watch: Any = None) -> None:
    end = time.monotonic() + timeout
    while not c.step():
        if watch is not None:
            watch()
        assert time.monotonic() < end, [(t.number, t.state, t.error)
                                        for t in c.store.list_trials(c.study.id)]
        time.sleep(c.poll_s)


@pytest.mark.parametrize(("rule", "why"), RULES)
def test_epochs_show_while_running_and_a_trial_is_pruned_through_the_folder(
        tmp_path: Path, sample: tuple, rule: str, why: str) -> None:
    c = campaign(tmp_path, sample, ["learn", "never"], rule)
    seen: list[tuple[int, int, str]] = []  # (trial, epochs stored, progress) while it runs

    def watch() -> None:
        for t in c.store.list_trials(c.study.id, states=("running",)):
            exit_code = Path(t.external_id or "/nowhere") / "exit_code"
            epochs = len(c.store.list_epochs(t.id))
            if epochs and not exit_code.exists():
                seen.append((t.number, epochs, describe_progress(c.live.progress(t.number))))

    run(c, 400, watch)
    trials = c.store.list_trials(c.study.id)
    assert [t.state for t in trials] == ["completed", "pruned"], [t.error for t in trials]
    # the learning trial's epochs were in the store before its job ended, with its progress
    mine = [s for s in seen if s[0] == 0]
    assert mine and min(s[1] for s in mine) < 3, seen
    assert any(s[2].startswith("epoch ") and "/13" in s[2] for s in mine), seen
    # the other one stopped after epoch 1, as the API's should-stop would have said
    pruned = c.store.list_epochs(trials[1].id)
    assert [e.epoch for e in pruned] == [1]
    result = json.loads((c.paths.trial_outputs(1) / "result.json").read_text())
    assert result["state"] == "pruned" and why in result["reason"], result
    assert json.loads(c.paths.decision(1).read_text())["stop"] is True
    assert json.loads(c.paths.live_state.read_text())["spools"]


def test_a_trial_hung_in_forward_is_dumped_killed_retried_once_and_failed_stalled(
        tmp_path: Path, sample: tuple) -> None:
    c = campaign(tmp_path, sample, ["hang"], stall_timeout="3s", retries="0")
    run(c, 400)
    (trial,) = c.store.list_trials(c.study.id)
    assert trial.state == "failed" and trial.attempts == 2, (trial.state, trial.error)
    assert trial.error.startswith("stalled: no batch for "), trial.error
    for attempt in (1, 2):
        log = (c.paths.trial(0) / f"attempt-{attempt}" / "payload.log").read_text()
        assert "most recent call first" in log and "in forward" in log, log[-3000:]
    # the second attempt resumed from its checkpoint: it hung in epoch 3
    progress = json.loads(c.paths.progress(0).read_text())
    assert progress["epoch"] in (2, 3) and progress["batches"] == 13, progress
    assert progress["attempt"] == 2, progress  # the executor told the payload its attempt
