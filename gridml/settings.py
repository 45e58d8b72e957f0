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

    @property
    def admin_token_file(self) -> Path:
        """The admin token of `gridml serve` (creating studies needs it), mode 0600;
        $GRIDML_ADMIN_TOKEN_FILE names another file."""
        named = os.environ.get("GRIDML_ADMIN_TOKEN_FILE")
        return Path(named).expanduser() if named else self.home / "admin-token"


def read_admin_token(path: Path) -> str | None:
    """The token kept in ``path`` (its first line), or None where there is none."""
    try:
        token = path.read_text().strip().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return token[0].strip() if token and token[0].strip() else None


def write_admin_token(path: Path, token: str) -> None:
    """Keep ``token`` in ``path``, readable by this user only (0600, also if it existed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, f"{token}\n".encode())
    finally:
        os.close(fd)


@cache
def _cached(home: str) -> Settings:
    path = Path(home).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return Settings(home=path)


def settings() -> Settings:
    """The settings for the current $GRIDML_HOME (re-read when the variable changes, e.g. in tests)."""
    return _cached(os.environ.get("GRIDML_HOME", "~/.gridml"))
