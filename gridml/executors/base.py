"""The Executor seam: submit a trial task, poll it, kill it.

Backends: ``local`` (process groups on this machine; default), ``panda`` (panda-client -> JEDI
task), ``dryrun`` (renders what would be submitted, submits nothing). ``gridml.executors.create``
is the one place that chooses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass
class TaskRequest:
    """One trial to run: what the planner derives from the spec and a proposed point."""

    study: str
    trial_id: int
    trial_number: int
    workdir: Path  # the trial's directory: trial.json, outputs/, logs
    trial_file: Path  # the trial contract (JSON) given to the payload
    workers: int  # Horovod ranks
    cores: int
    gpus: int
    memory_gb: float
    walltime_s: int
    container: str | None = None
    input_dids: list[str] = field(default_factory=list)
    output_dataset: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskStatus:
    state: str  # submitted | running | completed | failed | killed | unknown
    message: str = ""
    log_tail: str = ""  # last lines of the trial's log when it failed
    # Remote executors (PanDA) whose pilot already stored the outputs in the output dataset set
    # this ([{did, name, bytes, adler32}]) and put metrics.jsonl/result.json into
    # <workdir>/outputs for the controller; the controller then uploads nothing itself.
    stored_outputs: list[dict[str, Any]] | None = None


class Executor(Protocol):
    name: str
    remote: bool  # True: the job stages its inputs in itself (trial file lists file names, not paths)

    def submit(self, req: TaskRequest) -> str: ...  # -> handle (external id); idempotent per trial
    def poll(self, handle: str) -> TaskStatus: ...
    def kill(self, handle: str) -> None: ...
    def close(self) -> None: ...  # stop everything still running (Ctrl-C)
