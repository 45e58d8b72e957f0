"""The scripts of packed allocations and job arrays (pure: a :class:`TaskRequest` in, text out).

``slurm.pack: K`` (:mod:`gridml.executors.slurm.pack`): an **allocation** is one batch job that
holds K trial slots (``--ntasks=K --cpus-per-task=<resources.cores>``, ``--mem`` and ``--gpus``
K times a trial's) and runs nothing but a holder loop; every trial attempt is one **job step** of
it, started from the submit host::

    srun --jobid=<allocation> --exact --nodes=1 --ntasks=1 --cpus-per-task=<cores> --mem=<M>
         [--gpus-per-task=<gpus>] [--signal=USR1@<slurm.signal_grace>]
         --time=<resources.walltime> --job-name=<trial>.a<attempt>
         --chdir=<attempt folder> --output=<attempt folder>/payload.log --open-mode=append
         bash <attempt folder>/step.sh

``step.sh`` is the trial's batch script (:func:`gridml.executors.slurm.render.render_script`)
without its ``#SBATCH`` lines: the launcher (horovodrun, torchrun) starts the ranks inside the
step, on the step's cores; ``--gpus-per-task`` gives the step its own GPUs (Slurm sets
``CUDA_VISIBLE_DEVICES``). The holder ends itself when the controller has not touched the
allocation's ``lease`` file for :data:`LEASE_S` and no step of it runs (a campaign that ended, a
controller that died); the controller releases (``scancel``) an allocation it has no trial for.

``slurm.array: true`` (:mod:`gridml.executors.slurm.array`): the trials a controller cycle
submits go as one job array: ``sbatch --array=0-<n-1>[%<array_throttle>] array.sh``; task ``i``
reads line ``i+1`` of the batch's ``tasks.txt`` (an attempt folder) and runs (``exec``) that
attempt's ``job.sh`` there, its output appended to the attempt's ``payload.log``; the array asks
for the trial's warning (``--signal=B:USR1@<slurm.signal_grace>``), which job.sh's trap forwards.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

from gridml import fields
from gridml.executors.base import TaskRequest
from gridml.executors.slurm.render import (attempt_dir, job_name, sbatch_options, signal_grace_s,
                                           signal_option, slurm_time)
from gridml.executors.slurm.render import render_for_request as one_job
from gridml.specmodel.model import parse_walltime

LEASE_S = 30  # the holder ends this long after the controller's last word, when no step runs
MARGIN_S = 30  # a step starts only in an allocation with its walltime + this left
# sbatch options of a trial's own job that an allocation or an array sets itself
_PER_TRIAL = ("--job-name=", "--comment=", "--chdir=", "--output=", "--open-mode=", "--nodes=",
              "--ntasks=", "--ntasks-per-node=", "--cpus-per-task=", "--mem=", "--time=",
              "--gpus-per-node=")


def pack_slots(site: dict[str, Any] | None) -> int:
    return int((site or {}).get("pack") or 0)


def is_array(site: dict[str, Any] | None) -> bool:
    return bool((site or {}).get("array"))


def pack_walltime_s(req: TaskRequest) -> int:
    """An allocation's walltime: ``slurm.pack_walltime``, default 4 x the trial's; at least the
    trial's + 2 x MARGIN_S (validation says so; a shorter one could never start a step)."""
    given = (req.site or {}).get("pack_walltime")
    seconds = parse_walltime(given) if given is not None else 4 * req.walltime_s
    return max(seconds, req.walltime_s + 2 * MARGIN_S)


def memory_mb(req: TaskRequest) -> int:
    return int(round(req.memory_gb * 1024))


def alloc_shape(req: TaskRequest) -> str:
    """What makes two trials fit the same allocation (resources, site options): a short hash."""
    site = {k: v for k, v in (req.site or {}).items() if k != "setup"}
    doc = {"study": req.study, "cores": req.cores, "gpus": req.gpus, "mem": memory_mb(req),
           "walltime": req.walltime_s, "site": site}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:10]


def alloc_name(study: str) -> str:
    return f"gridml.{study}.alloc"


def alloc_folder(req: TaskRequest) -> Path:
    """Where the allocations of the trial's shape keep their script, logs and lease."""
    return req.workdir.parent / ".slurm" / f"pack-{alloc_shape(req)}"


def alloc_comment(folder: Path) -> str:
    return f"gridml-{folder.name}"


