"""torchrun exits 1 whatever its rank's code: the torch payload's exit codes 2 (bad trial or model
file) and 3 (bad data) still reach the controller, through the local executor and the pilot
wrapper (``$GRIDML_EXIT_FILE``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from test_payload_torch import run_torch, torch_trial
from test_payload_train import ROOT, payload_env

pytest.importorskip("torch")


def _bad_data(tmp: Path) -> tuple[list[Path], list[Path]]:
    bad = tmp / "broken.h5"
    bad.write_bytes(b"this is not an HDF5 file" * 100)
    return [bad], []


@pytest.mark.slow
def test_torchrun_exits_1_but_the_rank_code_is_recorded(tmp_path: Path) -> None:
    trial = torch_trial(tmp_path, *_bad_data(tmp_path))
    code_file = tmp_path / "payload_exit_code"
    os.environ["GRIDML_EXIT_FILE"] = str(code_file)
    try:
        proc = run_torch(trial)
    finally:
        del os.environ["GRIDML_EXIT_FILE"]
    assert proc.returncode == 1  # torchrun's own
    assert code_file.read_text().strip() == "3", proc.stderr[-2000:]
    assert "gridml payload error: input file" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fault, code, words", [
    ("data", 3, "input file"), ("model", 2, "build_model")])
def test_the_local_executor_reports_the_rank_code(tmp_path: Path, fault: str, code: int,
                                                   words: str) -> None:
    from gridml.executors.local import LocalExecutor
    from gridml.planner import TaskRequest
    from payloads.runtime.trial import load_trial

    from make_sample_data import make_sample_data

    if fault == "data":
        train, val = _bad_data(tmp_path)
        model = None
    else:
        train, val = make_sample_data(tmp_path / "data", n_train=300, n_val=100, n_files=1)
        model = tmp_path / "nomodel.py"
        model.write_text("def make(hparams):\n    return None\n")
    trial_file = torch_trial(tmp_path, train, val, model=model)
    doc = load_trial(trial_file)
    req = TaskRequest(study="itest", trial_id=11, trial_number=0, attempt=1, workdir=tmp_path,
                      trial=doc, model_file=doc.model_file, workers=2, cores=2, gpus=0,
                      memory_gb=2, walltime_s=600,
                      env={k: v for k, v in payload_env().items()
                           if k in ("PYTHONPATH", "LD_LIBRARY_PATH")})
    ex = LocalExecutor()
    handle = ex.submit(req)
    deadline = time.monotonic() + 240
    status = ex.poll(handle)
    while status.state == "running" and time.monotonic() < deadline:
        time.sleep(0.5)
        status = ex.poll(handle)
    assert status.state == "failed", status
    assert status.message.startswith(f"payload exited with code {code}:"), status.message
    assert words in status.message
    assert (Path(handle) / "exit_code").read_text().strip() == str(code)


def test_the_pilot_wrapper_exits_with_the_rank_code(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from payloads.pilot_wrapper import run_payload

    launcher = ["bash", "-c", 'echo 3 > "$GRIDML_EXIT_FILE"; echo "gridml payload error: x"; '
                'exit 1']
    assert run_payload(launcher, tmp_path, dict(os.environ)) == 3
    assert run_payload(["bash", "-c", "exit 1"], tmp_path, dict(os.environ)) == 1  # stale file gone
    assert run_payload(["bash", "-c", "exit 0"], tmp_path, dict(os.environ)) == 0
