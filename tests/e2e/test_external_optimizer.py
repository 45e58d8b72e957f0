"""An external optimizer drives a real local campaign: `gridml submit` of a spec with
search.algorithm external (real payloads, embedded API) and examples/external_skopt.py (a plain
scikit-optimize loop speaking only HTTP) reading runs/<study>/api.json. Tiny: 4 trials of one
epoch, 2 at a time, of the torch example model (torch starts at half TensorFlow's cost; nothing
here is the framework's).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import (BIN, ROOT, TORCH_PAYLOAD, gridml_json, make_registered_sample_data,
                           wait_for, write_spec)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SEARCH = textwrap.dedent("""\
    search:
      algorithm: external
      objective: val_loss
      max_trials: 4
      parallel: 2
      space:
        learning_rate: {type: real, low: 1.0e-3, high: 3.0e-2, log: true}
        units: {type: int, low: 8, high: 32}
        activation: {type: categorical, choices: [relu, tanh]}
    """)
TRAINING = "training: {epochs: 1, batch_size: 128, metrics: [accuracy], workers: 1}\n"


def _wait_for_record(path: Path, submit: subprocess.Popen, timeout: float = 300) -> dict:
    def record() -> dict | None:
        if submit.poll() is not None:
            raise AssertionError(f"gridml submit ended early: {submit.returncode}")
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return found if found.get("token") else None

    return wait_for(record, timeout, f"{path} to be written", interval=0.1)


def test_external_skopt_drives_a_local_campaign(tmp_path: Path, monkeypatch, needs_torch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("GRIDML_HOME", str(home))
    train, val = make_registered_sample_data(tmp_path, n_train=1500, n_val=500)
    spec = write_spec(tmp_path / "spec.yaml", "ext-e2e", train, val, search=SEARCH,
                      training=TRAINING, payload=TORCH_PAYLOAD,
                      resources="resources: {cores: 1, gpus: 0, memory_gb: 2, walltime: 20m}\n")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    log = tmp_path / "submit.log"
    with open(log, "w") as out:
        submit = subprocess.Popen([str(BIN / "gridml"), "submit", str(spec), "--quiet"],
                                  stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        record_path = home / "runs" / "ext-e2e" / "api.json"
        record = _wait_for_record(record_path, submit)
        client = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "external_skopt.py"), "--study", "ext-e2e",
             "--poll", "0.2", "--timeout", "900"],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1500)
        assert client.returncode == 0, client.stdout + client.stderr + log.read_text()
        assert submit.wait(timeout=120) == 0, log.read_text()  # closed: the campaign ends
    finally:
        if submit.poll() is None:
            submit.kill()

    # api.json: url, token, port; the user's only
    assert set(record) == {"url", "token", "port"} and record["token"].startswith("gms_")
    assert stat.S_IMODE(record_path.stat().st_mode) == 0o600
    assert record["url"].startswith("http://127.0.0.1:") and record["token"] in log.read_text()

    told = [line for line in client.stdout.splitlines() if line.startswith("trial ")]
    assert len(told) == 4 and "best trial" in client.stdout
    doc = gridml_json("status", "ext-e2e")
    trials = doc["trials"]
    assert [t["number"] for t in trials] == [0, 1, 2, 3]
    assert [t["state"] for t in trials] == ["completed"] * 4, [t["error"] for t in trials]
    assert all(set(t["hparams"]) == {"learning_rate", "units", "activation"} for t in trials)
    assert all(t["epochs_done"] == 1 and t["objective"] > 0 for t in trials)
    assert doc["study"]["state"] == "finished"
