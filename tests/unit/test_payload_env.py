"""The payload's interpreter apart from the controller's (payload.python, GRIDML_PAYLOAD_PYTHON),
the launcher check of `gridml validate`, and missing extras told in one line (gridml/extras.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from gridml.data import open_data_manager
from gridml.errors import DataError, GridmlError
from gridml.extras import install_hint, require
from gridml.payload_env import ENV_VAR, launcher_path, missing_launchers, payload_python
from tests.helpers import ROOT, gridml, register_tiny_datasets, write_spec


def _env_bin(tmp: Path, *launchers: str) -> Path:
    """A payload environment's bin/: a python and the named launchers (never run here)."""
    bindir = tmp / "penv" / "bin"
    bindir.mkdir(parents=True)
    for name in ("python", *launchers):
        (bindir / name).write_text("#!/bin/sh\nexit 0\n")
        (bindir / name).chmod(0o755)
    return bindir


def test_require_names_the_extra_to_install() -> None:
    with pytest.raises(DataError) as exc:
        require("gridml_surely_missing_module", "prepare", feature="reading ROOT files",
                error=DataError)
    assert str(exc.value) == ("reading ROOT files needs gridml_surely_missing_module, which is not "
                              "installed: pip install 'gridml[prepare]'")
    assert install_hint("rucio.client") == "pip install 'gridml[grid]'"
    assert require("json") is json


def test_require_does_not_hide_a_broken_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "brokenpkg_gridml.py").write_text("import gridml_missing_inner_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="gridml_missing_inner_dependency"):
        require("brokenpkg_gridml", "all", error=GridmlError)


def test_payload_python_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert payload_python() == str(Path(sys.executable).absolute())
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env" / "bin" / "python"))
    assert payload_python() == str(tmp_path / "env" / "bin" / "python")
    assert payload_python("/opt/tf/bin/python") == "/opt/tf/bin/python"  # the spec wins


def test_missing_launchers_look_beside_the_payload_python(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = _env_bin(tmp_path, "torchrun")
    monkeypatch.setenv("PATH", "/nonexistent")
    python = str(bindir / "python")
    assert missing_launchers("torch", configured=python) == []
    assert missing_launchers("keras", "mpi", configured=python) == ["horovodrun", "mpirun"]
    assert launcher_path("torchrun", python) == str(bindir / "torchrun")


def test_validate_checks_the_launcher_and_runs_the_payload_with_payload_python(
        tmp_path: Path, gridml_home: Path) -> None:
    data = open_data_manager("local")
    train, val = register_tiny_datasets(data, tmp_path, "user.test")
    bindir = _env_bin(tmp_path, "horovodrun")
    model = ROOT / "examples" / "models" / "deepsets_torch.py"
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    env.pop(ENV_VAR, None)
    spec = write_spec(tmp_path / "s.yaml", "penv", train, val, payload=(
        f"payload:\n  framework: torch\n  model: {model}\n  python: {bindir / 'python'}\n"))
    bad = gridml("validate", str(spec), env=env, check=False)
    assert bad.returncode == 2
    assert f"torchrun not found beside {bindir / 'python'} (payload.python)" in bad.stderr
    (bindir / "torchrun").write_text("#!/bin/sh\nexit 0\n")
    (bindir / "torchrun").chmod(0o755)
    gridml("validate", str(spec), env=env)
    tasks = json.loads(gridml("submit", str(spec), "--dry-run", "--json", env=env).stdout)
    assert tasks[0]["command"][0] == str(bindir / "torchrun")
    # the Slurm batch script puts the payload environment's bin/ first on PATH
    slurm = write_spec(tmp_path / "t.yaml", "penv-slurm", train, val, payload=(
        f"payload:\n  framework: torch\n  model: {model}\n  python: {bindir / 'python'}\n"),
        backend="backend: {executor: slurm, data: local, server: embedded}\n")
    script = gridml("submit", str(slurm), "--dry-run", env=env).stdout
    assert f'export PATH={bindir}:"$PATH"' in script
    missing = write_spec(tmp_path / "m.yaml", "penv-missing", train, val, payload=(
        f"payload:\n  framework: torch\n  model: {model}\n  python: {tmp_path / 'nope' / 'python'}\n"))
    bad = gridml("validate", str(missing), env=env, check=False)
    assert bad.returncode == 2 and "does not exist" in bad.stderr


def test_demo_data_writes_and_registers_the_quickstart_datasets(tmp_path: Path,
                                                                gridml_home: Path) -> None:
    out = gridml("demo-data", "--out", str(tmp_path / "d"), "--n-train", "200", "--n-val", "100",
                 "--files", "1", "--json").stdout
    doc = json.loads(out)
    assert doc["registered"] == ["user.demo:quickstart.train", "user.demo:quickstart.val"]
    again = json.loads(gridml("demo-data", "--out", str(tmp_path / "d"), "--n-train", "200",
                              "--n-val", "100", "--files", "1", "--json").stdout)
    assert again["registered"] == [] and len(again["existing"]) == 2
    assert open_data_manager("local").exists("user.demo:quickstart.val")
