"""A whole campaign with ``backend.data: rucio``: inputs read from, outputs written to, and the best
model fetched back from a real Rucio server, through the real `gridml` command.

The data backend is what this test covers, not the framework (the controller stages the inputs
and uploads the outputs, whatever the payload): it runs the torch payload, one rank a trial (a
torch start costs half a TensorFlow one); the Keras payload's campaigns are
tests/e2e/test_campaign.py's."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from rucio_harness import RucioServer

from tests.helpers import (TORCH_PAYLOAD, assert_torch_model_matches_onnx, gridml, gridml_json,
                           write_spec)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.service]

SEARCH = textwrap.dedent("""\
    search:
      algorithm: random
      objective: val_loss
      max_trials: 2
      parallel: 2
      seed: 5
      space:
        learning_rate: {type: real, low: 1.0e-3, high: 1.0e-2, log: true}
        units: {type: int, low: 8, high: 16}
        dropout: {type: real, low: 0.0, high: 0.2}
        activation: {type: categorical, choices: [relu, tanh]}
    """)
TRAINING = "training:\n  epochs: 1\n  batch_size: 128\n  workers: 1\n"


def _put_sample_data(tmp: Path) -> tuple[str, str]:
    from tests.helpers import ROOT

    sys.path.insert(0, str(ROOT / "examples"))
    from make_sample_data import make_sample_data  # type: ignore[import-not-found]

    train, val = make_sample_data(tmp / "data", n_train=600, n_val=200, n_files=2, seed=3)
    for files, ds in ((train, "user.jdoe:camp.train"), (val, "user.jdoe:camp.val")):
        gridml("data", "put", *map(str, files), "--dataset", ds, "--backend", "rucio")
    return "user.jdoe:camp.train", "user.jdoe:camp.val"


def test_campaign_on_rucio_and_best_model_fetched_back(rucio_env: RucioServer, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       needs_torch: None) -> None:
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    train, val = _put_sample_data(tmp_path)
    spec = write_spec(tmp_path / "spec.yaml", "rcamp", train, val, search=SEARCH, training=TRAINING,
                      payload=TORCH_PAYLOAD,
                      backend="backend: {executor: local, data: rucio, server: embedded}\n")
    gridml("submit", str(spec), "--quiet", timeout=1500)
    trials = gridml_json("status", "rcamp")["trials"]
    assert [t["state"] for t in trials] == ["completed"] * 2, [t["error"] for t in trials]
    outputs = gridml_json("data", "ls", "user.jdoe:rcamp.out", "--backend", "rucio")["files"]
    assert all(f["replicas"] == ["TEST_USERDISK"] for f in outputs)
    best = gridml_json("best", "rcamp")
    dest = tmp_path / "fetched"
    gridml("fetch", "rcamp", "--best", "-o", str(dest))  # the spec's backend: from Rucio
    prefix = f"rcamp.trial-{best['number']:04d}."
    names = {p.name for p in dest.iterdir()}
    assert {prefix + "model.pt", prefix + "model.onnx"} <= names, names
    assert_torch_model_matches_onnx(dest / f"{prefix}model.pt", dest / f"{prefix}model.onnx")
