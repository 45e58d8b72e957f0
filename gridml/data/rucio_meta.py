"""gridml's own record of DID metadata that a Rucio server's metadata plugins do not take.

Rucio stores arbitrary keys through its JSON metadata plugin, which needs PostgreSQL, MySQL or
Oracle behind the server; on a server with SQLite (or with that plugin disabled) setting a key such
as ``trial`` is refused with "No plugin manages metadata keys". gridml then keeps those keys here,
in $GRIDML_HOME/rucio-metadata.sqlite, keyed by (server, scope, name), and merges them back in
``get_metadata``. Keys the server does take stay on the server only.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from gridml.data.base import DID

_SCHEMA = """CREATE TABLE IF NOT EXISTS meta (
    host TEXT NOT NULL, scope TEXT NOT NULL, name TEXT NOT NULL, meta TEXT NOT NULL,
    PRIMARY KEY (host, scope, name))"""


class SideMetadata:
    """Per-DID JSON metadata in a small SQLite file (WAL, busy timeout: several processes)."""

    def __init__(self, path: Path, host: str) -> None:
        self.path, self.host = path, host
        path.parent.mkdir(parents=True, exist_ok=True)
        con = self._connect()  # closed explicitly: `with` on a sqlite3 connection only commits
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute(_SCHEMA)
        finally:
            con.close()

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        con.execute("PRAGMA busy_timeout=60000")
        return con

    def get(self, did: DID) -> dict[str, Any]:
        con = self._connect()
        try:
            row = con.execute("SELECT meta FROM meta WHERE host=? AND scope=? AND name=?",
                              (self.host, did.scope, did.name)).fetchone()
        finally:
            con.close()
        return json.loads(row[0]) if row else {}

    def merge(self, did: DID, meta: dict[str, Any]) -> None:
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            old = con.execute("SELECT meta FROM meta WHERE host=? AND scope=? AND name=?",
                              (self.host, did.scope, did.name)).fetchone()
            new = {**(json.loads(old[0]) if old else {}), **meta}
            con.execute("INSERT OR REPLACE INTO meta VALUES (?,?,?,?)",
                        (self.host, did.scope, did.name, json.dumps(new, sort_keys=True)))
            con.execute("COMMIT")
        finally:
            con.close()
