"""Crashes and Ctrl-C: no reported metric lost, no trial submitted twice (real campaigns).

The payload is a real torch one (one rank, started alone) whose training steps pause (tests/helpers.py
slow_torch_payload): the trials are surely training when the test interrupts or kills the
controller, and they start at torch's cost, not TensorFlow's
(~7 s of CPU a rank, twice that with two ranks). What is tested is the controller's and the
local executor's, whatever the framework; the Keras payload runs in tests/e2e/test_campaign.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers import (ROOT, gridml, gridml_json, make_registered_sample_data,
                           slow_torch_payload, start_gridml, wait_for, write_spec)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TRAINING = """\
training:
  epochs: 3
  batch_size: 64
  workers: 1
  metrics: [accuracy]
"""
RESOURCES = "resources: {cores: 1, gpus: 0, memory_gb: 2, walltime: 20m}\n"


def start_submit(spec: Path) -> subprocess.Popen[str]:
    return start_gridml("submit", str(spec), "--quiet")


def wait_status(study: str, predicate, timeout: float = 600) -> dict:
    """`gridml status` of ``study`` once ``predicate`` holds for it (each look a CLI run)."""
    def status() -> dict | None:
        proc = gridml("status", study, "--json", check=False)
        doc = json.loads(proc.stdout) if proc.returncode == 0 else None
        return doc if doc is not None and predicate(doc) else None

    # a look is a CLI run (~1.2 s of CPU): one a second, not back to back, while trials train
    return wait_for(status, timeout, f"study {study} to reach the expected state", interval=1.0)


def payload_processes(home: Path) -> list[int]:
    """Live processes whose command line names a trial file under this GRIDML_HOME."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(home) in cmd and "trial.json" in cmd:
                pids.append(int(d.name))
    return pids


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, needs_torch: None) -> tuple[Path, str, str]:
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    train, val = make_registered_sample_data(tmp_path, n_train=3000, n_val=600)
    return tmp_path, train, val


def epochs_of(study: str, number: int) -> list[int]:
    return [e["epoch"] for e in gridml_json("status", study, "--trial", str(number))["epochs"]]


def test_ctrl_c_stops_every_trial_and_resume_finishes(data: tuple[Path, str, str]) -> None:
    tmp, train, val = data
    spec = write_spec(tmp / "spec.yaml", "intr", train, val, training=TRAINING,
                      resources=RESOURCES, payload=slow_torch_payload(tmp, 0.05),
                      search=Path(ROOT / "tests" / "e2e" / "search_random_2.yaml").read_text())
    proc = start_submit(spec)
    wait_status("intr", lambda d: sum(t["state"] == "running" for t in d["trials"]) == 2)
    wait_for(lambda: len(payload_processes(tmp / "home")) >= 2, 60, "both trials' processes")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "gridml resume intr" in err
    wait_for(lambda: payload_processes(tmp / "home") == [], 5,
             lambda: f"no trial process left: {payload_processes(tmp / 'home')}")
    doc = gridml_json("status", "intr")
    assert [t["state"] for t in doc["trials"]] == ["queued", "queued"]
    gridml("resume", "intr", "--quiet")
    doc = gridml_json("status", "intr")
    assert [t["state"] for t in doc["trials"]] == ["completed", "completed"]
    for t in doc["trials"]:
        assert epochs_of("intr", t["number"]) == [1, 2, 3]


def test_controller_killed_hard_then_resumed_runs_no_trial_twice(data: tuple[Path, str, str]) -> None:
    tmp, train, val = data
    # epochs of ~5 s: the killed controller's trials are still training when `gridml resume`
    # (a few seconds to start on a busy machine) re-attaches to them
    spec = write_spec(tmp / "spec.yaml", "crash", train, val, training=TRAINING,
                      resources=RESOURCES, payload=slow_torch_payload(tmp, 0.1),
                      search=Path(ROOT / "tests" / "e2e" / "search_random_2.yaml").read_text()
                      .replace("max_trials: 2", "max_trials: 3"))
    proc = start_submit(spec)
    wait_status("crash", lambda d: any(t["epochs_done"] >= 1 for t in d["trials"]))
    proc.kill()  # kill -9: no cleanup at all; the payloads keep running on their own
    proc.wait()
    gridml("resume", "crash", "--quiet")
    doc = gridml_json("status", "crash")
    assert len(doc["trials"]) == 3
    assert [t["state"] for t in doc["trials"]] == ["completed"] * 3
    for t in doc["trials"]:
        assert t["attempts"] == 1, t  # re-attached, never resubmitted
        attempts = sorted(p.name for p in (tmp / "home" / "runs" / "crash" / f"trial-{t['number']:04d}").glob("attempt-*"))
        assert attempts == ["attempt-1"]
        assert epochs_of("crash", t["number"]) == [1, 2, 3]
