"""Rows <-> the dataclasses of ``gridml.store``; canonical forms for hashing."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from gridml.store.sql.models import OutputRow, StudyRow, TrialRow
from gridml.store.records import EpochReport, Study, Trial

NUMBERS = ("epoch_time", "samples_per_s", "input_wait_frac", "peak_rss_mb")


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(value: datetime | None) -> datetime | None:
    """Datetimes in UTC (timezone.utc): SQLite returns naive ones, PostgreSQL its own zone."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def canonical_epoch(report: EpochReport) -> dict[str, Any]:
    """The report as stored: numbers normalised so 3 and 3.0 compare equal."""
    body = report.to_json()
    body["metrics"] = {k: float(v) for k, v in sorted(report.metrics.items())}
    for key in NUMBERS:
        body[key] = _num(getattr(report, key))  # NaN kept (to_json() writes it as null)
    body["threads"] = None if report.threads is None else int(report.threads)
    return body


def body_hash(body: dict[str, Any]) -> str:
    """sha256 of the canonical JSON; NaN is written as a string so it equals itself."""
    return sha256(json.dumps(encode_body(body), sort_keys=True, separators=(",", ":")))


def encode_body(body: dict[str, Any]) -> dict[str, Any]:
    """Strict JSON for the database (PostgreSQL refuses NaN): non-finite -> 'nan'/'inf'."""
    return _finite_or_str(body)  # type: ignore[no-any-return]


def decode_body(body: dict[str, Any]) -> EpochReport:
    """The stored body back into a report ('nan'/'inf' strings back into floats)."""
    data = dict(body)
    data["metrics"] = {k: float(v) for k, v in body["metrics"].items()}
    for key in NUMBERS:
        if isinstance(data.get(key), str):
            data[key] = float(data[key])
    return EpochReport.from_json(data)


def json_body(body: dict[str, Any]) -> dict[str, Any]:
    """The stored body as the API sends it: ``to_json()``'s shape, non-finite numbers as None
    (the dashboard's bulk read; no EpochReport in between)."""
    metrics = body["metrics"]
    if any(isinstance(v, str) for v in metrics.values()):
        body["metrics"] = {k: None if isinstance(v, str) else v for k, v in metrics.items()}
    for key in NUMBERS:
        if isinstance(body.get(key), str):
            body[key] = None
    return body


def _finite_or_str(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _finite_or_str(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_str(v) for v in value]
    return value


def to_study(row: StudyRow, token: str | None = None) -> Study:
    return Study(id=row.id, name=row.name, spec=row.spec, spec_hash=row.spec_hash,
                 state=row.state, created=aware(row.created), token=token)


def to_trial(row: TrialRow, outputs: Sequence[OutputRow] = (), token: str | None = None) -> Trial:
    return Trial(
        id=row.id, study_id=row.study_id, number=row.number, hparams=dict(row.hparams),
        state=row.state, objective=row.objective, epochs_done=row.epochs_done, error=row.error,
        source=row.source, external_id=row.external_id, attempts=row.attempts,
        last_heartbeat=aware(row.last_heartbeat), created=aware(row.created),
        started=aware(row.started), finished=aware(row.finished),
        outputs=[to_output(o) for o in outputs], token=token,
        objectives=None if row.objectives is None else list(row.objectives),
        violations=None if row.violations is None else list(row.violations),
        test_metrics=None if row.test_metrics is None else {
            k: float(v) if isinstance(v, str) else v for k, v in row.test_metrics.items()},
    )


def to_output(row: OutputRow) -> dict[str, Any]:
    out: dict[str, Any] = {"did": row.did, "name": row.name, "bytes": row.bytes,
                           "adler32": row.adler32}
    out.update(row.extra or {})
    return out


def output_row(trial_id: int, out: dict[str, Any]) -> OutputRow:
    known = {"did", "name", "bytes", "adler32"}
    return OutputRow(trial_id=trial_id, did=str(out["did"]),
                     name=str(out.get("name") or str(out["did"]).split(":")[-1]),
                     bytes=out.get("bytes"), adler32=out.get("adler32"),
                     extra={k: v for k, v in out.items() if k not in known})
