"""Test helpers: a PostgreSQL server for the store/API/server suites, and throwaway databases on it.

``database_urls()`` is what store/API/reliability tests parametrise over: SQLite always, and
PostgreSQL when a server is available: ``$GRIDML_TEST_PG_URL``, or else a throwaway one that
``scripts/postgres.sh`` starts (and :func:`stop_started_postgres` stops again).
``$GRIDML_TEST_PG=0`` leaves PostgreSQL out.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "postgres.sh"
_started: list[str] = []


def postgres_url() -> str | None:
    """A PostgreSQL server URL for tests, starting the throwaway one if needed (None: none)."""
    if os.environ.get("GRIDML_TEST_PG") == "0":
        return None
    if os.environ.get("GRIDML_TEST_PG_URL"):
        return os.environ["GRIDML_TEST_PG_URL"]
    if not SCRIPT.exists():
        return None
    running = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True,
                             check=False).returncode == 0
    done = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True,
                          timeout=180, check=False)
    if done.returncode != 0:
        return None
    url = done.stdout.strip().splitlines()[-1]
    os.environ["GRIDML_TEST_PG_URL"] = url
    if not running:
        _started.append(url)
    return url


def stop_started_postgres() -> None:
    """Stop the throwaway server if this process started it."""
    if _started:
        subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, timeout=60,
                       check=False)
        _started.clear()
        os.environ.pop("GRIDML_TEST_PG_URL", None)


def _admin(base: str):  # type: ignore[no-untyped-def]
    import sqlalchemy as sa

    from gridml.store.sql.engine import normalise_url

    return sa.create_engine(normalise_url(base), isolation_level="AUTOCOMMIT")


def create_database(base: str) -> str:
    """A new empty database on the server of ``base``; returns its URL."""
    import sqlalchemy as sa

    name = f"gridml_test_{uuid.uuid4().hex[:12]}"
    engine = _admin(base)
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return base.rsplit("/", 1)[0] + "/" + name


def drop_database(url: str) -> None:
    import sqlalchemy as sa

    name = url.rsplit("/", 1)[1]
    engine = _admin(url.rsplit("/", 1)[0] + "/postgres")
    with engine.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()
