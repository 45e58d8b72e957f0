"""``resources.container`` on the local executor: the payload's command run in an image.

The runtime is ``$GRIDML_CONTAINER_RUNTIME`` (``apptainer`` or ``podman``), else the first of
apptainer, podman on ``PATH``. What the trial reads and writes is mounted at the same path: its
folder (read-write: trial.json, outputs/, the attempt's log and exit-code file), the model file's
folder and the folders of its data files (read-only). Two ways to use an image
(docs/containers.md):

- **The image holds the payload** (containers/Containerfile): ``torchrun`` / ``python`` (and
  horovodrun as ``python -m payloads.hvdrun``) are taken by name from the image's ``PATH``.
- **The image is the operating system, the payload's environment comes from this machine**:
  with ``payload.python`` (or ``$GRIDML_PAYLOAD_PYTHON``) naming an environment that exists
  here, that environment, its base installation (a venv's ``pyvenv.cfg`` ``home``, unless that
  is ``/usr``) and every ``PYTHONPATH`` folder are mounted read-only at their own paths and its
  interpreter and launchers run in the image, which provides the C libraries they link to. A
  ``payload.python`` that does not exist here names the interpreter inside the image.

Podman runs ``--rm --init --network=host --ipc=host``: a small init (catatonit) is the
container's PID 1, passes signals on and reaps, so the launcher is not PID 1 (a torch rank whose
parent is PID 1 takes its launcher for dead and leaves: payloads/train_torch.py); the trial reports
to the controller's metrics API on loopback; PyTorch's data loader shares memory. It runs as root
as is and ``--userns=keep-id`` for a user, and gets the trial's variables (``GRIDML_*``,
``HOROVOD_*``, ...) by name; ``podman run`` passes SIGTERM on to the payload (the executor's kill).
GPUs: ``--device nvidia.com/gpu=all`` (CDI) with podman, ``--nv`` with apptainer.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from gridml import fields
from gridml.errors import ExecutorError
from gridml.payload_env import ENV_VAR, payload_python
from gridml.planner import TaskRequest, payload_command

RUNTIME_VAR = "GRIDML_CONTAINER_RUNTIME"
RUNTIMES = ("apptainer", "podman")
# the variables podman hands to the payload (apptainer passes the whole environment itself)
_PASSED = ("GRIDML_", "HOROVOD_", "OMP_", "MKL_", "NCCL_", "GLOO_", "CUDA_", "TORCH_", "TF_")


def runtime() -> str:
    """The container runtime on this machine (see the module docstring)."""
    chosen = os.environ.get(RUNTIME_VAR)
    if chosen:
        if chosen not in RUNTIMES:
            raise ExecutorError(f"${RUNTIME_VAR}={chosen!r} is not a container runtime",
                                hint=f"set it to {' or '.join(RUNTIMES)}")
        if shutil.which(chosen) is None:
            raise ExecutorError(f"{chosen} (${RUNTIME_VAR}) is not on PATH",
                                hint=f"install {chosen} or unset ${RUNTIME_VAR}")
        return chosen
    for name in RUNTIMES:
        if shutil.which(name):
            return name
    raise ExecutorError("resources.container is set but neither apptainer nor podman is on PATH",
                        hint="install one (scripts/system-deps.sh installs podman), or remove "
                             "resources.container to run the payload without a container")


def host_environment(req: TaskRequest) -> Path | None:
    """The payload's environment on this machine to mount into the image: the folder above
    ``bin/python`` of payload.python / $GRIDML_PAYLOAD_PYTHON when that exists here; else None
    (the image holds the payload)."""
    configured = req.python or os.environ.get(ENV_VAR)
    if not configured:
        return None
    python = Path(payload_python(configured))
    return python.parent.parent if python.exists() else None


def inner_command(req: TaskRequest) -> list[str]:
    """The payload's command as it runs inside the image."""
    framework = req.trial.training.framework
    configured = req.python or os.environ.get(ENV_VAR)
    if not configured:  # the image's own python and launchers, by name
        return payload_command(req.workers, req.launcher, str(req.trial_file), framework=framework)
    python = Path(payload_python(configured))
    return payload_command(req.workers, req.launcher, str(req.trial_file), python=str(python),
                           framework=framework,
                           torchrun=str(python.parent / "torchrun"))


