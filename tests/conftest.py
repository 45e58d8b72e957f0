"""Shared fixtures: an isolated $GRIDML_HOME per test, the repository root, the spec folder."""

from __future__ import annotations

import os
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
