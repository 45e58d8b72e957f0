"""The journal files every remote backend keeps (PanDA, phpo, Slurm): small JSON documents,
written atomically (write, then rename), read back as ``None`` when missing or torn.

Two kinds, both here:

- a **trial journal**, ``<workdir>/<name>`` (``panda.json``, ``slurm.json``): what serves the
  trial, rewritten as it changes (:class:`TrialJournal`);
- a **handle index**, ``<executor's journal folder>/<handle>.json``: what polling a handle needs
  after a controller restart, written once (:class:`HandleIndex`).

What the documents hold is the backend's business (:mod:`gridml.executors.panda.journal`,
:mod:`gridml.executors.slurm.journal`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def read_json(path: Path) -> Any:
    """The JSON document at ``path``; None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, doc: Any, *, private: bool = False, indent: int | None = 2) -> None:
    """Atomically (write a hidden sibling, then rename); ``private``: readable by the user only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text(json.dumps(doc, indent=indent, sort_keys=True))
    if private:
        tmp.chmod(0o600)
    tmp.replace(path)


@dataclass(frozen=True)
class TrialJournal:
    """``<workdir>/<name>``: one JSON object per trial folder."""

    name: str

    def path(self, workdir: Path) -> Path:
        return workdir / self.name

    def read(self, workdir: Path) -> dict[str, Any] | None:
        doc = read_json(self.path(workdir))
        return doc if isinstance(doc, dict) else None

    def write(self, workdir: Path, doc: dict[str, Any]) -> None:
        write_json(self.path(workdir), doc)


@dataclass(frozen=True)
class HandleIndex:
    """``<folder>/<key>.json``: written once per handle (a restarted controller reads it back).
    ``private``: the documents hold a secret (a trial token in PanDA task parameters)."""

    folder: Path | None
    private: bool = False

    def write_once(self, key: str | int, doc: dict[str, Any]) -> None:
        if self.folder is None:
            return
        path = self.folder / f"{key}.json"
        if not path.exists():
            write_json(path, doc, private=self.private, indent=None)

    def read(self, key: str | int) -> dict[str, Any] | None:
        if self.folder is None:
            return None
        doc = read_json(self.folder / f"{key}.json")
        return doc if isinstance(doc, dict) else None
