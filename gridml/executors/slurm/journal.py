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

import time
from pathlib import Path
from typing import Any

from gridml.executors.journal import HandleIndex, TrialJournal
from gridml.layout import SLURM_JOURNAL

JOURNAL = SLURM_JOURNAL
_TRIAL = TrialJournal(JOURNAL)


def read(workdir: Path) -> dict[str, Any]:
    doc = _TRIAL.read(workdir)
    if doc is None or not isinstance(doc.get("attempts"), dict):
        return {"attempts": {}}
    return doc


def write(workdir: Path, doc: dict[str, Any]) -> None:
    """Atomically (write, then rename)."""
    _TRIAL.write(workdir, doc)


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
    HandleIndex(folder).write_once(job_id, {"workdir": str(workdir), "attempt": number})


def read_handle(folder: Path | None, job_id: str) -> tuple[Path, int] | None:
    doc = HandleIndex(folder).read(job_id)
    try:
        return (Path(doc["workdir"]), int(doc["attempt"])) if doc else None
    except (KeyError, TypeError, ValueError):
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
