"""The Slurm executor's journals.

Per trial, ``<workdir>/slurm.json``: for every attempt the job serving it (``job_id``), written
the moment ``sbatch`` answers; ``submitting`` (a time) is written just before ``sbatch`` runs, so a
controller killed between the two finds the job by its name and attempt comment instead of
submitting a second one; ``killed`` marks a job cancelled on request, never followed again;
``state`` is the last Slurm state seen (for ``gridml status``).

In the executor's journal folder, ``<job id>.json``: the trial folder and attempt a handle
belongs to, so a restarted controller polls its jobs without asking Slurm for anything else.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

JOURNAL = "slurm.json"


def read(workdir: Path) -> dict[str, Any]:
    try:
        doc = json.loads((workdir / JOURNAL).read_text())
    except (OSError, ValueError):
        return {"attempts": {}}
    if not isinstance(doc, dict) or not isinstance(doc.get("attempts"), dict):
        return {"attempts": {}}
    return doc


def write(workdir: Path, doc: dict[str, Any]) -> None:
    """Atomically (write, then rename)."""
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = workdir / f".{JOURNAL}.tmp"
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True))
    tmp.replace(workdir / JOURNAL)


def attempt(workdir: Path, number: int) -> dict[str, Any]:
    return dict(read(workdir)["attempts"].get(str(number)) or {})


def update_attempt(workdir: Path, number: int, **fields: Any) -> dict[str, Any]:
    doc = read(workdir)
    entry = dict(doc["attempts"].get(str(number)) or {})
    entry.update(fields)
    doc["attempts"][str(number)] = entry
    write(workdir, doc)
    return entry


def find_job(workdir: Path, job_id: str) -> tuple[int, dict[str, Any]] | None:
    for number, entry in read(workdir)["attempts"].items():
        if str(entry.get("job_id")) == job_id:
            return int(number), entry
    return None


def write_handle(folder: Path | None, job_id: str, workdir: Path, number: int) -> None:
    if folder is None:
        return
    path = folder / f"{job_id}.json"
    if path.exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{job_id}.json.tmp"
    tmp.write_text(json.dumps({"workdir": str(workdir), "attempt": number}))
    tmp.replace(path)


def read_handle(folder: Path | None, job_id: str) -> tuple[Path, int] | None:
    if folder is None:
        return None
    try:
        doc = json.loads((folder / f"{job_id}.json").read_text())
        return Path(doc["workdir"]), int(doc["attempt"])
    except (OSError, ValueError, KeyError):
        return None


def last_state(workdir: Path) -> dict[str, Any] | None:
    """The newest attempt's job id and the Slurm state last seen (``gridml status``)."""
    attempts = read(workdir)["attempts"]
    if not attempts:
        return None
    number = max(attempts, key=int)
    entry = attempts[number]
    return {"attempt": int(number), "job_id": entry.get("job_id"), "state": entry.get("state"),
            "nodes": entry.get("nodes"), "killed": bool(entry.get("killed"))}


def now() -> float:
    return time.time()