def alloc_options(req: TaskRequest, folder: Path) -> list[str]:
    """The allocation's ``#SBATCH`` options: K slots of one trial's resources, on one node."""
    k = pack_slots(req.site)
    site_opts = [o for o in sbatch_options(req) if not o.startswith(_PER_TRIAL)]
    opts = [f"--job-name={fields.job_name(alloc_name(req.study))}",
            f"--comment={alloc_comment(folder)}",
            f"--chdir={fields.script_path('allocation folder', folder)}",
            f"--output={fields.script_path('allocation log', folder / 'alloc-%j.log')}",
            "--open-mode=append", "--nodes=1", f"--ntasks={k}",
            f"--cpus-per-task={max(req.cores, 1)}", f"--mem={k * memory_mb(req)}M",
            f"--time={slurm_time(pack_walltime_s(req))}"]
    if req.gpus > 0:
        opts.append(f"--gpus={k * req.gpus}")
    return opts + site_opts


def alloc_script(req: TaskRequest, folder: Path) -> str:
    """The allocation's batch script: it holds the slots; the trials are its job steps."""
    k = pack_slots(req.site)
    lease = shlex.quote(str(folder / "lease"))
    lines = ["#!/bin/bash",
             f"# gridml: study {req.study}, a packed allocation of {k} trial slots; the trials run "
             "as its job steps (srun --jobid from the submit host)",
             *(f"#SBATCH {opt}" for opt in alloc_options(req, folder)),
             "set -u",
             'echo "[gridml] allocation ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST}: '
             f'{k} slots" >&2',
             f"# ends itself when the controller has been silent for {LEASE_S} s and no step runs",
             "while sleep 2; do",
             f"  age=$(( $(date +%s) - $(stat -c %Y {lease} 2>/dev/null || echo 0) ))",
             f"  [ \"$age\" -gt {LEASE_S} ] || continue",
             '  steps=$(squeue --noheader --steps -j "$SLURM_JOB_ID" -o %i) || continue',
             "  if ! grep -qvE '\\.(batch|extern)$' <<<\"$steps\"; then",
             '    echo "[gridml] no word from the controller for ${age} s and no step left: '
             'the allocation ends" >&2; exit 0',
             "  fi",
             "done", ""]
    return "\n".join(lines)


def step_name(req: TaskRequest) -> str:
    return f"{job_name(req.study, req.trial_number)}.a{req.attempt}"


def step_script(batch_script: str) -> str:
    """A trial's batch script run as a job step: the same lines but the ``#SBATCH`` ones."""
    lines = batch_script.splitlines()
    head = [ln.replace("submitted with sbatch", "run as a job step of a packed allocation")
            for ln in lines[:2]]
    return "\n".join(head + [ln for ln in lines[2:] if not ln.startswith("#SBATCH ")]) + "\n"


def srun_argv(req: TaskRequest, alloc_id: str) -> list[str]:
    """The step's ``srun`` line, run on the submit host (see the module docstring)."""
    run = attempt_dir(req)
    argv = ["srun", f"--jobid={alloc_id}", "--exact", "--nodes=1", "--ntasks=1",
            f"--cpus-per-task={max(req.cores, 1)}", f"--mem={memory_mb(req)}M"]
    if req.gpus > 0:
        argv.append(f"--gpus-per-task={req.gpus}")
    if (grace := signal_grace_s(req)) > 0:  # Slurm's warning to the step (slurm.signal_grace)
        argv.append(f"--signal=USR1@{grace}")
    argv += [f"--time={slurm_time(req.walltime_s)}",
             f"--job-name={fields.job_name(step_name(req))}",
             f"--chdir={run}", f"--output={run / 'payload.log'}", "--open-mode=append",
             "--kill-on-bad-exit=1", "bash", str(run / "step.sh")]
    return argv


# ---- job arrays -----------------------------------------------------------------------------
def array_name(study: str) -> str:
    return f"gridml.{study}.array"


def array_comment(folder: Path) -> str:
    return f"gridml-{folder.name}"


def array_range(n: int, throttle: int | None) -> str:
    return f"0-{n - 1}" + (f"%{throttle}" if throttle else "")


