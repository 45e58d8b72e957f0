"""The quickstart from ROOT files: ntuples -> `gridml prepare --dataset` -> `gridml submit` on the
registered datasets: a real (tiny) campaign trains on the prepared shards."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import ROOT, gridml, gridml_json, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_prepare_then_submit(tmp_path: Path, gridml_home: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "examples" / "make_root_ntuples.py"),
                    str(tmp_path / "ntuples"), "--files", "2", "--events", "5000"],
                   check=True, capture_output=True, timeout=300)
    prep = tmp_path / "prep.yaml"
    prep.write_text((ROOT / "examples" / "prep.yaml").read_text()
                    .replace("../data/ntuples/*.root", str(tmp_path / "ntuples" / "*.root"))
                    .replace("preprocess.py", str(ROOT / "examples" / "preprocess.py"))
                    .replace("../data/prepared/taus", str(tmp_path / "prepared")))
    summary = gridml_json("prepare", str(prep), "--dataset", "user.test:taus")
    assert summary["datasets"]["train"] == "user.test:taus.train"
    search = textwrap.dedent("""\
        search:
          algorithm: random
          objective: val_loss
          max_trials: 1
          parallel: 1
          seed: 3
          space:
            learning_rate: {type: real, low: 1.0e-2, high: 3.0e-2, log: true}
            units: {type: int, low: 8, high: 16}
        """)
    training = "training: {epochs: 3, batch_size: 128, metrics: [accuracy], workers: 1}\n"
    spec = write_spec(tmp_path / "taus.yaml", "taus", "user.test:taus.train",
                      "user.test:taus.val", search=search, training=training)
    gridml("submit", str(spec), "--quiet", timeout=900)
    trials = gridml_json("status", "taus")["trials"]
    assert [t["state"] for t in trials] == ["completed"], [t.get("error") for t in trials]
    assert 0 < trials[0]["objective"] < 0.6, trials[0]  # ln 2 = 0.69 is guessing
