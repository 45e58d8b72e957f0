"""API shapes (pydantic), apart from the database tables. Field names follow ``gridml.store``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from gridml.store import EpochReport, Study, Trial

StudyName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=200)]
MetricName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:/@-]{1,100}$")]
Finished = Literal["completed", "failed", "pruned", "killed"]
NAN = float("nan")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StudyCreate(Strict):
    name: StudyName
    spec: dict[str, Any] = Field(default_factory=dict)
    spec_hash: str | None = Field(default=None, max_length=64)


class StudyOut(BaseModel):
    id: int
    name: str
    state: str
    spec_hash: str
    created: datetime | None
    spec: dict[str, Any]

    @classmethod
    def of(cls, study: Study) -> StudyOut:
        return cls(id=study.id, name=study.name, state=study.state, spec_hash=study.spec_hash,
                   created=study.created, spec=study.spec)


class StudyCreated(StudyOut):
    token: str  # shown once; the server keeps only its sha256


class TrialOut(BaseModel):
    id: int
    study_id: int
    number: int
    hparams: dict[str, Any]
    state: str
    objective: float | None
    epochs_done: int
    error: str | None
    source: str
    external_id: str | None
    attempts: int
    last_heartbeat: datetime | None
    created: datetime | None
    started: datetime | None
    finished: datetime | None
    outputs: list[dict[str, Any]]

    @classmethod
    def of(cls, trial: Trial) -> TrialOut:
        data = {k: getattr(trial, k) for k in cls.model_fields}
        return cls(**data)


class StudySummary(StudyOut):
    counts: dict[str, int]
    best: TrialOut | None


class TrialPage(BaseModel):
    trials: list[TrialOut]
    total: int
    limit: int
    offset: int


class TrialEnqueue(Strict):
    hparams: dict[str, Any]


class EpochIn(Strict):
    """One epoch's report: ``EpochReport.to_json()``."""

    epoch: int = Field(ge=1, le=1_000_000)
    metrics: dict[MetricName, float | None]  # null (or NaN): not a number, e.g. a diverged loss
    epoch_time: float = Field(ge=0)
    samples_per_s: float | None = Field(default=None, ge=0)
    input_wait_frac: float | None = Field(default=None, ge=0, le=1)
    peak_rss_mb: float | None = Field(default=None, ge=0)
    threads: int | None = Field(default=None, ge=0, le=10_000_000)
    extra: dict[str, Any] = Field(default_factory=dict)

    def report(self) -> EpochReport:
        data = self.model_dump()
        data["metrics"] = {k: NAN if v is None else v for k, v in data["metrics"].items()}
        return EpochReport(**data)


class EpochOut(BaseModel):
    epoch: int
    metrics: dict[str, float | None]
    epoch_time: float
    samples_per_s: float | None
    input_wait_frac: float | None
    peak_rss_mb: float | None
    threads: int | None
    extra: dict[str, Any]


class EpochAck(BaseModel):
    trial_id: int
    epoch: int
    stored: bool  # False: the same report was stored before (a repeat is a no-op)


class FinishIn(Strict):
    state: Finished
    objective: float | None = None  # default: the last epoch's objective metric
    error: str | None = Field(default=None, max_length=20_000)


class ShouldStop(BaseModel):
    stop: bool
    reason: str


class AskOut(BaseModel):
    points: list[dict[str, Any]]
    exhausted: bool = False


class Heartbeat(BaseModel):
    trial_id: int
    last_heartbeat: datetime | None
    state: str
