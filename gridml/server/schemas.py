"""API shapes (pydantic), apart from the database tables. Field names follow ``gridml.store``."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
)
from pydantic import Strict as NoCoercion

from gridml.store import TRIAL_STATES, EpochReport, Study, Trial

StudyName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=200)]


def _json_integer(value: Any) -> Any:
    """An integer as JSON has it: 3 or 3.0, never true/false or "3" (pydantic's lax mode
    would take those, which the document does not allow)."""
    if isinstance(value, (bool, str, bytes)):
        raise ValueError("should be an integer")
    return value


# numbers as the document says: a JSON number, not true/false or a numeric string
Number = Annotated[float, NoCoercion()]
Integer = Annotated[int, BeforeValidator(_json_integer)]
METRIC_NAME = r"^[A-Za-z0-9_.:/@-]{1,100}$"
MetricName = Annotated[str, StringConstraints(pattern=METRIC_NAME)]
# the metrics mapping as the server checks it: every key a metric name, every value a number or
# null (pydantic alone would write `patternProperties`, which lets any other key through)
Metrics = Annotated[dict[MetricName, Number | None], WithJsonSchema({
    "type": "object", "propertyNames": {"pattern": METRIC_NAME},
    "additionalProperties": {"anyOf": [{"type": "number"}, {"type": "null"}]},
    "description": "metric name -> value; null (or a NaN literal): not a number"})]
Finished = Literal["completed", "failed", "pruned", "killed"]
_STATE = "|".join(TRIAL_STATES)
# `?state=running,completed` or `?state=running&state=completed`: each item one or more states
StateFilter = Annotated[str, StringConstraints(pattern=rf"^({_STATE})(,({_STATE}))*$")]
NAN = float("nan")


class FieldProblem(BaseModel):
    """One reason a request did not validate."""

    loc: list[str | int] = Field(description="where: 'body', 'query', 'path', then the field")
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every error the API answers (4xx, 5xx) has this body."""

    detail: str = Field(description="what went wrong, naming the object")
    hint: str | None = Field(default=None, description="how to fix it, when known")
    errors: list[FieldProblem] | None = Field(
        default=None, description="422 for a request that does not validate: each problem")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# one example body per request schema: in the document (/docs), and what schemathesis'
# examples phase sends (the space of docs/quickstart.md's kind of study)
SPACE_EXAMPLE: dict[str, Any] = {"lr": {"type": "real", "low": 0.0001, "high": 0.1, "log": True},
                                 "act": {"type": "categorical", "choices": ["relu", "tanh"]}}


class StudyCreate(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "name": "external-demo", "spec": {"search": {
            "algorithm": "external", "objective": "val_loss", "space": SPACE_EXAMPLE}}}]})

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
    objectives: list[float | None] | None = None
    violations: list[float | None] | None = None
    # the one evaluation on data.test after training (rejection_at_NN, auc, loss, the metrics
    # hook's names; non-finite as null): apart from the epochs, never an objective
    test_metrics: dict[str, float | None] | None = None
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
        if data["test_metrics"] is not None:
            data["test_metrics"] = {k: v if v is None or math.isfinite(v) else None
                                    for k, v in data["test_metrics"].items()}
        return cls(**data)


class RocCurve(BaseModel):
    """One trial's validation ROC curve (its roc.json, thinned): the dashboard's overlay."""

    id: int
    number: int
    objective: float | None
    auc: float | None = None
    rejection: dict[str, float | str | None] = {}  # rejection_at_NN; "inf": no background left
    output: str | None = None  # logit | probability
    signal_efficiency: list[float]
    background_efficiency: list[float]


class RocMissing(BaseModel):
    number: int
    reason: str


class RocOut(BaseModel):
    """The ROC curves of the best completed trials, best first, and those that have none."""

    trials: list[RocCurve]
    missing: list[RocMissing]


class StudySummary(StudyOut):
    counts: dict[str, int]
    best: TrialOut | None
    pareto: list[int] = []  # trial numbers of the Pareto front (gridml.store.best.pareto_front)


class TrialPage(BaseModel):
    trials: list[TrialOut]
    total: int
    limit: int
    offset: int


class TrialEnqueue(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"hparams": {"lr": 0.01, "act": "relu"}}]})

    hparams: dict[str, Any]


class EpochIn(Strict):
    """One epoch's report: ``EpochReport.to_json()``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "epoch": 1, "metrics": {"loss": 0.41, "val_loss": 0.45}, "epoch_time": 12.5,
        "samples_per_s": 5200.0}]})

    epoch: Integer = Field(ge=1, le=1_000_000)
    metrics: Metrics  # null (or NaN): not a number, e.g. a diverged loss
    epoch_time: Number = Field(ge=0)
    samples_per_s: Number | None = Field(default=None, ge=0)
    input_wait_frac: Number | None = Field(default=None, ge=0, le=1)
    peak_rss_mb: Number | None = Field(default=None, ge=0)
    # (the limits before the validator: after it, pydantic writes them as ge/le, not JSON Schema)
    threads: Annotated[int, Field(ge=0, le=10_000_000), BeforeValidator(_json_integer)] | None = None
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
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"state": "completed"}]})

    state: Finished
    objective: Number | None = None  # default: the last epoch's objective metric
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
