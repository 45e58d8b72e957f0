"""The thin layer over Slurm's own commands: ``sbatch --parsable``, ``squeue``, ``sacct
--parsable2``, ``scancel``. Every call and its error translation lives here.

Slurm's configuration is Slurm's own: the commands read ``SLURM_CONF`` (or the site's default)
exactly as they do for the user; gridml sets nothing. ``squeue -t all`` shows a finished job for
``MinJobAge`` (default 300 s) after its end; after that ``sacct`` (slurmdbd) is asked, when the
site has accounting.
"""

from __future__ import annotations

import logging
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gridml.errors import ExecutorError, SpecError

log = logging.getLogger("gridml.executors.slurm")

TIMEOUT_S = 60.0
# squeue -O fields, "|"-terminated; Comment last (it is the user's text)
_SQUEUE_FIELDS = ("JobID", "State", "Reason", "NodeList", "RestartCnt", "Name", "Comment")
_SQUEUE_FORMAT = ",".join(f"{f}:|" for f in _SQUEUE_FIELDS)


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str  # Slurm's base state, e.g. RUNNING, NODE_FAIL
    reason: str = ""
    nodes: str = ""
    restarts: int = 0
    name: str = ""
    comment: str = ""
    exit_code: str = ""  # from sacct only ("0:0")


def _run(argv: list[str], *, what: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ExecutorError(f"{what}: `{argv[0]}` is not on PATH on this machine",
                            hint="run gridml where Slurm's commands work (a login node), or load "
                                 "Slurm's module first") from None
    except subprocess.TimeoutExpired:
        raise ExecutorError(f"{what}: `{argv[0]}` did not answer in {TIMEOUT_S:.0f} s",
                            hint="is slurmctld up? try `sinfo`") from None


def _first_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors[-1] if errors else lines[-1] if lines else "no output").removeprefix("sbatch: ")


def submit(script: Path, *, partition: str | None = None) -> str:
    """``sbatch --parsable SCRIPT`` -> the job id. Errors are one line naming what to fix."""
    proc = _run(["sbatch", "--parsable", str(script)], what=f"sbatch {script}")
    if proc.returncode != 0:
        why = _first_error(proc.stderr or proc.stdout)
        if "invalid partition" in why.lower():
            raise SpecError(f"slurm.partition: {partition!r} is not a partition of this cluster "
                            f"(sbatch: {why}); see `sinfo` for the partitions")
        if "invalid account" in why.lower() or "invalid qos" in why.lower():
            raise SpecError(f"slurm: sbatch refused the job: {why}; see `sacctmgr show assoc "
                            "user=$USER` for your accounts and QOS")
        if "constraint" in why.lower() or "feature" in why.lower():
            raise SpecError(f"slurm.constraint: sbatch refused the job: {why}; see `sinfo -o "
                            "'%N %f'` for the node features")
        if "node configuration is not available" in why.lower():
            raise SpecError(f"resources: no node of partition {partition or '(default)'} has what "
                            f"the trial asks per node (sbatch: {why}); see `sinfo -N -l`, lower "
                            "resources.cores/memory_gb/gpus or raise resources.nodes")
        raise ExecutorError(f"sbatch {script}: {why}", hint="see `sinfo` and the script's #SBATCH lines")
    job_id = proc.stdout.strip().split(";")[0].strip()
    if not job_id.isdigit():
        raise ExecutorError(f"sbatch {script}: unexpected answer {proc.stdout.strip()!r}")
    return job_id


def _parse_squeue(text: str) -> list[JobInfo]:
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", len(_SQUEUE_FIELDS) - 1)
        if len(parts) < len(_SQUEUE_FIELDS):
            continue
        job_id, state, reason, nodes, restarts, name, comment = (p.strip() for p in parts)
        comment = comment.removesuffix("|").strip()
        jobs.append(JobInfo(job_id=job_id, state=state.split()[0] if state else "", reason=reason,
                            nodes=nodes, restarts=int(restarts) if restarts.isdigit() else 0,
                            name=name, comment="" if comment == "(null)" else comment))
    return jobs


def queue(job_ids: list[str] | None = None, *, name: str | None = None) -> dict[str, JobInfo]:
    """``squeue -t all`` for these jobs (or all jobs with this name): job id -> info. Jobs that
    Slurm no longer shows are absent."""
    argv = ["squeue", "--noheader", "-t", "all", "-O", _SQUEUE_FORMAT]
    if job_ids:
        argv += ["-j", ",".join(job_ids)]
    if name:
        argv += ["--name", name]
    proc = _run(argv, what="squeue")
    if proc.returncode != 0:
        err = _first_error(proc.stderr)
        if "invalid job id" in err.lower():
            return {}
        raise ExecutorError(f"squeue: {err}", hint="is slurmctld up? try `sinfo`")
    return {j.job_id: j for j in _parse_squeue(proc.stdout)}


def accounting(job_id: str) -> JobInfo | None:
    """``sacct`` for a job squeue no longer shows; None where the site has no accounting."""
    proc = _run(["sacct", "-j", job_id, "--parsable2", "--noheader", "-X",
                 "-o", "JobID,State,ExitCode,NodeList,JobName"], what="sacct")
    if proc.returncode != 0:
        return None
    for line in proc.stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and parts[0] == job_id:
            return JobInfo(job_id=job_id, state=parts[1].split()[0], exit_code=parts[2],
                           nodes=parts[3], name=parts[4])
    return None


def lost_nodes(nodes: str) -> list[str]:
    """Which of ``nodes`` (a Slurm host list) Slurm sees down, failing or not responding now."""
    proc = _run(["sinfo", "--noheader", "-N", "-n", nodes, "-o", "%N|%t"], what="sinfo")
    lost = []
    for line in proc.stdout.splitlines():
        name, _, state = line.partition("|")
        state = state.strip()
        if state.endswith("*") or state.startswith(("down", "drain", "fail", "boot")):
            lost.append(name.strip())
    return sorted(set(lost))


def slurmd_timeout_s() -> float:
    """The cluster's SlurmdTimeout: how long a lost node may go unnoticed (default 300 s)."""
    proc = _run(["scontrol", "show", "config"], what="scontrol show config")
    m = re.search(r"^SlurmdTimeout\s*=\s*(\d+)", proc.stdout, re.M)
    return float(m[1]) if m else 300.0


def cancel(job_id: str) -> None:
    proc = _run(["scancel", job_id], what=f"scancel {job_id}")
    if proc.returncode != 0:
        err = _first_error(proc.stderr)
        if re.search(r"invalid job id|already completing or completed|job has finished", err, re.I):
            return
        raise ExecutorError(f"scancel {job_id}: {err}")


def signal(job_id: str, sig: str) -> None:
    """``scancel --signal=SIG --full``: ``sig`` to every process of the job (the batch script's
    too, not only its steps); the job goes on unless the signal ends it."""
    proc = _run(["scancel", f"--signal={sig}", "--full", job_id], what=f"scancel --signal={sig} {job_id}")
    if proc.returncode != 0:
        err = _first_error(proc.stderr)
        if re.search(r"invalid job id|already completing or completed|job has finished", err, re.I):
            return
        raise ExecutorError(f"scancel --signal={sig} {job_id}: {err}")