def array_own_options(req: TaskRequest) -> list[str]:
    """A trial's ``#SBATCH`` options that every task of its array shares (its resources, site),
    and Slurm's warning (``--signal=B:USR1@<slurm.signal_grace>``): ``array.sh`` ``exec``s the
    task's ``job.sh``, so the warning reaches that script's trap, which tells the ranks."""
    own = [o for o in sbatch_options(req)
           if not o.startswith(("--job-name=", "--comment=", "--chdir=", "--output=", "--open-mode="))]
    return own + ([warn] if (warn := signal_option(req)) else [])


def array_options(study: str, own: list[str], folder: Path, n: int, throttle: int | None) -> list[str]:
    """The array's ``#SBATCH`` options: one trial's resources per task (``own``); ``n`` tasks."""
    return [f"--job-name={fields.job_name(array_name(study))}",
            f"--comment={array_comment(folder)}",
            f"--chdir={fields.script_path('array folder', folder)}",
            f"--output={fields.script_path('array log', folder / 'task-%a.log')}",
            f"--array={array_range(n, throttle)}", *own]


def array_script(study: str, own: list[str], folder: Path, n: int, throttle: int | None) -> str:
    """The job array's batch script: task ``i`` runs the attempt on line ``i+1`` of tasks.txt."""
    tasks = shlex.quote(str(folder / "tasks.txt"))
    lines = ["#!/bin/bash",
             f"# gridml: study {study}, a job array of {n} trials; task i runs the trial attempt "
             "on line i+1 of tasks.txt",
             *(f"#SBATCH {opt}" for opt in array_options(study, own, folder, n, throttle)),
             "set -uo pipefail",
             f'dir=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" {tasks})',
             'if [ -z "$dir" ] || ! cd "$dir"; then',
             '  echo "[gridml] array task ${SLURM_ARRAY_TASK_ID}: no attempt folder on its line" >&2',
             "  exit 2", "fi",
             'echo "[gridml] array job ${SLURM_ARRAY_JOB_ID} task ${SLURM_ARRAY_TASK_ID}" >> payload.log',
             "exec bash job.sh >> payload.log 2>&1", ""]
    return "\n".join(lines)


def array_throttle(req: TaskRequest) -> int | None:
    value = (req.site or {}).get("array_throttle")
    return int(value) if value else None


# ---- the dry run ----------------------------------------------------------------------------
def render_packed(req: TaskRequest, batch_script: str) -> str:
    """What `gridml submit --dry-run` prints for a packed trial: the allocation's script, the
    step's srun line and its script."""
    folder = alloc_folder(req)
    run = attempt_dir(req)
    return "\n".join([f"# the allocations of this trial's shape ({folder / 'alloc.sh'}, "
                      "sbatch --parsable, as many as the queued trials need)",
                      alloc_script(req, folder),
                      "# the trial's job step, started on the submit host once a slot is free",
                      "# " + shlex.join(srun_argv(req, "<ALLOCATION>")),
                      f"# {run / 'step.sh'}",
                      step_script(batch_script)])


def render_arrayed(req: TaskRequest, batch_script: str, index: int) -> str:
    """What `gridml submit --dry-run` prints for a trial of a job array (task ``index`` of a
    cycle's array, shown as if the array held the trials up to it)."""
    folder = req.workdir.parent / ".slurm" / "array-<N>"
    return "\n".join([f"# the cycle's job array ({folder / 'array.sh'}), sbatch --parsable; "
                      f"this trial is task {index}, line {index + 1} of tasks.txt: {attempt_dir(req)}",
                      array_script(req.study, array_own_options(req), folder, index + 1,
                                   array_throttle(req)),
                      f"# {attempt_dir(req) / 'job.sh'}", batch_script])


def render_for_request(req: TaskRequest, bindir: str | None = None) -> dict[str, Any]:
    """What the Slurm executor would submit for ``req`` (the dry run): the trial's batch script
    (:func:`gridml.executors.slurm.render.render_for_request`), or with ``slurm.pack`` the
    allocation, srun line and step script, with ``slurm.array`` the array and task scripts."""
    doc = one_job(req, bindir)
    if pack_slots(req.site):
        doc.update(script_path=str(attempt_dir(req) / "step.sh"), script=render_packed(req, doc["script"]),
                   srun=srun_argv(req, "<ALLOCATION>"), pack=pack_slots(req.site))
    elif is_array(req.site):
        doc.update(script=render_arrayed(req, doc["script"], req.trial_number),
                   array_task=req.trial_number)
    return doc
