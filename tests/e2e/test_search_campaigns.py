"""Issue 7 in real campaigns: an evolutionary search, and ASHA early stopping pruning a bad trial.

Torch payloads (the example deep-sets model, one rank): what is tested is the searcher's and
the controller's, and a torch trial starts at half TensorFlow's cost (the Keras payload runs in
tests/e2e/test_campaign.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridml.search.stopping import decide
from tests.helpers import TORCH_PAYLOAD, gridml, gridml_json, make_registered_sample_data, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, needs_torch: None) -> tuple[Path, str, str]:
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    train, val = make_registered_sample_data(tmp_path, n_train=3000, n_val=600)
    return tmp_path, train, val


def test_evolution_campaign(data: tuple[Path, str, str]) -> None:
    # all 4 at once (one wave of trials): they are CMA-ES' first generation whatever the batches
    # (its default population over 3 parameters is 7)
    tmp, train, val = data
    search = """\
search:
  algorithm: evolution
  objective: val_loss
  max_trials: 4
  parallel: 4
  seed: 5
  space:
    learning_rate: {type: real, low: 1.0e-3, high: 3.0e-2, log: true}
    units: {type: int, low: 4, high: 32}
    activation: {type: categorical, choices: [relu, tanh]}
"""
    spec = write_spec(tmp / "spec.yaml", "evo", train, val, search=search, payload=TORCH_PAYLOAD,
                      training="training:\n  epochs: 2\n  batch_size: 128\n  workers: 1\n")
    gridml("submit", str(spec), "--quiet")
    trials = gridml_json("status", "evo")["trials"]
    assert [t["state"] for t in trials] == ["completed"] * 4
    assert len({tuple(sorted(t["hparams"].items())) for t in trials}) == 4
    for t in trials:
        assert 4 <= t["hparams"]["units"] <= 32 and t["hparams"]["activation"] in ("relu", "tanh")


def test_asha_prunes_a_hopeless_trial_and_the_searcher_is_told(data: tuple[Path, str, str]) -> None:
    tmp, train, val = data
    rule = {"rule": "asha", "min_epochs": 1, "reduction": 3}
    search = """\
search:
  algorithm: grid
  objective: val_loss
  max_trials: 3
  parallel: 1
  early_stopping: {rule: asha, min_epochs: 1, reduction: 3}
  space:
    learning_rate: {type: categorical, choices: [0.01, 1.0e-7, 1.0e-8]}
"""
    spec = write_spec(tmp / "spec.yaml", "asha", train, val, search=search, payload=TORCH_PAYLOAD,
                      training="training:\n  epochs: 4\n  batch_size: 128\n  workers: 1\n")
    gridml("submit", str(spec), "--quiet")
    trials = gridml_json("status", "asha")["trials"]
    assert trials[0]["state"] == "completed" and trials[0]["epochs_done"] == 4
    pruned = [t for t in trials if t["state"] == "pruned"]
    assert pruned, [(t["state"], t["epochs_done"]) for t in trials]
    curves = {t["number"]: [e["metrics"]["val_loss"] for e in
                            gridml_json("status", "asha", "--trial", str(t["number"]))["epochs"]]
              for t in trials}
    for t in pruned:
        assert t["epochs_done"] < 4 and t["objective"] == pytest.approx(curves[t["number"]][-1])
        others = [c for n, c in curves.items() if n < t["number"]]
        stop, reason = decide(rule, curves[t["number"]], others, "minimize")
        assert stop, reason  # the decision replays from the stored metrics