def mounts(req: TaskRequest, environ: Mapping[str, str]) -> list[tuple[Path, bool]]:
    """(folder, writable) mounted at its own path: the trial's folder, the model's folder, the
    data files' folders, and the payload's environment from this machine with its PYTHONPATH."""
    out: list[tuple[Path, bool]] = [(req.workdir.absolute(), True)]
    ro: list[Path] = [req.model_file.parent]
    data = req.trial.data
    for name in (*data.train, *data.validation, *data.test):
        ro += [Path(name).parent, Path(name).resolve().parent]
    env_root = host_environment(req)
    if env_root is not None:
        ro += [env_root, env_root.resolve(), *_base_python(env_root)]
        ro += [Path(p) for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    kept: list[Path] = []
    work = req.workdir.absolute()
    for path in sorted({p.absolute() for p in ro}, key=lambda p: (len(p.parts), str(p))):
        # a folder inside one mounted already (or inside the trial's) comes with it
        if path.is_dir() and not any(path.is_relative_to(k) for k in (work, *kept)):
            kept.append(path)
    out += [(p, False) for p in kept]
    return out


def _base_python(env_root: Path) -> list[Path]:
    """A venv's base installation (pyvenv.cfg's ``home``, e.g. pyenv's ``versions/3.11.7``), which
    its ``bin/python`` links to; not a system prefix (``/usr``): the image has its own there."""
    try:
        cfg = (env_root / "pyvenv.cfg").read_text()
    except OSError:
        return []
    for line in cfg.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            prefix = Path(value.strip()).resolve().parent
            return [] if str(prefix) in ("/", "/usr", "/usr/local") else [prefix]
    return []


def passed_names(environ: Mapping[str, str], req: TaskRequest) -> list[str]:
    """The variables podman hands in by name (their values come from the wrapper's environment)."""
    names = {k for k in environ if k.startswith(_PASSED)} | set(req.env)
    names.add("PYTHONUNBUFFERED")
    if host_environment(req) is not None:
        names.add("PYTHONPATH")
    return sorted(n for n in names if n in environ)


def wrap(req: TaskRequest, environ: Mapping[str, str], run_dir: Path,
         engine: str | None = None) -> list[str]:
    """The local executor's command for a trial with ``resources.container``: ``environ`` is the
    environment the command is started with, ``run_dir`` the attempt's folder (its cwd)."""
    image = fields.container("resources.container", req.container)
    engine = engine or runtime()
    binds = mounts(req, environ)
    argv = inner_command(req)
    if engine == "apptainer":
        spec = ",".join(f"{p}:{p}" + ("" if rw else ":ro") for p, rw in binds)
        return ["apptainer", "exec", *(["--nv"] if req.gpus > 0 else []), "--bind", spec,
                "--pwd", str(run_dir), image, *argv]
    return ["podman", "run", "--rm", "--init", "--network=host", "--ipc=host",
            "--security-opt", "label=disable",
            *([] if os.getuid() == 0 else ["--userns=keep-id"]),
            *(["--device", "nvidia.com/gpu=all"] if req.gpus > 0 else []),
            *_volumes(binds), "--workdir", str(run_dir),
            *(x for name in passed_names(environ, req) for x in ("--env", name)),
            _podman_image(image), *argv]


def _volumes(binds: Iterable[tuple[Path, bool]]) -> list[str]:
    return [x for p, rw in binds for x in ("--volume", f"{p}:{p}" + ("" if rw else ":ro"))]


def _podman_image(image: str) -> str:
    """Podman takes ``docker://`` and local names as they are; an Apptainer ``.sif`` it cannot run."""
    if image.endswith(".sif") or image.startswith(("oras://", "library://", "shub://")):
        raise ExecutorError(f"resources.container: podman cannot run {image} (an Apptainer image)",
                            hint=f"install apptainer, or set ${RUNTIME_VAR}=apptainer where it "
                                 "is, or name an OCI image (docker://..., localhost/name:tag)")
    return image
