"""Where gridml keeps its state. Built on demand (``settings()``), never at import."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    home: Path  # $GRIDML_HOME, default ~/.gridml

    @property
    def store_dir(self) -> Path:
        """The local data store (DIDs, datasets, catalogue)."""
        return self.home / "store"

    @property
    def db_url(self) -> str:
        """The embedded metrics store (SQLite), unless $GRIDML_DB_URL names another."""
        return os.environ.get("GRIDML_DB_URL") or f"sqlite:///{self.home / 'gridml.db'}"

    @property
    def runs_dir(self) -> Path:
        """Working directories of local trials: runs/<study>/trial-<n>/."""
        return self.home / "runs"

    @property
    def data_backend(self) -> str:
        return os.environ.get("GRIDML_DATA_BACKEND", "local")


@cache
def _cached(home: str) -> Settings:
    path = Path(home).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return Settings(home=path)


def settings() -> Settings:
    """The settings for the current $GRIDML_HOME (re-read when the variable changes, e.g. in tests)."""
    return _cached(os.environ.get("GRIDML_HOME", "~/.gridml"))
