"""The records of the metrics store: studies, trials, per-epoch reports, and the trial states.

Trial states::

    queued ──▶ submitted ──▶ running ──▶ completed | failed | pruned | killed | diverged
                   └──────────┴──▶ stopping ──▶ stopped (or completed, failed, diverged)
    (queued: proposed or enqueued by an external optimizer, not yet submitted;
     stopping: `gridml stop` asked it to stop (its ``error`` says how: after its epoch, or
     now); stopped: it ended so (its model kept, never retried, never best); a queued trial
     stopped by hand goes straight to stopped;
     submitted: the submission is recorded *before* the executor is called, so a restarted
     controller re-attaches instead of submitting twice;
     diverged: the payload ended, but an objective of its last epoch is not finite (NaN, inf):
     never best, never on the Pareto front, told to the searcher as a failure)

Study states: running | finished | stopping (`gridml stop`: its trials end, no new ones) |
stopped (Ctrl-C, or stopped by hand) | closed (its external optimizer is done) | failed (the
server's controller could not run it: see gridml.service).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# The per-epoch report is the payload's (payloads/runtime/report.py, standard library only): one
# definition for what rank 0 spools and posts and what the store keeps; null <-> NaN both ways.
from payloads.runtime.report import EpochReport

TRIAL_STATES = ("queued", "submitted", "running", "completed", "failed", "pruned", "killed",
                "diverged", "stopping", "stopped")
ACTIVE_STATES = ("queued", "submitted", "running", "stopping")
FINISHED_STATES = ("completed", "failed", "pruned", "killed", "diverged", "stopped")
STUDY_STATES = ("running", "finished", "stopped", "closed", "failed", "stopping")
__all__ = ["ACTIVE_STATES", "FINISHED_STATES", "STUDY_STATES", "TRIAL_STATES", "EpochReport",
           "Study", "Trial"]


@dataclass
class Study:
    id: int
    name: str
    spec: dict[str, Any]  # the resolved spec (JSON form)
    spec_hash: str
    state: str = "running"  # running | finished | stopping | stopped | closed | failed
    created: datetime | None = None
    token: str | None = None  # plain study token: only returned by create_study


@dataclass
class Trial:
    id: int
    study_id: int
    number: int  # 0, 1, 2 ... within the study
    hparams: dict[str, Any]
    state: str = "queued"
    objective: float | None = None  # the first objective (search.objectives) or the only one
    epochs_done: int = 0
    error: str | None = None
    source: str = "searcher"  # searcher | external | scale
    external_id: str | None = None  # executor handle: local pid/group, PanDA jediTaskID
    attempts: int = 0
    last_heartbeat: datetime | None = None
    created: datetime | None = None
    started: datetime | None = None
    finished: datetime | None = None
    outputs: list[dict[str, Any]] = field(default_factory=list)  # [{did, name, bytes, adler32}]
    token: str | None = None  # plain trial token: only returned when issued
    objectives: list[float | None] | None = None  # all objective values (search.objectives)
    violations: list[float | None] | None = None  # per search.constraints: 0 met, > 0 missed by,
    # None not reported (gridml.store.best.feasible)
    # the figures of the one evaluation on data.test after training ({name: value}; None: no
    # test split): shown apart, never an objective, never told to the searcher
    test_metrics: dict[str, float | None] | None = None
