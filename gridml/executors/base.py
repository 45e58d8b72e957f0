"""The backend seams: an Executor (submit a trial task, poll it, kill it), or a StudyDriver
(a service outside gridml proposes the points: the whole study is one task).

Backends: ``local`` (process groups on this machine; default), ``panda`` (panda-client -> JEDI
task), ``dryrun`` (renders what would be submitted, submits nothing). ``gridml.executors.create``
is the one place that chooses. Every backend passes tests/integration/test_executor_contract.py.

An executor takes everything from the :class:`~gridml.planner.TaskRequest` (the trial document
is inside it) and the campaign's data manager it was created with; what it needs to poll a handle
after a controller restart it keeps in its own journal. What the controller may expect of it is
declared here, on the protocol (``remote``, ``watch_heartbeats``), and set by every backend.

A :class:`StudyDriver` (``backend.executor: phpo``, :mod:`gridml.phpo.driver`) replaces the
controller's own ask/submit/poll cycle: each cycle the campaign hands itself over as a
:class:`CampaignView` (what a driver may read and write of it) and the driver records the trials
its service ran. ``gridml.assemble`` is the one place that chooses between the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gridml.layout import StudyPaths
from gridml.planner import TaskRequest
from gridml.spec import Spec
from gridml.store import CampaignStore, Study, Trial

__all__ = ["CampaignView", "Executor", "StudyDriver", "TaskRequest", "TaskStatus"]


@dataclass
class TaskStatus:
    state: str  # submitted | running | completed | failed | killed | unknown
    message: str = ""
    log_tail: str = ""  # last lines of the trial's log when it failed
    # Remote executors (PanDA) whose pilot already stored the outputs in the output dataset set
    # this ([{did, name, bytes, adler32}]) and put metrics.jsonl/result.json into
    # <workdir>/outputs for the controller; the controller then uploads nothing itself.
    stored_outputs: list[dict[str, Any]] | None = None
    # Times the batch system put the task back in its queue as the same attempt (Slurm's restart
    # count: a preemption with PreemptMode=REQUEUE, scontrol requeue): each is a new run, whose
    # progress the stall check tells from the run before's (gridml/live.py).
    restarts: int = 0
    # True: the infrastructure lost the task (node lost, preempted, killed on request), not the
    # payload: the controller resubmits it without using up one of the trial's retries.
    infrastructure: bool = False
    # True: the payload failed in a way certain to repeat (exit code 2: a bad model file, trial
    # file or spec field; an import error in the model file: gridml.executors.failures): the
    # controller fails the trial without a retry.
    deterministic: bool = False
    # True: the trial checkpointed before its job ended (preemption, walltime: the payload's
    # exit code 75, payloads/runtime/errors.py CONTINUE_CODE) and goes on from there in a new
    # job: the controller resubmits it without using a retry, up to backend.max_continuations.
    continuation: bool = False


class Executor(Protocol):
    name: str
    remote: bool  # True: the job stages its inputs in itself (trial file lists file names, not paths)
    # True: the controller kills a running trial silent past backend.heartbeat_timeout. False
    # where the scheduler enforces the walltime and nodes may have no network (PanDA, Slurm).
    watch_heartbeats: bool

    def submit(self, req: TaskRequest) -> str: ...  # -> handle (external id); idempotent per attempt
    def poll(self, handle: str) -> TaskStatus: ...
    def kill(self, handle: str) -> None: ...
    def close(self) -> None: ...  # stop everything still running (Ctrl-C)


class CampaignView(Protocol):
    """What a :class:`StudyDriver` may read and write of its campaign: the study, its store
    (trials, epochs), its spec, its state folder, the plan of a trial without a point yet, and
    the two steps every finished trial goes through, whoever ran it."""

    study: Study
    store: CampaignStore
    spec: Spec
    paths: StudyPaths

    def template_request(self) -> TaskRequest:
        """The plan of a trial without a point yet (in ``paths.phpo``): what a per-study
        service fills in for each point it proposes."""
        ...

    def ingest_spool(self, trial: Trial, spool: Path) -> int:
        """Record a trial's spooled epoch reports (idempotent)."""
        ...

    def scores(self, trial: Trial) -> dict[str, Any]:
        """The trial's ``objective`` (and ``objectives``, ``violations``) from its stored epochs,
        by the one rule of :mod:`gridml.store.best`."""
        ...


class StudyDriver(Protocol):
    """A backend whose own service proposes the points and runs them (phpo: iDDS + PanDA)."""

    name: str
    remote: bool  # as Executor.remote: the service's jobs stage their inputs themselves

    def step(self, campaign: CampaignView) -> bool: ...  # one cycle; True when the study is over
    def close(self) -> None: ...  # Ctrl-C: the service keeps the study's task (resume follows it)
