"""``SqlStore``: the metrics store (``gridml.store.protocol``) on SQLAlchemy (SQLite or PostgreSQL).

Safe for several processes on one database (controller + server workers). Tokens: see
``gridml.store.sql.tokens``. SQLAlchemy and driver errors leave it as ``StoreUnavailableError``
(``gridml.store.sql.errors.guarded``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gridml.errors import ConflictError, GridmlError, NotFoundError, StoreError
from gridml.store.best import direction_of, pick_best
from gridml.store.records import STUDY_STATES, TRIAL_STATES, EpochReport, Study, Trial
from gridml.store.sql import convert, epochs_sql
from gridml.store.sql.convert import utcnow
from gridml.store.sql.engine import WriteLock, make_engine, migrate, writer
from gridml.store.sql.errors import guarded
from gridml.store.sql.models import EpochRow, OutputRow, StudyRow, TokenRow, TrialRow
from gridml.store.sql.tokens import TokensMixin, new_token

# closed: its external optimizer is done, no more trials are enqueued (the campaign drains)
UPDATABLE = {"state", "objective", "error", "external_id", "attempts", "started", "finished",
             "outputs", "hparams", "epochs_done", "last_heartbeat", "objectives", "violations",
             "test_metrics"}
MAX_ID = 2**31 - 1  # ids are 32-bit INTEGER columns (PostgreSQL)
_STUDIES_HINT = "run `gridml status` to list the studies this store knows"


@guarded
class SqlStore(TokensMixin):
    """The metrics store. Build it with :func:`open_sql_store` (which applies migrations)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._writer = writer(self.engine)
        self._lock = WriteLock(self.engine)
        self._known_trials: set[int] = set()  # ids known to exist (for the epoch hot path)

    # -- sessions ------------------------------------------------------------------------------
    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as session:
            yield session

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with self._lock, Session(self._writer, expire_on_commit=False) as session, \
                session.begin():
            yield session

    def close(self) -> None:
        self.engine.dispose()

    def migrate(self) -> None:
        """Bring the schema to the newest revision (once per process group is enough)."""
        migrate(self.engine)

    # -- studies -------------------------------------------------------------------------------
    def create_study(self, name: str, spec: dict[str, Any], spec_hash: str) -> Study:
        token = new_token("study")
        try:
            with self._write() as s:
                row = StudyRow(name=name, spec=spec, spec_hash=spec_hash, state="running",
                               created=utcnow())
                s.add(row)
                s.flush()
                s.add(TokenRow(token_hash=convert.sha256(token), study_id=row.id,
                               created=utcnow()))
        except IntegrityError as exc:
            raise ConflictError(f"study '{name}' already exists",
                                hint=f"choose another `name:` in the spec, or continue it "
                                     f"with `gridml resume {name}`") from exc
        return convert.to_study(row, token=token)

    def get_study(self, ref: str | int) -> Study:
        with self._read() as s:
            row = self._study_row(s, ref)
            return convert.to_study(row)

    def _study_row(self, s: Session, ref: str | int) -> StudyRow:
        row = None
        if isinstance(ref, str):
            row = s.scalar(select(StudyRow).where(StudyRow.name == ref))
        if row is None and (isinstance(ref, int) or str(ref).isdigit()):
            ident = int(ref)
            row = s.get(StudyRow, ident) if 0 < ident <= MAX_ID else None
        if row is None:
            raise NotFoundError(f"study '{ref}' not found", hint=_STUDIES_HINT)
        return row

    def list_studies(self) -> list[Study]:
        with self._read() as s:
            return [convert.to_study(r) for r in s.scalars(select(StudyRow).order_by(StudyRow.id))]

    def set_study_state(self, study_id: int, state: str) -> None:
        if state not in STUDY_STATES:
            raise StoreError(f"unknown study state '{state}'", hint=f"use one of {STUDY_STATES}")
        with self._write() as s:
            self._study_row(s, study_id).state = state

    def update_study_spec(self, study_id: int, spec: dict[str, Any], spec_hash: str) -> Study:
        """Replace the stored spec of the same campaign (``spec_hash`` equal to the study's):
        what the hash leaves out may change (search.max_trials, parallel, the backend)."""
        with self._write() as s:
            row = self._study_row(s, study_id)
            if row.spec_hash != spec_hash:
                raise ConflictError(f"study '{row.name}' was made from another spec (hash "
                                    f"{row.spec_hash}, not {spec_hash})",
                                    hint="give this campaign a new name")
            row.spec = dict(spec)  # a new object: the JSON column sees the change
            s.flush()
            return convert.to_study(row)

    # -- trials --------------------------------------------------------------------------------
    def create_trial(self, study_id: int, hparams: dict[str, Any], *, source: str = "searcher",
                     state: str = "queued") -> Trial:
        _check_state(state)
        token = new_token("trial")
        for _ in range(5):  # PostgreSQL: two writers may pick the same number; retry
            try:
                with self._write() as s:
                    row = self._insert_trial(s, study_id, hparams, source, state)
                    s.add(TokenRow(token_hash=convert.sha256(token), study_id=study_id,
                                   trial_id=row.id, created=utcnow()))
                return convert.to_trial(row, token=token)
            except IntegrityError:
                continue
        raise StoreError(f"could not number a new trial of study {study_id}",
                         hint="too many concurrent writers; retry")

    def _insert_trial(self, s: Session, study_id: int, hparams: dict[str, Any], source: str,
                      state: str) -> TrialRow:
        locked = s.scalar(select(StudyRow.id).where(StudyRow.id == study_id).with_for_update())
        if locked is None:  # (FOR UPDATE: PostgreSQL numbers one trial of a study at a time)
            self._study_row(s, study_id)
        number = s.scalar(select(func.coalesce(func.max(TrialRow.number) + 1, 0))
                          .where(TrialRow.study_id == study_id))
        row = TrialRow(study_id=study_id, number=number, hparams=hparams, state=state,
                       epochs_done=0, source=source, attempts=0, created=utcnow())
        s.add(row)
        s.flush()
        return row

    def get_trial(self, trial_id: int) -> Trial:
        with self._read() as s:
            row = self._trial_row(s, trial_id)
            return convert.to_trial(row, self._outputs(s, [row.id]).get(row.id, []))

    def _trial_row(self, s: Session, trial_id: int) -> TrialRow:
        row = s.get(TrialRow, trial_id) if 0 < trial_id <= MAX_ID else None
        if row is None:
            raise NotFoundError(f"trial {trial_id} not found",
                                hint="`gridml status STUDY` lists the trials of a study")
        return row

    def get_trial_by_number(self, study_id: int, number: int) -> Trial:
        with self._read() as s:
            row = s.scalar(select(TrialRow).where(TrialRow.study_id == study_id,
                                                  TrialRow.number == number))
            if row is None:
                raise NotFoundError(f"trial number {number} of study {study_id} not found",
                                    hint="`gridml status STUDY` lists the trials of a study")
            return convert.to_trial(row, self._outputs(s, [row.id]).get(row.id, []))

    def list_trials(self, study_id: int, states: tuple[str, ...] | None = None, *,
                    limit: int | None = None, offset: int = 0) -> list[Trial]:
        # plain rows, not ORM objects: the controller reads every trial each cycle, and the ORM's
        # identity map costs more than the query (1,000 trials: about half of the read)
        t = TrialRow.__table__
        with self._read() as s:
            query = select(t).where(t.c.study_id == study_id)
            if states:
                query = query.where(t.c.state.in_(states))
            query = query.order_by(t.c.number).offset(offset).limit(limit)
            rows = s.execute(query).all()
            outputs = self._outputs(s, [r.id for r in rows])
            return [convert.to_trial(r, outputs.get(r.id, [])) for r in rows]  # type: ignore[arg-type]

    def best_trial(self, study: Study) -> Trial | None:
        """The best completed trial (``gridml.store.best``), from a query of three columns."""
        with self._read() as s:
            rows = s.execute(select(TrialRow.objective, TrialRow.number, TrialRow.id,
                                    TrialRow.violations)
                             .where(TrialRow.study_id == study.id,
                                    TrialRow.state == "completed")).all()
        best = pick_best(((o, n, i) for o, n, i, v in rows
                          if all(x is not None and x <= 0 for x in v or [])),  # best.feasible
                         direction_of(study))
        return None if best is None else self.get_trial(best)

    def count_trials(self, study_id: int | None = None) -> dict[str, int]:
        """Trials by state (of one study, or of all)."""
        with self._read() as s:
            query = select(TrialRow.state, func.count()).group_by(TrialRow.state)
            if study_id is not None:
                query = query.where(TrialRow.study_id == study_id)
            return {state: n for state, n in s.execute(query)}

    def _outputs(self, s: Session, trial_ids: list[int]) -> dict[int, list[OutputRow]]:
        found: dict[int, list[OutputRow]] = {}
        if trial_ids:
            query = select(OutputRow).where(OutputRow.trial_id.in_(trial_ids)) \
                .order_by(OutputRow.id)
            for row in s.scalars(query):
                found.setdefault(row.trial_id, []).append(row)
        return found

    def update_trial(self, trial_id: int, **fields: Any) -> Trial:
        """Set fields of a trial. Setting state 'submitted' (a new attempt) also clears
        last_heartbeat, so a retried trial is not judged by its previous attempt's silence."""
        unknown = set(fields) - UPDATABLE
        if unknown:
            raise StoreError(f"update_trial: unknown field(s) {sorted(unknown)}",
                             hint=f"updatable: {sorted(UPDATABLE)}")
        if "state" in fields:
            _check_state(fields["state"])
            if fields["state"] == "submitted":  # a new attempt: its own heartbeat clock
                fields.setdefault("last_heartbeat", None)
        outputs = fields.pop("outputs", None)
        if fields.get("test_metrics") is not None:  # strict JSON (PostgreSQL refuses NaN)
            fields["test_metrics"] = convert.encode_body(dict(fields["test_metrics"]))
        with self._write() as s:
            row = self._trial_row(s, trial_id)
            for key, value in fields.items():
                setattr(row, key, value)
            if outputs is not None:
                s.execute(delete(OutputRow).where(OutputRow.trial_id == trial_id))
                s.add_all(convert.output_row(trial_id, o) for o in outputs)
        return self.get_trial(trial_id)

    def heartbeat(self, trial_id: int) -> None:
        """Sign of life; a submitted trial that beats is running."""
        now = utcnow()
        with self._write() as s:
            row = self._trial_row(s, trial_id)
            row.last_heartbeat = now
            _mark_running(row, now)

    # -- epochs --------------------------------------------------------------------------------
    def record_epoch(self, trial_id: int, report: EpochReport) -> bool:
        """Store one epoch; idempotent on (trial, epoch). Same body: False; other body: 409."""
        (result,) = self.record_epochs([(trial_id, report)])
        if isinstance(result, BaseException):
            raise result
        return result

    def record_epochs(self, items: list[tuple[int, EpochReport]]) -> list[bool | GridmlError]:
        """Many ``record_epoch`` calls in one transaction (the server's group commit).

        Returns, per item, True (stored), False (same body stored before) or the error
        (NotFoundError, ConflictError) that ``record_epoch`` would raise for it."""
        prepared = []
        for trial_id, report in items:
            body = convert.canonical_epoch(report)
            prepared.append((trial_id, report.epoch, body, convert.body_hash(body)))
        try:
            with self._lock, self._writer.begin() as conn:
                return epochs_sql.record_many(conn, prepared, utcnow(), self._known_trials)
        except IntegrityError:  # PostgreSQL: another worker stored one of these first; redo
            with self._lock, self._writer.begin() as conn:
                return epochs_sql.record_many(conn, prepared, utcnow(), self._known_trials)

    def list_epochs(self, trial_id: int) -> list[EpochReport]:
        with self._read() as s:
            self._trial_row(s, trial_id)
            bodies = s.scalars(select(EpochRow.body).where(EpochRow.trial_id == trial_id)
                               .order_by(EpochRow.epoch))
            return [convert.decode_body(b) for b in bodies]

    def study_epochs(self, study_id: int, *, limit: int | None = None, offset: int = 0,
                     as_json: bool = False) -> dict[int, list[Any]]:
        """The epochs of a study's trials, by trial id (for the dashboard and early stopping);
        ``limit``/``offset``: only those of that page of trials (in number order), as
        ``list_trials(..., limit=, offset=)`` returns it. ``as_json``: the reports as the API
        sends them (``EpochReport.to_json()`` with non-finite numbers as None), not decoded."""
        with self._read() as s:
            query = select(EpochRow.trial_id, EpochRow.body).join(TrialRow) \
                .where(TrialRow.study_id == study_id).order_by(EpochRow.trial_id, EpochRow.epoch)
            if limit is not None or offset:
                page = select(TrialRow.id).where(TrialRow.study_id == study_id) \
                    .order_by(TrialRow.number).offset(offset).limit(limit)
                query = query.where(EpochRow.trial_id.in_(page.scalar_subquery()))
            found: dict[int, list[Any]] = {}
            decode = convert.json_body if as_json else convert.decode_body
            for trial_id, body in s.execute(query):
                found.setdefault(trial_id, []).append(decode(body))
            return found


def _check_state(state: str) -> None:
    if state not in TRIAL_STATES:
        raise StoreError(f"unknown trial state '{state}'", hint=f"use one of {TRIAL_STATES}")


def _mark_running(row: TrialRow, now: Any) -> None:
    if row.state in ("queued", "submitted"):
        row.state = "running"
    if row.started is None:
        row.started = now


def open_sql_store(url: str) -> SqlStore:
    """The SQL store at ``url``, migrated to the newest schema. SQLite URLs get WAL + a busy
    timeout (``?timeout=S``, default 30 s); ``postgresql://`` uses psycopg 3."""
    store = SqlStore(url)
    try:
        store.migrate()
    except BaseException:
        store.close()
        raise
    return store


__all__ = ["SqlStore", "open_sql_store"]
