"""The Slurm executor: every trial attempt is one batch job, submitted with ``sbatch``.

``submit`` renders the batch script (:mod:`gridml.executors.slurm.render`, pure) into the attempt's
folder and hands it to ``sbatch --parsable``; ``poll`` reads ``squeue -t all`` (one call for every
job of the executor per second at most), then ``sacct`` where the site keeps accounting, then the
exit code the script leaves in the attempt folder; ``kill`` is ``scancel``. The commands and their
error translation live in :mod:`gridml.executors.slurm.cli` (a thin layer; see docs/hpc.md for why
no library), the journals in :mod:`gridml.executors.slurm.journal`.

Nothing twice: the job name is ``gridml.<study>.trial-NNNN`` and its comment names the attempt;
the trial's journal notes "submitting" before ``sbatch`` and the job id right after, so a
controller killed at any point and resumed finds its job (journal, else ``squeue --name`` and the
attempt comment) and never submits an attempt twice. A job cancelled on request is marked killed
and never followed again: the next attempt is a new job. Jobs are not requeued by Slurm unless
the spec asks (``--no-requeue``, ``slurm.options: {requeue: true}``); a job that Slurm requeues
anyway (``scontrol requeue``, a preemption with ``PreemptMode=REQUEUE``) keeps its job id and is
followed as the same attempt: no retry used, no second job.

Job states -> trial states: PENDING -> submitted, RUNNING -> running, COMPLETED -> completed;
FAILED (the payload's exit code), TIMEOUT (walltime), OUT_OF_MEMORY, DEADLINE -> failed (they use
``backend.retries``); NODE_FAIL, BOOT_FAIL, PREEMPTED -> failed with ``infrastructure=True``
(resubmitted without using a retry); REQUEUED -> submitted (the same job); CANCELLED -> killed;
exit 75 or TIMEOUT after a checkpoint -> continued (no retry used). The rules, and the lost-node
fast path, live in :mod:`gridml.executors.slurm.follow`, shared with packed steps and arrays.

Shared filesystem: trials read their staged inputs and write ``outputs/`` (with the metrics
spool ``metrics.jsonl``) under ``$GRIDML_HOME/runs``, which the nodes must see at the same path.
A metrics API a compute node cannot reach (loopback: the embedded server;
:func:`gridml.executors.reach.reachable_api_url`, the rule of every remote backend): the trial
document the ranks read (``attempt-N/trial.json``) then has no API and the metrics come through the spool,
which the controller reads each cycle while the job runs; early-stopping decisions go back as
``decision.json`` and ``progress.json`` tells a stalled job (gridml/live.py, docs/hpc.md), which
gets ``scancel --signal=USR2`` (stack dumps, :meth:`SlurmExecutor.dump`) before ``scancel``.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

from gridml.errors import ExecutorError
from gridml.executors.slurm import cli, journal
from gridml.executors.base import TaskRequest, TaskStatus
from gridml.executors.reach import reachable_api_url
from gridml.executors.slurm.array import PREFIX as ARRAYED
from gridml.executors.slurm.array import Arrays
from gridml.executors.slurm.follow import (OVER, NodeWatch, continuation, left_queue, lost_status,
                                           trial_status)
from gridml.executors.slurm.pack import PREFIX as PACKED
from gridml.executors.slurm.pack import Packer
from gridml.executors.slurm.render import attempt_dir, job_name, render_script
from gridml.executors.slurm.render_pack import is_array, pack_slots, step_script

__all__ = ["SlurmExecutor", "continuation", "job_id_of", "trial_status"]

log = logging.getLogger("gridml.executors.slurm")

CACHE_S = 1.0  # one squeue for every job of this executor per second at most
# what a rank's launcher prints when a peer node vanished under it (OpenMPI/ORTE, Horovod, Gloo)
PEER_LOST = re.compile(r"lost communication with a remote daemon|ORTE daemon has unexpectedly "
                       r"failed|orted.*(died|terminated)|Connection (reset|closed) by peer|"
                       r"HorovodInternalError|Gloo.*(timed out|Connection)", re.I)


def job_id_of(handle: str) -> str:
    job_id = handle.rsplit(":", 1)[-1]
    if not handle.startswith("slurm:") or not job_id.isdigit():
        raise ExecutorError(f"{handle!r} is not a Slurm job handle (slurm:<job id>)")
    return job_id


class SlurmExecutor:
    """:class:`gridml.executors.base.Executor` on Slurm (see the module docstring)."""

    name = "slurm"
    remote = False  # shared filesystem: the controller stages inputs where the nodes read them
    watch_heartbeats = False  # a queued job is silent, nodes may have no network: Slurm
    #                            enforces the walltime instead

    def __init__(self, journal: Path | None = None, bindir: str | None = None,
                 payload_override: list[str] | None = None) -> None:
        self._journal = journal  # folder: <job id>.json -> the trial folder and attempt
        self._bindir = bindir or str(Path(sys.executable).parent)
        # benchmarks/slurm_overhead.py only: a trivial job instead of the payload
        self._payload_override = payload_override
        self._jobs: dict[str, tuple[Path, int]] = {}  # job id -> (trial folder, attempt)
        self._seen: dict[str, cli.JobInfo] = {}
        self._seen_at = 0.0
        self._final: dict[str, TaskStatus] = {}
        self._suspect: dict[str, float] = {}  # job id -> when its failure was first seen
        self._node_timeout: float | None = None
        self._nodes = NodeWatch()  # the lost-node fast path, shared with the array tasks
        self._packer: Packer | None = None  # slurm.pack (gridml.executors.slurm.pack)
        self._arrays: Arrays | None = None  # slurm.array (gridml.executors.slurm.array)

    @property
    def packer(self) -> Packer:
        if self._packer is None:
            self._packer = Packer(self._journal, self._nodes)
        return self._packer

    @property
    def arrays(self) -> Arrays:
        if self._arrays is None:
            self._arrays = Arrays(self._journal, self._nodes)
        return self._arrays

    # -- submit ------------------------------------------------------------------------------
    def submit(self, req: TaskRequest) -> str:
        """Submit the attempt's job, or find the one already submitted for it. ``slurm.pack``:
        queue it for a job step of a packed allocation; ``slurm.array``: for the cycle's array."""
        if pack_slots(req.site) or is_array(req.site):
            return self._submit_grouped(req)
        entry = journal.attempt(req.workdir, req.attempt)
        if entry.get("job_id") and not entry.get("killed"):
            return self._remember(str(entry["job_id"]), req.workdir, req.attempt)
        name = job_name(req.study, req.trial_number)
        if entry.get("submitting") and not entry.get("killed"):
            found = self._find(name, req.attempt)  # killed after sbatch, before the journal
            if found:
                log.info("trial %d attempt %d: found job %s by name", req.trial_number, req.attempt, found)
                journal.update_attempt(req.workdir, req.attempt, job_id=found)
                return self._remember(found, req.workdir, req.attempt)
        run = attempt_dir(req)
        run.mkdir(parents=True, exist_ok=True)
        trial_file = self._write_trial(req, run)
        script = run / "job.sh"
        text = render_script(req, trial_file, self._bindir)
        if self._payload_override:
            text = _override(text, self._payload_override)
        script.write_text(text)
        journal.update_attempt(req.workdir, req.attempt, submitting=journal.now(), job_id=None,
                               killed=None, state=None)
        job_id = cli.submit(script, partition=(req.site or {}).get("partition"))
        journal.update_attempt(req.workdir, req.attempt, job_id=job_id, submitted_at=journal.now(),
                               state="PENDING")
        log.info("trial %d attempt %d: Slurm job %s (%s)", req.trial_number, req.attempt, job_id, name)
        return self._remember(job_id, req.workdir, req.attempt)

    def _submit_grouped(self, req: TaskRequest) -> str:
        run = attempt_dir(req)
        run.mkdir(parents=True, exist_ok=True)
        trial_file = self._write_trial(req, run)
        text = render_script(req, trial_file, self._bindir)
        if self._payload_override:
            text = _override(text, self._payload_override)
        if pack_slots(req.site):
            return self.packer.submit(req, step_script(text))
        return self.arrays.submit(req, text)

    def _find(self, name: str, attempt: int) -> str | None:
        comment = f"gridml-attempt-{attempt}"
        mine = [j for j in cli.queue(name=name).values() if j.comment == comment]
        return max(mine, key=lambda j: int(j.job_id)).job_id if mine else None

    @staticmethod
    def _write_trial(req: TaskRequest, run: Path) -> Path:
        """The trial document the ranks read; without an API a node cannot reach (loopback)."""
        doc = req.trial
        if doc.api is not None and reachable_api_url(doc.api.url, remote=True) is None:
            doc = doc.replace(api=None)
        path = run / "trial.json"
        tmp = run / ".trial.json.tmp"
        tmp.write_text(doc.dumps())
        tmp.chmod(0o600)  # it may hold the trial's token
        tmp.replace(path)
        return path

    def _remember(self, job_id: str, workdir: Path, attempt: int) -> str:
        self._jobs[job_id] = (workdir, attempt)
        journal.write_handle(self._journal, job_id, workdir, attempt)
        return f"slurm:{job_id}"

    def _where(self, job_id: str) -> tuple[Path, int]:
        if job_id not in self._jobs:  # a restarted controller: its journal knows the job
            noted = journal.read_handle(self._journal, job_id)
            if noted is None:
                raise ExecutorError(f"slurm:{job_id}: not in this executor's journal ({self._journal})",
                                    hint="poll it from the campaign that submitted it")
            self._jobs[job_id] = noted
        return self._jobs[job_id]

    # -- follow ------------------------------------------------------------------------------
    def poll(self, handle: str) -> TaskStatus:
        if handle.startswith(PACKED):
            return self.packer.poll(handle.removeprefix(PACKED))
        if handle.startswith(ARRAYED):
            return self.arrays.poll(handle.removeprefix(ARRAYED))
        job_id = job_id_of(handle)
        if job_id in self._final:
            return self._final[job_id]
        workdir, attempt = self._where(job_id)
        entry = journal.attempt(workdir, attempt)
        killed = bool(entry.get("killed"))
        run = workdir / f"attempt-{attempt}"
        try:
            info = self._info(job_id)
        except ExecutorError as exc:  # slurmctld busy or restarting: keep waiting, Slurm keeps the job
            log.warning("%s: %s", handle, exc)
            return TaskStatus("unknown", str(exc))
        if info is None:
            status = self._gone(job_id, run, killed)
        else:
            if info.restarts > 0 and not killed and entry.get("restarts") != info.restarts:
                log.warning("Slurm job %s was requeued (restart %d): followed as the same attempt",
                            job_id, info.restarts)
                journal.update_attempt(workdir, attempt, restarts=info.restarts)
            status = trial_status(info, run, killed=killed)
            status.restarts = info.restarts
            if info.state == "FAILED" and not killed:
                status = self._lost_node_or(status, info)
            elif info.state in ("RUNNING", "COMPLETING") and not killed:
                status = self._on_lost_node(status, info, run)
            if entry.get("state") != info.state or entry.get("nodes") != info.nodes:
                journal.update_attempt(workdir, attempt, state=info.state, nodes=info.nodes)
        if status.state in ("completed", "failed", "killed") and (info is None or info.state in OVER
                                                                 or status.infrastructure):
            self._final[job_id] = status
        return status

    def _info(self, job_id: str) -> cli.JobInfo | None:
        if job_id not in self._seen or time.monotonic() - self._seen_at > CACHE_S:
            ids = sorted({job_id, *(j for j in self._jobs if j not in self._final)}, key=int)
            self._seen = cli.queue(ids)
            self._seen_at = time.monotonic()
        return self._seen.get(job_id)

    def _lost_node_or(self, status: TaskStatus, info: cli.JobInfo) -> TaskStatus:
        """A multi-node job whose ranks died because a peer vanished: its batch script often ends
        (FAILED) before Slurm notices the node is gone (SlurmdTimeout). Such a failure is held
        back, as "running", until Slurm has had the time to mark the node down; if it does, the
        job counts as lost to the infrastructure (no retry used), else as the payload's failure."""
        if ("," not in info.nodes and "[" not in info.nodes or not PEER_LOST.search(status.log_tail)
                or status.continuation):
            return status
        try:
            lost = cli.lost_nodes(info.nodes)
            if self._node_timeout is None:
                self._node_timeout = cli.slurmd_timeout_s()
        except ExecutorError as exc:
            log.warning("slurm:%s: node states unknown: %s", info.job_id, exc)
            lost = []
        if lost:
            self._suspect.pop(info.job_id, None)
            return lost_status(f"Slurm job {info.job_id} FAILED on {info.nodes}", lost, status.log_tail)
        since = self._suspect.setdefault(info.job_id, time.monotonic())
        wait = 3 * (self._node_timeout or 300.0) + 30
        if time.monotonic() - since < wait:
            return TaskStatus("running", f"Slurm job {info.job_id} FAILED as a peer node vanished; "
                              f"waiting up to {wait:.0f} s for Slurm to tell whether a node was lost")
        return status

    def _on_lost_node(self, status: TaskStatus, info: cli.JobInfo, run: Path) -> TaskStatus:
        """A running job one of whose nodes Slurm sees DOWN or NOT_RESPONDING (``scontrol show
        node``): lost now, not after Slurm's NODE_FAIL (SlurmdTimeout) or the surviving ranks'
        timeouts; the job is cancelled and the trial resubmitted without using a retry
        (:meth:`gridml.executors.slurm.follow.NodeWatch.judge`, shared with array tasks)."""
        return self._nodes.judge(status, info, run, info.job_id)

    def _gone(self, job_id: str, run: Path, killed: bool) -> TaskStatus:
        """squeue no longer shows the job (MinJobAge passed): sacct, else its exit code file."""
        info = cli.accounting(job_id)
        if info is not None:
            status = trial_status(info, run, killed=killed)
            return self._lost_node_or(status, info) if info.state == "FAILED" and not killed else status
        if killed:
            return TaskStatus("killed", f"Slurm job {job_id}: cancelled on request (scancel)")
        return left_queue(f"Slurm job {job_id}", run)

    # -- control -----------------------------------------------------------------------------
    def kill(self, handle: str) -> None:
        """scancel; the job is marked killed in the trial's journal, never followed again. If
        scancel fails the job may go on: that is logged, not raised (stopping a campaign stops
        everything else)."""
        if handle.startswith(PACKED):
            return self.packer.kill(handle.removeprefix(PACKED))
        if handle.startswith(ARRAYED):
            return self.arrays.kill(handle.removeprefix(ARRAYED))
        job_id = job_id_of(handle)
        try:
            workdir, attempt = self._where(job_id)
        except ExecutorError as exc:
            log.error("%s: %s", handle, exc)
            workdir = None
        try:
            cli.cancel(job_id)
            log.info("%s: scancel sent", handle)
        except ExecutorError as exc:
            log.error("%s: could not be cancelled, it may still run: %s", handle, exc)
        if workdir is not None:
            journal.update_attempt(workdir, attempt, killed=journal.now())
        self._final.pop(job_id, None)

    def dump(self, handle: str) -> None:
        """Every rank's stacks into the job's log before a stalled trial is killed: SIGUSR2 to
        the job's processes (faulthandler, payloads/runtime/entry.py; gridml/live.py)."""
        if handle.startswith((PACKED, ARRAYED)):
            return  # a step or an array task: its own stacks are not reachable by job id alone
        cli.signal(job_id_of(handle), "USR2")
        log.info("%s: SIGUSR2 sent (stack dump)", handle)

    def close(self) -> None:
        """Nothing runs in this process: jobs go on in Slurm (Ctrl-C cancels them through
        ``kill`` first), so a `gridml serve` restart does not touch them. Packed
        allocations with no running step are released; a cycle's array is submitted."""
        self._seen.clear()
        if self._packer is not None:
            self._packer.close()
        if self._arrays is not None:
            self._arrays.close()


def _override(script: str, argv: list[str]) -> str:
    """The script with its payload line replaced (benchmarks only)."""
    import shlex

    lines = script.splitlines()
    i = lines.index("code=$?") - 1
    lines[i] = shlex.join(argv)
    return "\n".join(lines) + "\n"


def status_line(workdir: Path) -> dict[str, Any] | None:
    """The trial's newest Slurm job and the state last seen, for `gridml status`."""
    return journal.last_state(workdir)
