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


def submit(script: Path, *, partition: str | None = None, array: str | None = None) -> str:
    """``sbatch --parsable [--array=RANGE] SCRIPT`` -> the job id. Errors are one line naming
    what to fix."""
    extra = [f"--array={array}"] if array else []
    proc = _run(["sbatch", "--parsable", *extra, str(script)], what=f"sbatch {script}")
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


# ---- packed allocations and job arrays (gridml.executors.slurm.pack, .array) -------------------
@dataclass(frozen=True)
class AllocInfo:
    job_id: str
    state: str
    time_left_s: float | None  # None: unlimited or not known
    nodes: str = ""


def _duration_s(text: str) -> float | None:
    """Slurm's [D-]HH:MM:SS / MM:SS / M -> seconds; None for UNLIMITED, INVALID, NOT_SET."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(?:(\d+):)?(\d+)", text.strip())
    if not m:
        return None
    days, a, b, c = (int(g) if g else 0 for g in m.groups())
    if m[2] is not None and m[3] is not None:  # H:M:S
        h, mi, s = a, b, c
    elif m[2] is not None:  # M:S, or D-H:M... read as M:S as squeue prints
        h, mi, s = (a, c, 0) if m[1] else (0, a, c)
    else:
        h, mi, s = 0, c, 0
    return float(days * 86400 + h * 3600 + mi * 60 + s)


def allocations(job_ids: list[str]) -> dict[str, AllocInfo]:
    """``squeue`` for packed allocations: state, time left, nodes; absent: gone from squeue."""
    if not job_ids:
        return {}
    proc = _run(["squeue", "--noheader", "-t", "all", "-j", ",".join(job_ids),
                 "-O", "JobID:|,State:|,TimeLeft:|,NodeList:|"], what="squeue")
    if proc.returncode != 0:
        err = _first_error(proc.stderr)
        if "invalid job id" in err.lower():
            return {}
        raise ExecutorError(f"squeue: {err}", hint="is slurmctld up? try `sinfo`")
    out = {}
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 4 and parts[0].isdigit():
            out[parts[0]] = AllocInfo(parts[0], parts[1].split()[0] if parts[1] else "",
                                      _duration_s(parts[2]), parts[3])
    return out


def steps(job_ids: list[str]) -> dict[str, dict[str, str]]:
    """``squeue --steps``: allocation job id -> {step name: step id} of its running steps (not
    the batch and extern steps)."""
    if not job_ids:
        return {}
    proc = _run(["squeue", "--noheader", "--steps", "-j", ",".join(job_ids), "-o", "%i|%j"],
                what="squeue --steps")
    if proc.returncode != 0:
        err = _first_error(proc.stderr)
        if "invalid job id" in err.lower():
            return {}
        raise ExecutorError(f"squeue --steps: {err}", hint="is slurmctld up? try `sinfo`")
    out: dict[str, dict[str, str]] = {j: {} for j in job_ids}
    for line in proc.stdout.splitlines():
        step, _, name = line.strip().partition("|")
        job, _, sid = step.partition(".")
        if sid.isdigit() and job in out:
            out[job][name.strip()] = sid
    return out


def step_accounting(job_id: str) -> dict[str, JobInfo]:
    """``sacct`` for the steps of a job (an allocation or an array): step name (or array job id
    ``A_i``) -> its state and exit code. Empty where the site has no accounting."""
    proc = _run(["sacct", "-j", job_id, "--parsable2", "--noheader",
                 "-o", "JobID,State,ExitCode,NodeList,JobName"], what="sacct")
    if proc.returncode != 0:
        return {}
    out = {}
    for line in proc.stdout.splitlines():
        parts = line.split("|")
        if len(parts) < 5 or not parts[1]:
            continue
        info = JobInfo(job_id=parts[0], state=parts[1].split()[0], exit_code=parts[2],
                       nodes=parts[3], name=parts[4])
        if "." in parts[0] and parts[0].split(".", 1)[1].isdigit():
            out[parts[4]] = info  # a numbered step, by its name
        elif "_" in parts[0] and "." not in parts[0]:
            out[parts[0]] = info  # an array task, A_i
    return out


def array_tasks(job_id: str) -> dict[int, JobInfo]:
    """``squeue -r`` for a job array: task index -> its state (every task, pending ones too)."""
    proc = _run(["squeue", "--noheader", "-r", "-t", "all", "-j", job_id,
                 "-O", "ArrayTaskID:|,State:|,Reason:|,NodeList:|,JobID:|"], what="squeue")
    if proc.returncode != 0:
        err = _first_error(proc.stderr)
        if "invalid job id" in err.lower():
            return {}
        raise ExecutorError(f"squeue: {err}", hint="is slurmctld up? try `sinfo`")
    out = {}
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 5 and parts[0].isdigit():
            out[int(parts[0])] = JobInfo(job_id=f"{job_id}_{parts[0]}", state=parts[1].split()[0],
                                         reason=parts[2], nodes=parts[3])
    return out


def submit_array(script: Path, array: str) -> str:
    """``sbatch --parsable --array=RANGE SCRIPT`` -> the array's job id (errors as :func:`submit`)."""
    return submit(script, array=array)


def node_states(nodes: str) -> dict[str, str]:
    """``scontrol show node -o NODES``: node -> its state (e.g. ``ALLOCATED``,
    ``DOWN+NOT_RESPONDING``, ``IDLE*``)."""
    proc = _run(["scontrol", "show", "node", "-o", nodes], what="scontrol show node")
    out = {}
    for line in proc.stdout.splitlines():
        name = re.search(r"NodeName=(\S+)", line)
        state = re.search(r"\bState=(\S+)", line)
        if name and state:
            out[name[1]] = state[1]
    return out


def is_lost(state: str) -> bool:
    """A node state meaning the node is gone: DOWN, NOT_RESPONDING (``*``), FAIL, POWERED_DOWN."""
    s = state.upper()
    return s.endswith("*") or any(w in s for w in ("DOWN", "NOT_RESPONDING", "FAIL"))
