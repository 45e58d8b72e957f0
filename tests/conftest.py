"""Shared fixtures: an isolated $GRIDML_HOME per test, the repository root, the spec folder, an
os.environ restored after every test; the suite's order and CI rules (tests/suite_rules.py)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.suite_rules import (pytest_collection_modifyitems, pytest_make_collect_report,  # noqa: F401
                               pytest_runtest_makereport)
from tests import xdist_modules

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


@pytest.fixture
def needs_torch() -> None:
    """For a test that runs torch (in-process or in a process it starts): skipped where torch is
    not installed (GRIDML_NO_TORCH=1 setups), a failure in CI (tests/suite_rules.py). A module
    whose every test runs torch skips itself with ``pytest.importorskip("torch")`` instead."""
    pytest.importorskip("torch")


# What a user's shell may hold that would point a test at the user's own store or server.
USER_VARIABLES = ("GRIDML_HOME", "GRIDML_DB_URL", "GRIDML_DATA_BACKEND", "GRIDML_SERVER",
                  "GRIDML_TOKEN", "GRIDML_CREATE_TOKEN", "GRIDML_SERVE_DB", "GRIDML_TRIAL_DIR",
                  "GRIDML_ADMIN_TOKEN", "GRIDML_ADMIN_TOKEN_FILE", "GRIDML_PAYLOAD_PYTHON")


def pytest_configure(config: pytest.Config) -> None:
    """No test may read or write the user's store, whatever the environment holds: every
    variable naming one is dropped for the whole run (subprocesses included), and GRIDML_HOME
    points into a folder of the run's own. Tests that need a variable set it themselves."""
    for name in USER_VARIABLES:
        os.environ.pop(name, None)
    os.environ["GRIDML_HOME"] = tempfile.mkdtemp(prefix="gridml-test-home-")
    # `gridml submit`'s build check (gridml/executors/probe.py) imports the framework once more
    # per remote campaign: tests/integration/test_build_check.py tests it (setting it to 1); the
    # many other submits of the suite skip it
    os.environ.setdefault("GRIDML_BUILD_CHECK", "0")


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile`` (scripts/test.sh): a module is one unit, never split between the
    workers, the longest of a folder first (tests/xdist_modules.py); other modes: xdist's own."""
    if config.getvalue("dist") == "loadfile":
        return xdist_modules.make_scheduler(config, log)
    return None


# Set for the whole session by the session fixture that starts PostgreSQL (tests/pg.py), which a
# test may be the first to ask for: left as it is.
SESSION_VARIABLES = ("GRIDML_TEST_PG_URL",)


@pytest.fixture(autouse=True)
def _environ_restored() -> Iterator[None]:
    """No test leaks an environment variable into the tests after it: os.environ is put back as
    it was before the test, whatever the test (or the code it ran: thread caps, a client's
    settings) set or removed without a monkeypatch."""
    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        kept = {k: os.environ[k] for k in SESSION_VARIABLES if k in os.environ}
        os.environ.clear()
        os.environ.update(before)
        os.environ.update(kept)


@pytest.fixture(autouse=True)
def _no_user_home(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each test its own GRIDML_HOME (one test's studies never show up in another's listing),
    unless a module-scoped fixture already set one inside this run's temporary folder."""
    current = os.environ.get("GRIDML_HOME", "")
    if not current.startswith(str(tmp_path_factory.getbasetemp())):
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
