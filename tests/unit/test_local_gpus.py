"""The local executor gives each trial that asks for ``resources.gpus`` its own GPUs through
``CUDA_VISIBLE_DEVICES`` (gridml/executors/gpus.py), so parallel 1-GPU trials on a many-GPU
machine do not all train on GPU 0. The executor and its processes are real; the payload
environment is a folder whose ``torchrun`` records the environment it was started with."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gridml.executors.gpus import GpuSlots, visible_gpus
from gridml.executors.local import LocalExecutor
from test_container_command import request


@pytest.mark.parametrize(("listed", "want"), [("0,1,2,3", ["0", "1", "2", "3"]),
                                              ("2, 5", ["2", "5"]), ("", []),
                                              ("1,-1,3", ["1"]), ("GPU-1a2b", ["GPU-1a2b"])])
def test_visible_gpus_reads_cuda_visible_devices_as_cuda_does(listed: str, want: list) -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": listed, "PATH": ""}) == want


def test_no_nvidia_smi_and_no_variable_is_no_gpu() -> None:
    assert visible_gpus({"PATH": "/nonexistent"}) == []


def test_the_least_held_gpus_go_first_and_come_back() -> None:
    slots = GpuSlots(["0", "1", "2", "3"])
    assert slots.take("a", 1) == ["0"] and slots.take("b", 2) == ["1", "2"]
    assert slots.take("c", 1) == ["3"]
    assert slots.take("d", 1) == ["0"]  # more trials than GPUs: they share, evenly
    slots.release("b")
    assert slots.take("e", 2) == ["1", "2"]
    assert GpuSlots([]).take("x", 1) == []


def _fake_env(tmp_path: Path) -> Path:
    bindir = tmp_path / "penv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").symlink_to("/bin/sh")
    script = bindir / "torchrun"
    script.write_text('#!/bin/sh\necho "CVD=${CUDA_VISIBLE_DEVICES-unset}"\n'
                      'while [ -n "$HOLD" ] && [ ! -e "$HOLD" ]; do sleep 0.05; done\n')
    script.chmod(0o755)
    return bindir / "python"


def _finished(ex: LocalExecutor, handle: str) -> str:
    deadline = time.monotonic() + 20
    while ex.poll(handle).state == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return (Path(handle) / "payload.log").read_text()


def test_parallel_trials_each_get_their_own_gpu(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    python = str(_fake_env(tmp_path))
    ex = LocalExecutor()
    handles = [ex.submit(request(tmp_path / f"t{i}", gpus=1, container=None, python=python))
               for i in range(2)]
    logs = [_finished(ex, h) for h in handles]
    assert "CVD=4" in logs[0] and "CVD=5" in logs[1], logs
    # both ended: their GPUs are free again, and a 2-GPU trial gets both
    two = ex.submit(request(tmp_path / "t2", gpus=2, container=None, python=python))
    assert "CVD=4,5" in _finished(ex, two)


def test_a_restarted_controller_keeps_the_gpus_of_running_trials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    python, hold = str(_fake_env(tmp_path)), tmp_path / "go"
    held = request(tmp_path / "a", gpus=1, container=None, python=python,
                   env={"HOLD": str(hold)})
    first = LocalExecutor().submit(held)  # that controller dies; the trial runs on, on GPU 4
    again = LocalExecutor()
    assert again.submit(held) == first  # re-attached, not started twice
    other = again.submit(request(tmp_path / "b", gpus=1, container=None, python=python))
    hold.touch()
    assert "CVD=5" in _finished(again, other)  # not GPU 4: the running trial holds it
    assert "CVD=4" in _finished(again, first)
