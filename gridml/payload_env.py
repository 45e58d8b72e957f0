"""The payload's environment, apart from the controller's: which interpreter runs the payload.

The controller (this process) may live in one environment (e.g. Python 3.13, numpy 2, installed
from the wheel) while the payload needs another (the Keras payload: TensorFlow 2.15, Python 3.11,
numpy < 2). ``payload.python`` in the spec, else ``$GRIDML_PAYLOAD_PYTHON``, else the
controller's own interpreter, names the Python that runs the payload for the local and Slurm
executors; its folder (the environment's ``bin``) also provides the launcher (torchrun,
horovodrun) and comes first on the payload's ``PATH``. PanDA jobs run in the grid's own
environment (``resources.container``) and ignore it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ENV_VAR = "GRIDML_PAYLOAD_PYTHON"


def payload_python(configured: str | None = None) -> str:
    """The payload's interpreter: ``configured`` (payload.python), else $GRIDML_PAYLOAD_PYTHON,
    else ``sys.executable``. A bare name (``python3.11``) is looked up on ``PATH``; the path is
    kept as given (not resolved through symlinks: a venv's python is a link to the base one)."""
    raw = configured or os.environ.get(ENV_VAR) or sys.executable
    raw = os.path.expanduser(raw)
    if os.sep not in raw:
        raw = shutil.which(raw) or raw
    return str(Path(raw).absolute())


def payload_bindir(configured: str | None = None) -> Path:
    """The payload environment's ``bin`` folder: where its launchers are."""
    return Path(payload_python(configured)).parent


def launchers(framework: str, horovod: str = "gloo") -> list[str]:
    """The programs a payload of ``framework`` is started with on this machine: torchrun for
    torch; horovodrun for Keras (and mpirun under it with ``training.horovod: mpi``)."""
    if framework == "torch":
        return ["torchrun"]
    return ["horovodrun", "mpirun"] if horovod == "mpi" else ["horovodrun"]


def launcher_path(name: str, configured: str | None = None) -> str:
    """``name`` in the payload's ``bin`` folder, else on ``PATH``, else where it should be."""
    bindir = payload_bindir(configured)
    here = bindir / name
    if here.exists():
        return str(here)
    return shutil.which(name) or str(here)


def missing_launchers(framework: str, horovod: str = "gloo",
                      configured: str | None = None) -> list[str]:
    """The launchers not found in the payload's ``bin`` folder nor on ``PATH``."""
    bindir = payload_bindir(configured)
    path = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    return [name for name in launchers(framework, horovod) if shutil.which(name, path=path) is None]
