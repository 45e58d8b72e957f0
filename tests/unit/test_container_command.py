"""``resources.container`` on the local executor: the command lines it renders
(gridml/executors/container.py). The trial run in a real podman container:
tests/integration/test_container_payload.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from gridml.errors import ExecutorError
from gridml.executors import container
from gridml.planner import TaskRequest
from payloads.runtime import trial as contract


def request(tmp_path: Path, **kw: Any) -> TaskRequest:
    data = tmp_path / "store" / "user.test"
    data.mkdir(parents=True)
    (tmp_path / "models").mkdir()
    doc = contract.TrialDoc(study="c", trial_id=1, trial_number=0, hparams={},
                            model_file=tmp_path / "models" / "m.py",
                            training=contract.Training(framework="torch", workers=2),
                            data=contract.Data(train=(str(data / "t.h5"),),
                                               validation=(str(data / "v.h5"),)),
                            output_dir=tmp_path / "trial-0000" / "outputs")
    base: dict[str, Any] = dict(study="c", trial_id=1, trial_number=0, attempt=1,
                                workdir=tmp_path / "trial-0000", trial=doc,
                                model_file=tmp_path / "models" / "m.py", workers=2, cores=2,
                                gpus=0, memory_gb=1, walltime_s=600,
                                container="localhost/gridml-payload-base:abc",
                                env={"GRIDML_API_URL": "http://127.0.0.1:1"})
    base.update(kw)
    return TaskRequest(**base)


def _after(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def test_the_image_holds_the_payload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRIDML_PAYLOAD_PYTHON", raising=False)
    req = request(tmp_path)
    env = {"GRIDML_API_URL": "http://127.0.0.1:1", "GRIDML_EXIT_FILE": "/x", "PATH": "/bin",
           "HOME": "/root", "PYTHONPATH": "/src"}
    run = req.workdir / "attempt-1"
    argv = container.wrap(req, env, run, engine="podman")
    image = argv.index("localhost/gridml-payload-base:abc")
    assert argv[:image][:6] == ["podman", "run", "--rm", "--init", "--network=host", "--ipc=host"]
    # the image's own torchrun, by name, on the trial file at its own path
    assert argv[image + 1:] == ["torchrun", "--nnodes", "1", "--nproc-per-node", "2",
                                "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
                                "-m", "payloads.train_torch", str(req.trial_file)]
    volumes = _after(argv, "--volume")
    assert volumes[0] == f"{req.workdir}:{req.workdir}"  # read-write: outputs, log, exit code
    assert f"{tmp_path / 'models'}:{tmp_path / 'models'}:ro" in volumes
    store = tmp_path / "store" / "user.test"
    assert volumes.count(f"{store}:{store}:ro") == 1  # once for both data files
    assert not any(v.startswith("/src") for v in volumes)  # no host environment mounted
    # the trial's variables by name (values from the wrapper's environment), not PATH/HOME
    assert _after(argv, "--env") == ["GRIDML_API_URL", "GRIDML_EXIT_FILE"]
    assert _after(argv, "--workdir") == [str(run)]
    assert "--device" not in argv
    gpu = container.wrap(request(tmp_path / "g", gpus=1), env, run, engine="podman")
    assert _after(gpu, "--device") == ["nvidia.com/gpu=all"]


def test_payload_python_mounts_this_machines_environment(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    src = tmp_path / "src"
    src.mkdir()
    req = request(tmp_path, python=str(venv / "bin" / "python"))
    env = {"GRIDML_API_URL": "u", "PYTHONPATH": f"{src}{os.pathsep}{src / 'inner'}"}
    argv = container.wrap(req, env, req.workdir / "attempt-1", engine="podman")
    image = argv.index("localhost/gridml-payload-base:abc")
    assert argv[image + 1] == str(venv / "bin" / "torchrun")  # this environment's, in the image
    volumes = _after(argv, "--volume")
    assert f"{venv}:{venv}:ro" in volumes and f"{src}:{src}:ro" in volumes
    assert "PYTHONPATH" in _after(argv, "--env")
    # a payload.python that does not exist here is the image's own interpreter: nothing mounted
    inner = request(tmp_path / "i", python="/opt/venv/bin/python")
    argv = container.wrap(inner, env, inner.workdir / "attempt-1", engine="podman")
    assert argv[argv.index("localhost/gridml-payload-base:abc") + 1] == "/opt/venv/bin/torchrun"
    assert not any("/opt/venv" in v for v in _after(argv, "--volume"))


def test_apptainer_and_the_runtime_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRIDML_PAYLOAD_PYTHON", raising=False)
    req = request(tmp_path, container="/sw/gridml-torch.sif", gpus=1)
    argv = container.wrap(req, {}, req.workdir / "attempt-1", engine="apptainer")
    assert argv[:3] == ["apptainer", "exec", "--nv"]
    binds = _after(argv, "--bind")[0].split(",")
    assert binds[0] == f"{req.workdir}:{req.workdir}" and all(b.endswith(":ro") for b in binds[1:])
    assert argv[argv.index("/sw/gridml-torch.sif") + 1] == "torchrun"
    with pytest.raises(ExecutorError, match="podman cannot run /sw/gridml-torch.sif"):
        container.wrap(req, {}, req.workdir / "attempt-1", engine="podman")
    # the runtime: $GRIDML_CONTAINER_RUNTIME, else apptainer, else podman, on PATH
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(container.RUNTIME_VAR, raising=False)
    with pytest.raises(ExecutorError, match="neither apptainer nor podman is on PATH"):
        container.runtime()
    monkeypatch.setenv(container.RUNTIME_VAR, "docker")
    with pytest.raises(ExecutorError, match="'docker' is not a container runtime"):
        container.runtime()
    for name in ("podman", "apptainer"):
        (empty / name).write_text("#!/bin/sh\n")
        (empty / name).chmod(0o755)
    monkeypatch.delenv(container.RUNTIME_VAR)
    assert container.runtime() == "apptainer"
    monkeypatch.setenv(container.RUNTIME_VAR, "podman")
    assert container.runtime() == "podman"
