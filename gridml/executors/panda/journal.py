"""The per-trial journal ``<workdir>/panda.json``: which PanDA task serves the trial, for which
attempt, and a retry that JEDI has not acted on yet.

Written as soon as the server answers, so a controller restarted after a crash finds its tasks
without asking the server. A ``retryTask`` is only registered by the server ("will be executed in
a few minutes"): until JEDI acts the task still shows its old final status, which must not end
the new attempt, so the retry is noted here with the status it left from.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gridml.executors.journal import HandleIndex, TrialJournal
from gridml.layout import PANDA_JOURNAL

JOURNAL = PANDA_JOURNAL
RETRY_GRACE_S = 1800.0  # after this long a retry JEDI never acted on counts as refused
_TRIAL = TrialJournal(JOURNAL)


def read(workdir: Path) -> dict[str, Any] | None:
    doc = _TRIAL.read(workdir)
    return doc if doc is not None and "jediTaskID" in doc else None


def write(workdir: Path, doc: dict[str, Any]) -> None:
    """Atomically (write, then rename)."""
    _TRIAL.write(workdir, doc)


def record_task(workdir: Path, task_name: str, task_id: int, attempt: int, server: str) -> None:
    write(workdir, {"taskName": task_name, "jediTaskID": task_id, "attempt": attempt,
                    "server": server, "submitted_at": time.time()})


def record_kill(workdir: Path, task_id: int) -> None:
    """The task was killed on request (its trial goes back to the queue): never follow it again."""
    doc = read(workdir)
    if doc and int(doc["jediTaskID"]) == task_id:
        write(workdir, dict(doc, killed=time.time()))


def write_task(folder: Path, task_id: int, params: dict[str, Any], output_dir: Path) -> None:
    """What polling a task needs after a restart: its parameters and the trial's output folder
    (readable by the user only: the parameters hold the trial token)."""
    HandleIndex(folder, private=True).write_once(task_id, {"params": params,
                                                           "output_dir": str(output_dir)})


def read_task(folder: Path, task_id: int) -> tuple[dict[str, Any], Path] | None:
    doc = HandleIndex(folder).read(task_id)
    try:
        return (dict(doc["params"]), Path(doc["output_dir"])) if doc else None
    except (KeyError, TypeError, ValueError):
        return None


def record_retry(workdir: Path, task_id: int, from_status: str, attempt: int | None = None) -> None:
    doc = read(workdir) or {"jediTaskID": task_id}
    if attempt is not None:
        doc["attempt"] = attempt
    doc["retry_pending"] = {"from": from_status, "since": time.time()}
    write(workdir, doc)


def retry_pending(workdir: Path, task_id: int, status: str) -> float | None:
    """Seconds since a retry of ``task_id`` was registered while the task still shows the status
    it was retried from; None when there is none (a status that moved on clears the note)."""
    doc = read(workdir)
    pending = (doc or {}).get("retry_pending")
    if not doc or not pending or int(doc["jediTaskID"]) != task_id:
        return None
    age = time.time() - float(pending["since"])
    if status == pending["from"] and age < RETRY_GRACE_S:
        return age
    doc.pop("retry_pending")
    write(workdir, doc)
    return None
