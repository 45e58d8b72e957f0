"""The Executor seam: submit a trial task, poll it, kill it.

Backends: ``local`` (process groups on this machine; default), ``panda`` (panda-client -> JEDI
task), ``dryrun`` (renders what would be submitted, submits nothing). ``gridml.executors.create``
is the one place that chooses. Every backend passes tests/integration/test_executor_contract.py.

An executor takes everything from the :class:`~gridml.planner.TaskRequest` (the trial document
is inside it) and the campaign's data manager it was created with; what it needs to poll a handle
after a controller restart it keeps in its own journal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from gridml.planner import TaskRequest

__all__ = ["Executor", "TaskRequest", "TaskStatus"]


@dataclass
class TaskStatus:
    state: str  # submitted | running | completed | failed | killed | unknown
    message: str = ""
    log_tail: str = ""  # last lines of the trial's log when it failed
    # Remote executors (PanDA) whose pilot already stored the outputs in the output dataset set
    # this ([{did, name, bytes, adler32}]) and put metrics.jsonl/result.json into
    # <workdir>/outputs for the controller; the controller then uploads nothing itself.
    stored_outputs: list[dict[str, Any]] | None = None
    # True: the infrastructure lost the task (node lost, preempted, killed on request), not the
    # payload: the controller resubmits it without using up one of the trial's retries.
    infrastructure: bool = False


class Executor(Protocol):
    name: str
    remote: bool  # True: the job stages its inputs in itself (trial file lists file names, not paths)

    def submit(self, req: TaskRequest) -> str: ...  # -> handle (external id); idempotent per attempt
    def poll(self, handle: str) -> TaskStatus: ...
    def kill(self, handle: str) -> None: ...
    def close(self) -> None: ...  # stop everything still running (Ctrl-C)
