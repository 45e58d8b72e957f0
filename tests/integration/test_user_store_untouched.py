"""The suite never reads or writes a user's store, whatever GRIDML_HOME and friends say."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gridml.store import open_store
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_tests_leave_a_users_store_outside_home_alone(tmp_path: Path) -> None:
    """A user on a cluster keeps GRIDML_HOME outside ~ (small $HOME): the tests that list studies
    or write a spec must see only their own store, and the user's must be as it was."""
    user = tmp_path / "scratch" / "gridml"
    store = open_store(f"sqlite:///{user / 'gridml.db'}")
    store.create_study("users-own-study", {"search": {}}, "hash")
    getattr(store, "close", lambda: None)()
    before = _digest(user)
    env = {**os.environ, "GRIDML_HOME": str(user), "GRIDML_DB_URL": f"sqlite:///{user / 'gridml.db'}",
           "GRIDML_SERVER": "http://127.0.0.1:9"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
         "tests/integration/test_cli.py::test_status_lists_studies_as_json",
         "tests/integration/test_cli.py::"
         "test_init_writes_a_spec_and_a_starter_model_that_validate_once_the_data_exists"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "2 passed" in out.stdout
    assert _digest(user) == before
