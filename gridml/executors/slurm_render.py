"""The batch script of one trial attempt on Slurm (pure: a :class:`TaskRequest` in, text out).

One trial is one batch job named ``gridml.<study>.trial-NNNN`` (found again by that name), its
attempt in the job's comment (``gridml-attempt-N``). ``resources`` are per node; the trial's
``workers`` ranks are spread over ``resources.nodes`` nodes:

- one node: the payload command the local executor runs (``horovodrun -np W -H localhost:W``),
  inside the allocation;
- several nodes: ``mpirun -np W`` (OpenMPI and MPICH read the Slurm allocation: one slot per
  task, ``--ntasks-per-node`` ranks on each node, daemons started with ``srun``) around
  ``python -m payloads.train_keras``; Horovod's MPI controller; every rank prints its
  ``SLURMD_NODENAME`` into the trial's log first.

``resources.container`` wraps the payload in ``apptainer exec [--nv] IMAGE`` (on several nodes:
each rank, the hybrid MPI model). ``slurm.setup`` lines run first on the batch node (``module
load``, ``source env/bin/activate``); the controller's environment's ``bin`` folder is on
``PATH`` before them (shared filesystem). ``slurm.options`` are any other ``sbatch`` options:
``{exclusive: true}`` -> ``--exclusive``, ``{gpus-per-task: 1}`` -> ``--gpus-per-task=1``.
The job does not requeue itself (``--no-requeue``, unless ``options: {requeue: true}``): a lost
node ends it NODE_FAIL and gridml submits the trial's next attempt as a new job, so no attempt
ever runs twice.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from gridml.errors import SpecError
from gridml.executors.base import TaskRequest
from gridml.planner import payload_command

ATTEMPT_COMMENT = "gridml-attempt-{attempt}"
RANK_BANNER = ('echo "[gridml] rank ${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-0}}} on node '
               '${SLURMD_NODENAME:-?} (host $(hostname))" >&2; exec "$@"')


def job_name(study: str, number: int) -> str:
    return f"gridml.{study}.trial-{number:04d}"


def attempt_dir(req: TaskRequest) -> Path:
    return req.workdir / f"attempt-{req.attempt}"


def slurm_time(seconds: int) -> str:
    """``--time`` as D-HH:MM:SS (Slurm rounds up to whole minutes)."""
    seconds = max(int(seconds), 60)
    days, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{days}-{h:02d}:{m:02d}:{s:02d}" if days else f"{h:02d}:{m:02d}:{s:02d}"


def ranks_per_node(workers: int, nodes: int) -> int:
    return -(-workers // max(nodes, 1))


def sbatch_options(req: TaskRequest) -> list[str]:
    """The ``#SBATCH`` options, in a fixed order (golden-tested)."""
    site: dict[str, Any] = req.site or {}
    nodes = max(req.nodes, 1)
    per_node = ranks_per_node(req.workers, nodes)
    run = attempt_dir(req)
    opts = [f"--job-name={job_name(req.study, req.trial_number)}",
            f"--comment={ATTEMPT_COMMENT.format(attempt=req.attempt)}",
            f"--chdir={run}", f"--output={run / 'payload.log'}", "--open-mode=append",
            f"--nodes={nodes}", f"--ntasks={req.workers}"]
    if req.workers % nodes == 0:
        opts.append(f"--ntasks-per-node={per_node}")
    opts.append(f"--cpus-per-task={max(req.cores // per_node, 1)}")
    opts.append(f"--mem={int(round(req.memory_gb * 1024))}M")
    opts.append(f"--time={slurm_time(req.walltime_s)}")
    if req.gpus > 0:
        opts.append(f"--gpus-per-node={req.gpus}")
    for key in ("partition", "account", "qos", "constraint"):
        if site.get(key):
            opts.append(f"--{key}={site[key]}")
    extra: dict[str, Any] = dict(site.get("options") or {})
    if "requeue" not in extra and "no-requeue" not in extra:
        opts.append("--no-requeue")
    for key, value in extra.items():
        key = str(key).lstrip("-")
        text = str(value)
        if "\n" in text or "\n" in key:
            raise SpecError(f"slurm.options.{key}: a value on one line, e.g. {key}: 1")
        if value is True or value is None:
            opts.append(f"--{key}")
        elif value is False:
            continue
        else:
            opts.append(f"--{key}={text}")
    return opts


def _container(req: TaskRequest, argv: list[str]) -> list[str]:
    if not req.container:
        return argv
    return ["apptainer", "exec", *(["--nv"] if req.gpus > 0 else []), req.container, *argv]


def launch_command(req: TaskRequest, trial_file: Path) -> list[str]:
    """How the ranks start inside the allocation (see the module docstring)."""
    framework = req.trial.training.framework
    if max(req.nodes, 1) == 1:
        argv = payload_command(req.workers, req.launcher, str(trial_file), framework=framework)
        return _container(req, argv)
    module = "payloads.train_torch" if framework == "torch" else "payloads.train_keras"
    rank = _container(req, ["python", "-m", module, str(trial_file)])
    return ["mpirun", "-np", str(req.workers), "--bind-to", "none",
            "bash", "-c", RANK_BANNER, "gridml-rank", *rank]


def render_script(req: TaskRequest, trial_file: Path, bindir: str) -> str:
    """The whole batch script; ``trial_file``: the trial document the ranks read;
    ``bindir``: the environment's ``bin`` folder put first on ``PATH``."""
    site: dict[str, Any] = req.site or {}
    env = {"GRIDML_TRIAL_DIR": str(req.workdir), "HOROVOD_START_TIMEOUT": "300",
           "HOROVOD_GLOO_TIMEOUT_SECONDS": "300", **req.env}
    lines = ["#!/bin/bash",
             f"# gridml: study {req.study}, trial {req.trial_number}, attempt {req.attempt}; "
             "submitted with sbatch",
             *(f"#SBATCH {opt}" for opt in sbatch_options(req)),
             "set -uo pipefail",
             f"export PATH={shlex.quote(bindir)}:\"$PATH\"",
             *(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())),
             "# OpenMPI refuses root without these (containers, test clusters)",
             'if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 '
             "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi"]
    setup = [str(line) for line in site.get("setup") or []]
    if setup:
        lines += ["# slurm.setup", *setup]
    lines += ['echo "[gridml] job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST} '
              '(batch node ${SLURMD_NODENAME:-?}, restart ${SLURM_RESTART_COUNT:-0})" >&2',
              "rm -f exit_code",
              shlex.join(launch_command(req, trial_file)),
              "code=$?",
              "echo $code > exit_code.tmp && mv exit_code.tmp exit_code",
              "exit $code", ""]
    return "\n".join(lines)


def render_for_request(req: TaskRequest, bindir: str | None = None) -> dict[str, Any]:
    """What the Slurm executor would submit for ``req`` (the dry run)."""
    import sys

    bindir = bindir or str(Path(sys.executable).parent)
    trial_file = attempt_dir(req) / "trial.json"
    return {"executor": "slurm", "trial": req.trial_number, "attempt": req.attempt,
            "job_name": job_name(req.study, req.trial_number),
            "script_path": str(attempt_dir(req) / "job.sh"),
            "script": render_script(req, trial_file, bindir)}
