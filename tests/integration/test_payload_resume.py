"""A trial killed with SIGKILL mid-training resumes from its last checkpoint at the right epoch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gridml.planner import payload_command
from test_payload_train import payload_env, run_payload, write_trial

pytestmark = pytest.mark.slow


def _epochs(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["epoch"] for line in path.read_text().splitlines() if line.strip()]


def _kill_after_first_checkpoint(trial: Path, out: Path, timeout: float = 240) -> None:
    cmd = payload_command(2, "gloo", str(trial), python=sys.executable)  # as gridml runs it
    proc = subprocess.Popen(cmd, cwd=trial.parent, env=payload_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = out / "checkpoint" / "state.json"
    deadline = time.monotonic() + timeout
    try:
        while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert state.exists(), "no checkpoint was written before the deadline"


def test_killed_trial_resumes_at_the_right_epoch(tmp_path: Path) -> None:
    from make_sample_data import make_sample_data

    train, val = make_sample_data(tmp_path / "data", n_train=12000, n_val=1000, n_files=2)
    # HDF5 decoded in a reader process here: the kill must take it down too, the resume restart it
    trial = write_trial(tmp_path, train, val, training={"epochs": 3, "batch_size": 32,
                                                        "reader_processes": 1})
    out = tmp_path / "outputs"
    _kill_after_first_checkpoint(trial, out)
    done = json.loads((out / "checkpoint" / "state.json").read_text())["epoch"]
    assert 1 <= done < 3, f"killed too late (after epoch {done})"
    assert not (out / "result.json").exists()

    proc = run_payload(trial)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resuming after epoch {done}" in proc.stderr
    assert _epochs(out) == [1, 2, 3]  # every epoch exactly once, in order
    result = json.loads((out / "result.json").read_text())
    assert result == {**result, "state": "completed", "epochs": 3}
    assert json.loads((out / "checkpoint" / "state.json").read_text())["epoch"] == 3
