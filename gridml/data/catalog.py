"""The local store's catalogue: DIDs, their contents and metadata in one SQLite file.

Safe with several processes at once (controller, payload stage-out, ``gridml data``): WAL journal,
a busy timeout, and every write in a ``BEGIN IMMEDIATE`` transaction that takes the write lock
before reading what it checks, so two writers never both see "not there yet".
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gridml.data.base import DID
from gridml.errors import DataError

SCHEMA = """
CREATE TABLE IF NOT EXISTS dids (
    scope TEXT NOT NULL, name TEXT NOT NULL,
    type TEXT NOT NULL CHECK (type IN ('file', 'dataset', 'container')),
    bytes INTEGER, adler32 TEXT, path TEXT,
    meta TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL,
    PRIMARY KEY (scope, name));
CREATE TABLE IF NOT EXISTS contents (
    pscope TEXT NOT NULL, pname TEXT NOT NULL, cscope TEXT NOT NULL, cname TEXT NOT NULL,
    PRIMARY KEY (pscope, pname, cscope, cname));
CREATE INDEX IF NOT EXISTS contents_child ON contents (cscope, cname);
"""
BUSY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Row:
    """One catalogue entry."""

    did: DID
    type: str  # file | dataset | container
    bytes: int | None
    adler32: str | None
    path: str | None  # relative to the store root (files only)
    meta: dict[str, Any]


def _row(r: sqlite3.Row) -> Row:
    return Row(DID(r["scope"], r["name"]), r["type"], r["bytes"], r["adler32"], r["path"],
               json.loads(r["meta"]))


class Catalog:
    """Thin, typed access to catalog.sqlite. Opens a short-lived connection per operation."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        con = self._connect()  # closed explicitly: `with` on a sqlite3 connection only commits,
        try:                   # and one left open in a process that forks breaks its children
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(SCHEMA)
        finally:
            con.close()

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        con.row_factory = sqlite3.Row
        con.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        return con

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding the database's write lock from its first statement."""
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            yield con
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        finally:
            con.close()

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        con = self._connect()
        try:
            yield con
        finally:
            con.close()

    # -- queries (take a connection so callers can compose them inside one transaction) --
    @staticmethod
    def get(con: sqlite3.Connection, did: DID) -> Row | None:
        r = con.execute("SELECT * FROM dids WHERE scope=? AND name=?",
                        (did.scope, did.name)).fetchone()
        return _row(r) if r else None

    @staticmethod
    def children(con: sqlite3.Connection, did: DID) -> list[Row]:
        rows = con.execute(
            "SELECT d.* FROM contents c JOIN dids d ON d.scope=c.cscope AND d.name=c.cname "
            "WHERE c.pscope=? AND c.pname=? ORDER BY d.scope, d.name", (did.scope, did.name))
        return [_row(r) for r in rows]

    @staticmethod
    def find(con: sqlite3.Connection, scope: str, pattern: str) -> list[Row]:
        """DIDs of ``scope`` whose name matches a shell-style ``pattern`` (``*`` and ``?``)."""
        rows = con.execute("SELECT * FROM dids WHERE scope=? AND name GLOB ? ORDER BY name",
                           (scope, pattern))
        return [_row(r) for r in rows]

    @staticmethod
    def add(con: sqlite3.Connection, did: DID, type_: str, *, bytes_: int | None = None,
            adler32: str | None = None, path: str | None = None,
            meta: dict[str, Any] | None = None) -> None:
        con.execute("INSERT INTO dids VALUES (?,?,?,?,?,?,?,?)",
                    (did.scope, did.name, type_, bytes_, adler32, path,
                     dumps_meta(meta or {}, did), time.time()))

    @staticmethod
    def attach(con: sqlite3.Connection, parent: DID, child: DID) -> None:
        con.execute("INSERT OR IGNORE INTO contents VALUES (?,?,?,?)",
                    (parent.scope, parent.name, child.scope, child.name))

    @staticmethod
    def set_meta(con: sqlite3.Connection, did: DID, meta: dict[str, Any]) -> None:
        con.execute("UPDATE dids SET meta=? WHERE scope=? AND name=?",
                    (dumps_meta(meta, did), did.scope, did.name))


def dumps_meta(meta: dict[str, Any], did: DID) -> str:
    """Metadata as JSON; refuses values JSON cannot hold, naming the DID."""
    try:
        return json.dumps(meta, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise DataError(f"metadata for {did} is not JSON-serialisable: {exc}",
                        hint="use str, int, float (finite), bool, None, lists and dicts") from exc
