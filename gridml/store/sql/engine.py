"""Engines for the metrics store, and Alembic migrations applied on open.

SQLite is made safe for several processes on one file (the controller and a uvicorn server):
WAL journal, a busy timeout, and write transactions that start with ``BEGIN IMMEDIATE`` so two
writers queue on the lock instead of failing when a read transaction tries to upgrade.
PostgreSQL needs none of this (row locks); its URL is normalised to the psycopg 3 driver.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import StaticPool

from gridml.errors import StoreError

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
BUSY_TIMEOUT_MS = 30_000


def normalise_url(url: str) -> str:
    """``postgresql://`` / ``postgres://`` -> psycopg 3 driver; others unchanged."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL (None for an in-memory database)."""
    db = make_url(url).database
    return None if db in (None, "", ":memory:") else Path(db)


def busy_timeout_ms(url: str) -> int:
    """SQLite's busy timeout: ``?timeout=SECONDS`` in the URL, else 30 s."""
    value = make_url(url).query.get("timeout")
    try:
        return int(1000 * float(value)) if isinstance(value, str) else BUSY_TIMEOUT_MS
    except ValueError:
        return BUSY_TIMEOUT_MS


SUPPORTED = ("sqlite", "postgresql")  # the databases the migrations and the store are made for


def check_url(url: str) -> None:
    """A URL gridml can open: ``sqlite:///path`` or ``postgresql://...`` (StoreError naming it
    and the fix, before any driver is imported)."""
    try:
        backend = make_url(url).get_backend_name()
    except Exception:  # sqlalchemy's ArgumentError: not a URL at all
        raise StoreError(f"database URL {url.split('@')[-1]!r}: not a database URL",
                         hint="give sqlite:///path.db or postgresql://user@host/db") from None
    if backend not in SUPPORTED:
        raise StoreError(f"database URL {backend}://...: gridml stores metrics in SQLite or "
                         "PostgreSQL only", hint="give sqlite:///path.db or "
                                                 "postgresql://user@host/db") from None


def make_engine(url: str) -> Engine:
    """An engine for ``url`` with the pragmas / pool settings gridml relies on."""
    check_url(url)
    url = normalise_url(url)
    if not is_sqlite(url):
        if make_url(url).get_driver_name() == "psycopg":
            from gridml.extras import require

            require("psycopg", "server", feature="a PostgreSQL store", error=StoreError)
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    path = sqlite_path(url)
    busy = busy_timeout_ms(url)
    if path is None:
        engine = create_engine(url, poolclass=StaticPool,
                               connect_args={"check_same_thread": False})
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False,
                                                  "timeout": busy / 1000},
                               pool_size=8, max_overflow=16)
    _sqlite_events(engine, busy)
    return engine


def _sqlite_events(engine: Engine, busy_ms: int) -> None:
    """Pragmas on every connection; gridml, not pysqlite, emits BEGIN (IMMEDIATE for writers)."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={busy_ms}")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "")
        conn.exec_driver_sql(f"BEGIN {mode}".strip())


def writer(engine: Engine) -> Engine:
    """The same engine, but its transactions take SQLite's write lock at BEGIN."""
    return engine.execution_options(sqlite_begin="IMMEDIATE") if is_sqlite(str(engine.url)) \
        else engine


class WriteLock:
    """Writers of one SQLite file queue on an flock before ``BEGIN IMMEDIATE``.

    SQLite's own busy handler polls with sleeps growing to 100 ms, which shows up as latency
    spikes when two server workers and the controller write at once; a blocked ``flock`` wakes
    the moment the holder is done. Re-entrant within a thread; a no-op for other databases.
    """

    def __init__(self, engine: Engine) -> None:
        url = str(engine.url)
        path = sqlite_path(url) if is_sqlite(url) else None
        self.path = None if path is None else f"{path}.write.lock"
        self._local = threading.local()

    def __enter__(self) -> None:
        if self.path is None:
            return
        depth = getattr(self._local, "depth", 0)
        if depth == 0:
            self._local.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._local.fd, fcntl.LOCK_EX)
        self._local.depth = depth + 1

    def __exit__(self, *exc: object) -> None:
        if self.path is None:
            return
        self._local.depth -= 1
        if self._local.depth == 0:
            fcntl.flock(self._local.fd, fcntl.LOCK_UN)
            os.close(self._local.fd)


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[Any]:
    """One migrator at a time: a file lock for SQLite, an advisory lock for PostgreSQL."""
    url = str(engine.url)
    if is_sqlite(url):
        path = sqlite_path(url)
        with engine.connect() as conn:
            if path is None:
                yield conn
                return
            with open(f"{path}.migrate.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                yield conn
        return
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(74201)"))
        conn.commit()
        try:
            yield conn
        finally:
            conn.rollback()
            conn.execute(text("SELECT pg_advisory_unlock(74201)"))
            conn.commit()


def head_revision() -> str | None:
    """The newest revision of this gridml's migrations, read from their files (the one no other
    names as its ``down_revision``); None where they cannot be read (Alembic then decides)."""
    import re

    revisions: dict[str, str | None] = {}
    for path in (MIGRATIONS / "versions").glob("*.py"):
        text_ = path.read_text()
        rev = re.search(r'^revision\s*=\s*"([^"]+)"', text_, re.M)
        down = re.search(r'^down_revision\s*=\s*(?:"([^"]+)"|None)', text_, re.M)
        if not rev or not down:
            return None
        revisions[rev.group(1)] = down.group(1)
    heads = set(revisions) - set(revisions.values())
    return heads.pop() if len(heads) == 1 else None


def _at_head(engine: Engine) -> bool:
    """The database already has the newest schema: one query, no Alembic import (which with its
    upgrade check cost ~0.6 s of every `gridml status`)."""
    head = head_revision()
    if head is None:
        return False
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).fetchall()
    except SQLAlchemyError:  # a new database: no table yet
        return False
    return [r[0] for r in rows] == [head]


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision (no-op when already there).
    SQLAlchemy errors propagate (the store translates them); Alembic's own become StoreError."""
    if _at_head(engine):
        return
    from alembic import command  # (lazy: Alembic only when a store is opened, not imported)
    from alembic.config import Config
    from alembic.util import CommandError

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    try:
        with _migration_lock(engine) as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
            conn.commit()
    except CommandError as exc:  # e.g. a database of a newer gridml
        raise StoreError(f"cannot migrate the metrics database {engine.url!r}: "
                         f"{str(exc).splitlines()[0]}",
                         hint="use the gridml version that created this database, or a new "
                              "database") from exc
