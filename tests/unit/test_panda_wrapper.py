"""The job-side pilot wrapper: trial file fixed for the node, inputs checked, outputs collected.

It is run for real (``python -m payloads.pilot_wrapper``) in a job directory holding staged input
files, with a small stand-in for the horovodrun line that writes what the payload writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from gridml.executors.panda.render import pack
from tests.conftest import ROOT

FAKE_PAYLOAD = """
import json, pathlib, sys
doc = json.loads(pathlib.Path(sys.argv[1]).read_text())
out = pathlib.Path(doc["output_dir"])
for path in doc["data"]["train"] + doc["data"]["validation"] + [doc["model_file"]]:
    assert pathlib.Path(path).is_file(), path
(out / "metrics.jsonl").write_text('{"epoch": 1}\\n')
(out / "result.json").write_text('{"state": "completed"}')
(out / "model.keras").write_bytes(b"model")
for path in doc["data"].get("test", []):  # data.test: the test split's figures
    assert pathlib.Path(path).is_file(), path
    (out / "roc_test.json").write_text("{}")
print("trained", doc["grid"]["gpus_requested"], doc["grid"]["gpus_visible"])
import os
print("env", os.environ["HOROVOD_START_TIMEOUT"], os.environ["GRIDML_X"])
sys.exit(int(doc["hparams"].get("exit", 0)))
"""


def adler(data: bytes) -> str:
    return f"{zlib.adler32(data) & 0xFFFFFFFF:08x}"


def job_dir(tmp: Path, *, corrupt: bool = False, exit_code: int = 0,
            test: bool = False) -> tuple[Path, list[str]]:
    """A job directory as the pilot leaves it, and the wrapper's command line (``test``: with
    a test split, stream IN3)."""
    cwd = tmp / "job"
    cwd.mkdir()
    files = {"t0.h5": b"train-0", "t1.h5": b"train-1", "v0.h5": b"val-0"}
    if test:
        files["e0.h5"] = b"test-0"
    for name, data in files.items():
        (cwd / name).write_bytes(data if not (corrupt and name == "t1.h5") else b"tRain-1")
    doc = {"study": "s", "hparams": {"exit": exit_code}, "model_file": "/submit/host/mlp.py",
           "output_dir": "/submit/host/runs/s/trial-0000/outputs",
           "data": {"train": ["t0.h5", "t1.h5"], "validation": ["v0.h5"], "features": "x"},
           "inputs": [{"did": f"user.x:{n}", "bytes": len(d), "adler32": adler(d)} for n, d in files.items()]}
    if test:
        doc["data"]["test"] = ["e0.h5"]  # type: ignore[index]
    (cwd / "payload.py").write_text(FAKE_PAYLOAD)
    args = ["--train", "t0.h5,t1.h5", "--validation", "v0.h5", *(["--test", "e0.h5"] if test else []),
            "--trial", pack(json.dumps(doc).encode()),
            "--model", pack(b"def build_model(h, s): pass\n"), "--model-name", "mlp.py", "--gpus", "1",
            "--env", "GRIDML_X=a b",
            "--", sys.executable, "payload.py", "trial.json"]
    return cwd, args


def run_wrapper(cwd: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", "payloads.pilot_wrapper", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_wrapper_fixes_the_trial_file_runs_the_payload_and_collects_outputs(tmp_path: Path) -> None:
    cwd, args = job_dir(tmp_path)
    proc = run_wrapper(cwd, args)
    assert proc.returncode == 0, proc.stderr
    trial = json.loads((cwd / "trial.json").read_text())
    assert trial["data"]["train"] == [str(cwd / "t0.h5"), str(cwd / "t1.h5")]
    assert trial["model_file"] == str(cwd / "mlp.py") and (cwd / "mlp.py").is_file()
    assert trial["output_dir"] == str(cwd / "outputs")
    assert "test" not in trial["data"]  # no test split: none in the payload's trial file
    for name in ("metrics.jsonl", "result.json", "model.keras"):
        assert (cwd / name).is_file() and not (cwd / "outputs" / name).exists()
    assert "trained 1 0" in (cwd / "payload.log").read_text()
    assert "env 300 a b" in (cwd / "payload.log").read_text()  # Horovod's timeouts, the request's env
    assert "asked for 1 GPU(s), this node gives 0" in proc.stderr


def test_a_test_split_from_stream_in3_reaches_the_payload_and_its_figures_come_out(
        tmp_path: Path) -> None:
    cwd, args = job_dir(tmp_path, test=True)
    proc = run_wrapper(cwd, args)
    assert proc.returncode == 0, proc.stderr
    trial = json.loads((cwd / "trial.json").read_text())
    assert trial["data"]["test"] == [str(cwd / "e0.h5")]
    assert (cwd / "roc_test.json").is_file() and "roc_test.json" in proc.stderr  # runGen's -o finds it


def test_a_corrupt_input_stops_the_job_before_the_payload(tmp_path: Path) -> None:
    cwd, args = job_dir(tmp_path, corrupt=True)
    proc = run_wrapper(cwd, args)
    assert proc.returncode == 65
    assert "t1.h5: adler32" in proc.stderr and not (cwd / "payload.log").exists()


def test_a_failing_payload_shows_its_log_tail_and_keeps_its_exit_code(tmp_path: Path) -> None:
    cwd, args = job_dir(tmp_path, exit_code=3)
    proc = run_wrapper(cwd, args)
    assert proc.returncode == 3
    assert "payload exited with 3" in proc.stderr and "trained" in proc.stderr


@pytest.mark.parametrize("argv", [["--train", "a"], ["--trial", "x", "--model", "y", "--model-name", "m", "--"]])
def test_a_bad_command_line_is_refused(tmp_path: Path, argv: list[str]) -> None:
    proc = run_wrapper(tmp_path, argv)
    assert proc.returncode != 0 and "pilot_wrapper" in proc.stderr
