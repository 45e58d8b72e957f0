"""How a trial's Slurm work is judged, whichever way it runs: one job per trial
(:mod:`gridml.executors.slurm.executor`), a job step of a packed allocation
(:mod:`gridml.executors.slurm.pack`) or a task of a job array (:mod:`gridml.executors.slurm.array`).

- :func:`trial_status`: a job (or step, or task) state -> the trial's state (table in docs/hpc.md);
- :func:`ended`: the exit code the script left in the attempt folder -> the trial's state, for
  work that left the queue (squeue) and accounting (sacct);
- :func:`continuation`: when the trial is continued from its checkpoint, using no retry
  (``TaskStatus.continuation``, ``backend.max_continuations``): the payload exited
  :data:`~payloads.runtime.errors.CONTINUE_CODE` (it checkpointed on Slurm's warning), or the
  work hit a walltime (its own, or its packed allocation's) after a checkpoint was written;
- :class:`NodeWatch`: the lost-node fast path: running work one of whose nodes Slurm sees DOWN or
  NOT_RESPONDING (``scontrol show node``) is lost to the infrastructure at once (cancelled,
  resubmitted without using a retry) instead of after Slurm's NODE_FAIL;
- :class:`Handles`: the grouped handles' bookkeeping (``<prefix><study>.trial-NNNN.a<attempt>``
  -> trial folder and attempt, written once into the executor's journal folder).

Imports nothing of its siblings but :mod:`~gridml.executors.slurm.cli`: the three modules above
import it (no cycle).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from gridml.errors import ExecutorError
from gridml.executors.base import TaskRequest, TaskStatus
from gridml.executors.failures import deterministic
from gridml.executors.journal import HandleIndex
from gridml.executors.logs import last_error_line, tail
from gridml.executors.slurm import cli, journal
from payloads.runtime.errors import CONTINUE_CODE

log = logging.getLogger("gridml.executors.slurm")

PENDING = ("PENDING", "CONFIGURING", "RESV_DEL_HOLD", "REQUEUE_HOLD")
RUNNING = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING", "SUSPENDED", "STOPPED")
REQUEUED = ("REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD")
LOST = {"NODE_FAIL": "a node of the job failed", "BOOT_FAIL": "its nodes failed to boot",
        "PREEMPTED": "it was preempted"}
PAYLOAD = {"FAILED": "the payload failed", "TIMEOUT": "it hit its walltime (resources.walltime)",
           "OUT_OF_MEMORY": "it ran out of memory (raise resources.memory_gb)",
           "DEADLINE": "it reached its deadline"}
OVER = ("COMPLETED", "CANCELLED", *LOST, *PAYLOAD)
NODES_CACHE_S = 2.0  # a running job's node states (scontrol show node) every 2 s at most
NO_NODES = ("", "(null)", "None assigned")


def exit_code(run: Path) -> int | None:
    """The exit code the batch (or step) script wrote into the attempt folder (None: none)."""
    try:
        return int((run / "exit_code").read_text().strip())
    except (OSError, ValueError):
        return None


def has_checkpoint(run: Path) -> bool:
    """The trial of attempt folder ``run`` has a checkpoint to go on from."""
    return (run.parent / "outputs" / "checkpoint" / "state.json").exists()


def continuation(state: str, code: int | None, run: Path) -> str | None:
    """Why the trial is to be continued from its checkpoint in new work (None: it is not): the
    payload left with CONTINUE_CODE (it checkpointed on Slurm's warning, slurm.signal_grace), or
    the work ended TIMEOUT (its walltime, or its packed allocation's) after a checkpoint."""
    if code == CONTINUE_CODE:
        return "the trial checkpointed on Slurm's warning (slurm.signal_grace) and left to be continued"
    if state == "TIMEOUT" and has_checkpoint(run):
        return "it hit its walltime after a checkpoint: continued from there"
    return None


def ended(head: str, code: int | None, run: Path) -> TaskStatus | None:
    """The trial's state from the exit code its script left (None: no exit code)."""
    if code is None:
        return None
    if code == 0:
        return TaskStatus("completed", f"{head}: exit code 0")
    log_tail = tail(run / "payload.log")
    if (go_on := continuation("", code, run)) is not None:  # no retry used (max_continuations)
        return TaskStatus("failed", f"{head}: {go_on}", log_tail, continuation=True)
    last = last_error_line(log_tail)
    return TaskStatus("failed", f"{head}: the payload exited with code {code}"
                      + (f": {last}" if last else ""), log_tail,
                      deterministic=deterministic(code, log_tail))


def left_queue(head: str, run: Path) -> TaskStatus:
    """Work neither squeue nor sacct knows any more: judged by its exit code file alone."""
    over = ended(head, exit_code(run), run)
    if over is not None:
        return over
    return TaskStatus("failed", f"{head} is gone from the queue without an exit code and this "
                      "site keeps no accounting (sacct)", tail(run / "payload.log"))


def trial_status(info: cli.JobInfo, run: Path, *, killed: bool = False) -> TaskStatus:
    """The trial's state for Slurm work in state ``info.state`` (see docs/hpc.md's table)."""
    job, state = info.job_id, info.state
    where = f" on {info.nodes}" if info.nodes not in NO_NODES else ""
    head = f"Slurm job {job} {state}{where}"
    if killed:
        return TaskStatus("killed", f"{head}: cancelled on request (scancel)")
    if state in PENDING:
        return TaskStatus("submitted", head + (f" ({info.reason})" if info.reason not in ("", "None") else ""))
    if state in RUNNING:
        return TaskStatus("running", head)
    if state == "COMPLETED":
        return TaskStatus("completed", head)
    log_tail = tail(run / "payload.log")
    if state in LOST:
        return TaskStatus("failed", f"{head}: {LOST[state]}, not the payload; resubmitted without "
                                    "using a retry", log_tail, infrastructure=True)
    if state in REQUEUED:
        return TaskStatus("submitted", f"{head}: Slurm requeued it; followed as the same attempt")
    if state == "CANCELLED":
        return TaskStatus("killed", f"{head}: cancelled outside gridml (scancel or an "
                                    "administrator)", log_tail)
    why = PAYLOAD.get(state, f"Slurm ended it ({state})")
    code = exit_code(run)
    if code is None and info.exit_code.split(":")[0].isdigit():  # (sacct's "75:0")
        code = int(info.exit_code.split(":")[0]) if state == "FAILED" else None
    if (go_on := continuation(state, code, run)) is not None:  # no retry used (max_continuations)
        return TaskStatus("failed", f"{head}: {go_on}", log_tail, continuation=True)
    if state == "FAILED" and code is not None:
        why = f"the payload exited with code {code}"
    last = last_error_line(log_tail) if state == "FAILED" else ""
    return TaskStatus("failed", f"{head}: {why}" + (f": {last}" if last else ""), log_tail,
                      deterministic=state == "FAILED" and deterministic(code, log_tail))


def lost_status(head: str, lost: list[str], log_tail: str) -> TaskStatus:
    return TaskStatus("failed", f"{head}: node {', '.join(lost)} was lost under it (Slurm marks it "
                      "down), not the payload; resubmitted without using a retry", log_tail,
                      infrastructure=True)


class NodeWatch:
    """The lost-node fast path, shared by jobs, packed steps and array tasks: which nodes of
    running work Slurm sees DOWN or NOT_RESPONDING (``scontrol show node``, once per
    :data:`NODES_CACHE_S` and node list)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, list[str]]] = {}  # node list -> (when, lost)

    def lost(self, nodes: str, what: str = "") -> list[str]:
        if nodes in NO_NODES:
            return []
        when, lost = self._seen.get(nodes, (0.0, []))
        if time.monotonic() - when > NODES_CACHE_S:
            try:
                lost = sorted(n for n, s in cli.node_states(nodes).items() if cli.is_lost(s))
            except ExecutorError as exc:
                log.warning("%s: node states unknown: %s", what or nodes, exc)
                lost = []
            self._seen[nodes] = (time.monotonic(), lost)
        return lost

    def judge(self, status: TaskStatus, info: cli.JobInfo, run: Path, cancel_id: str) -> TaskStatus:
        """``status`` of running work ``info`` (a job, an array task), or: lost to the
        infrastructure, the work cancelled (``scancel cancel_id``), when a node of it is lost.
        Work COMPLETING (its script ended, a step on the lost node cannot be cleaned up) is
        judged the same unless its payload succeeded (exit code 0)."""
        if info.state == "COMPLETING" and exit_code(run) == 0:
            return status
        lost = self.lost(info.nodes, f"slurm:{cancel_id}")
        if not lost:
            return status
        try:
            cli.cancel(cancel_id)
        except ExecutorError as exc:
            log.warning("slurm:%s: not cancelled: %s", cancel_id, exc)
        return lost_status(f"Slurm job {info.job_id} {info.state} on {info.nodes}", lost,
                           tail(run / "payload.log"))


def handle_key(req: TaskRequest) -> str:
    return f"{req.study}.trial-{req.trial_number:04d}.a{req.attempt}"


class Handles:
    """Grouped handles (``<prefix><study>.trial-NNNN.a<attempt>``) -> (trial folder, attempt):
    in memory, and written once into ``<journal folder>/<kind>/`` for a restarted controller."""

    def __init__(self, prefix: str, folder: Path | None) -> None:
        self.prefix = prefix
        self._index = HandleIndex(folder)
        self._where: dict[str, tuple[Path, int]] = {}
        self._lost: dict[str, TaskStatus] = {}  # key -> the verdict "lost to the infrastructure"

    def add(self, req: TaskRequest, mark: str) -> tuple[str, dict[str, Any] | None]:
        """The attempt's handle key, noted; with the attempt's journal entry when a submit
        already took it in (the entry has ``mark`` and was not killed: a restarted controller
        or a repeated submit), else None (a fresh attempt)."""
        key = handle_key(req)
        self._where[key] = (req.workdir, req.attempt)
        self._index.write_once(key, {"workdir": str(req.workdir), "attempt": req.attempt})
        entry = journal.attempt(req.workdir, req.attempt)
        return key, entry if entry.get(mark) and not entry.get("killed") else None

    def locate(self, key: str) -> tuple[Path, int]:
        if key not in self._where:
            doc = self._index.read(key)
            if not doc:
                raise ExecutorError(f"{self.prefix}{key}: not in this executor's journal",
                                    hint="poll it from the campaign that submitted it")
            self._where[key] = (Path(doc["workdir"]), int(doc["attempt"]))
        return self._where[key]

    def lost(self, key: str) -> TaskStatus | None:
        """The verdict once given that the handle's work was lost to the infrastructure: the
        work was cancelled on it, so what Slurm says of it later (CANCELLED) must not replace it."""
        return self._lost.get(key)

    def settle(self, key: str, status: TaskStatus) -> TaskStatus:
        if status.infrastructure:
            self._lost[key] = status
        return status

    def find(self, key: str) -> tuple[Path, int] | None:
        """:meth:`locate`, or None with the reason logged (kill: never raises)."""
        try:
            return self.locate(key)
        except ExecutorError as exc:
            log.error("%s%s: %s", self.prefix, key, exc)
            return None
