"""The write path of epoch reports in plain SQL (Core): a batch per transaction.

Kept apart from the ORM because it is the hot path of the server (thousands of reports/s):
at most two SELECTs, one multi-row INSERT and one executemany UPDATE per batch, whatever its
size, with every statement built once at import (building SQLAlchemy statements costs more than
running them on SQLite). Trial ids known to exist are remembered per process: trials are never
deleted one by one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, case, func, literal, or_, select, update
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.schema import Table

from gridml.errors import ConflictError, GridmlError, NotFoundError
from gridml.store.sql import convert
from gridml.store.sql.models import EpochRow, TrialRow

EPOCHS: Table = EpochRow.__table__  # type: ignore[assignment]
TRIALS: Table = TrialRow.__table__  # type: ignore[assignment]
Item = tuple[int, int, dict[str, Any], str]  # trial id, epoch, canonical body, its hash

_IDS: BindParameter[Any] = bindparam("ids", expanding=True)
_EPOCHS: BindParameter[Any] = bindparam("eps", expanding=True)
_DONE: BindParameter[Any] = bindparam("done")
_NOW: BindParameter[Any] = bindparam("now")
FIND_TRIALS = select(TRIALS.c.id).where(TRIALS.c.id.in_(_IDS))
FIND_HASHES = select(EPOCHS.c.trial_id, EPOCHS.c.epoch, EPOCHS.c.body_hash).where(
    and_(EPOCHS.c.trial_id.in_(_IDS), EPOCHS.c.epoch.in_(_EPOCHS)))
INSERT = EPOCHS.insert()
TOUCH = update(TRIALS).where(TRIALS.c.id == bindparam("tid")).values(
    epochs_done=case((TRIALS.c.epochs_done < _DONE, _DONE), else_=TRIALS.c.epochs_done),
    last_heartbeat=_NOW,
    started=func.coalesce(TRIALS.c.started, _NOW),
    state=case((or_(TRIALS.c.state == "queued", TRIALS.c.state == "submitted"),
                literal("running")), else_=TRIALS.c.state),
)


def record_many(conn: Connection, items: list[Item], now: datetime,
                known: set[int] | None = None) -> list[bool | GridmlError]:
    """Store what is new, compare what is known; one result per item (see SqlStore).
    ``known``: trial ids known to exist (updated here)."""
    known = set() if known is None else known
    trial_ids = sorted({item[0] for item in items})
    missing = [t for t in trial_ids if t not in known]
    if missing:
        known.update(conn.execute(FIND_TRIALS, {"ids": missing}).scalars())
    stored = _stored_hashes(conn, items)
    results: list[bool | GridmlError] = []
    new_rows: list[dict[str, Any]] = []
    for trial_id, epoch, body, digest in items:
        results.append(_judge(trial_id, epoch, digest, known, stored))
        if results[-1] is True:
            stored[(trial_id, epoch)] = digest
            new_rows.append({"trial_id": trial_id, "epoch": epoch, "created": now,
                             "body": convert.encode_body(body), "body_hash": digest})
    if new_rows:
        conn.execute(INSERT, new_rows)
        _touch_trials(conn, new_rows, now)
    return results


def _stored_hashes(conn: Connection, items: list[Item]) -> dict[tuple[int, int], str]:
    params = {"ids": sorted({item[0] for item in items}),
              "eps": sorted({item[1] for item in items})}
    return {(t, e): h for t, e, h in conn.execute(FIND_HASHES, params)}


def _judge(trial_id: int, epoch: int, digest: str, known_trials: set[int],
           stored: dict[tuple[int, int], str]) -> bool | GridmlError:
    if trial_id not in known_trials:
        return NotFoundError(f"trial {trial_id} not found",
                             hint="`gridml status STUDY` lists the trials of a study")
    previous = stored.get((trial_id, epoch))
    if previous is None:
        return True
    if previous == digest:
        return False
    return ConflictError(f"trial {trial_id} epoch {epoch} was already reported with different "
                         "metrics", hint="reports are write-once; resend the original body or "
                                         "report the next epoch")


def _touch_trials(conn: Connection, new_rows: list[dict[str, Any]], now: datetime) -> None:
    """epochs_done = max(epochs_done, newest epoch); a sign of life; submitted -> running."""
    newest: dict[int, int] = {}
    for row in new_rows:
        newest[row["trial_id"]] = max(newest.get(row["trial_id"], 0), row["epoch"])
    conn.execute(TOUCH, [{"tid": t, "done": d, "now": now} for t, d in sorted(newest.items())])
