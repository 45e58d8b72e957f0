"""The records of the metrics store: studies, trials, per-epoch reports, and the trial states.

Trial states::

    queued ──▶ submitted ──▶ running ──▶ completed | failed | pruned | killed
    (queued: proposed or enqueued by an external optimizer, not yet submitted;
     submitted: the submission is recorded *before* the executor is called, so a restarted
     controller re-attaches instead of submitting twice)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

TRIAL_STATES = ("queued", "submitted", "running", "completed", "failed", "pruned", "killed")
ACTIVE_STATES = ("queued", "submitted", "running")
FINISHED_STATES = ("completed", "failed", "pruned", "killed")


@dataclass
class Study:
    id: int
    name: str
    spec: dict[str, Any]  # the resolved spec (JSON form)
    spec_hash: str
    state: str = "running"  # running | finished | stopped | closed
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


@dataclass
class EpochReport:
    """What the payload's rank 0 reports after each epoch (the trial contract)."""

    epoch: int  # 1-based
    metrics: dict[str, float]  # loss, val_loss, accuracy, val_accuracy ...
    epoch_time: float  # seconds of wall time for the epoch
    samples_per_s: float | None = None
    input_wait_frac: float | None = None  # time blocked on input / epoch time
    peak_rss_mb: float | None = None
    threads: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch, "metrics": self.metrics, "epoch_time": self.epoch_time,
            "samples_per_s": self.samples_per_s, "input_wait_frac": self.input_wait_frac,
            "peak_rss_mb": self.peak_rss_mb, "threads": self.threads, "extra": self.extra,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EpochReport:
        return cls(
            epoch=int(d["epoch"]), metrics={k: float(v) for k, v in d["metrics"].items()},
            epoch_time=float(d["epoch_time"]), samples_per_s=d.get("samples_per_s"),
            input_wait_frac=d.get("input_wait_frac"), peak_rss_mb=d.get("peak_rss_mb"),
            threads=d.get("threads"), extra=dict(d.get("extra") or {}),
        )

