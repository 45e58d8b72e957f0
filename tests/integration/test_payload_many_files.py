"""A trial over 1,000 input files under ``ulimit -n 256``, both frameworks (the real payload
under the real torchrun / horovodrun): it completes, holding at most the bound of files open
(128 under that limit), the shuffle interleaving a window of files."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gridml.planner import payload_command
from test_payload_train import ROOT, payload_env, write_trial

pytestmark = pytest.mark.slow
LIMIT = 256


def _limit() -> None:  # preexec_fn: the payload starts under soft = hard = 256 descriptors
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path]]:
    from make_sample_data import make_events, write_h5

    d, rng = tmp_path_factory.mktemp("many"), np.random.default_rng(5)
    x, y = make_events(rng, 10_000)
    train = [write_h5(d / f"t{i:04d}.h5", x[8 * i:8 * i + 8], y[8 * i:8 * i + 8], chunk_rows=8)
             for i in range(1000)]
    val = [write_h5(d / f"v{i:03d}.h5", x[8000 + 100 * i:8100 + 100 * i],
                    y[8000 + 100 * i:8100 + 100 * i], chunk_rows=100) for i in range(20)]
    return train, val


def _run(cmd: list[str], trial: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=trial.parent, env=payload_env(), capture_output=True,
                          text=True, timeout=300, preexec_fn=_limit)


def _check(proc: subprocess.CompletedProcess, out: Path) -> None:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert json.loads((out / "result.json").read_text())["state"] == "completed"
    report = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert report["extra"]["train_samples"] == 8000
    assert "at most 128 input files open at a time (RLIMIT_NOFILE soft 256" in proc.stderr


@pytest.mark.parametrize("framework", ["torch", "keras"])
def test_a_thousand_files_under_ulimit_256(tmp_path: Path, many: tuple, framework: str) -> None:
    train, val = many
    if framework == "torch":
        pytest.importorskip("torch")
        trial = write_trial(tmp_path, train, val, model_file=str(
            ROOT / "examples/models/deepsets_torch.py"), training={
            "framework": "torch", "epochs": 1, "batch_size": 256, "adapt_samples": 256})
        cmd = payload_command(1, "gloo", str(trial), python=sys.executable, framework="torch")
    else:
        trial = write_trial(tmp_path, train, val, training={"epochs": 1, "batch_size": 256,
                                                              "adapt_samples": 256})
        cmd = payload_command(1, "gloo", str(trial), python=sys.executable)  # as gridml runs it
    _check(_run(cmd, trial), tmp_path / "outputs")
