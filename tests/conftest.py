"""Shared fixtures: an isolated $GRIDML_HOME per test, the repository root, the spec folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def gridml_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "gridml-home"
    monkeypatch.setenv("GRIDML_HOME", str(home))
    monkeypatch.delenv("GRIDML_DB_URL", raising=False)
    monkeypatch.delenv("GRIDML_DATA_BACKEND", raising=False)
    return home


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def _no_user_home(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test may touch the user's ~/.gridml: default GRIDML_HOME to a temporary folder."""
    if "GRIDML_HOME" not in os.environ or os.environ["GRIDML_HOME"].startswith(str(Path.home())):
        monkeypatch.setenv("GRIDML_HOME", str(tmp_path_factory.mktemp("home")))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str | None]:
    """A PostgreSQL server URL ($GRIDML_TEST_PG_URL, which scripts/test.sh always sets, or a
    throwaway one started here), or None where there is none."""
    from tests import pg as testing

    yield testing.postgres_url()
    testing.stop_started_postgres()


@contextmanager
def database(kind: str, pg_url: str | None, sqlite_path: Path) -> Iterator[str]:
    """A fresh database URL of ``kind`` (sqlite | postgresql), dropped afterwards.

    Without PostgreSQL the PostgreSQL case is skipped when a developer runs pytest by hand, but
    fails in CI: there the test command starts one, so its absence is a broken setup."""
    from tests import pg as testing

    if kind == "sqlite":
        yield f"sqlite:///{sqlite_path}"
        return
    if pg_url is None:
        if os.environ.get("CI"):
            pytest.fail("no PostgreSQL in CI: scripts/test.sh should have started one")
        pytest.skip("no PostgreSQL here: run scripts/test.sh (starts one) or set GRIDML_TEST_PG_URL")
    url = testing.create_database(pg_url)
    try:
        yield url
    finally:
        testing.drop_database(url)
