"""The PanDA executor: every trial becomes a JEDI task submitted with the real panda-client.

``submit`` renders the task parameters (:mod:`gridml.executors.panda.render`, pure) and sends them
with ``Client.insertTaskParams``; ``poll`` follows ``getTaskStatus`` and, when the task is over,
fetches the trial's metrics.jsonl and result.json from its output datasets (pilot stage-out) into
``<workdir>/outputs`` and reports the stored files, so the controller uploads nothing itself;
``kill`` is ``killTask``. Every panda-client call and its error translation lives in
:mod:`gridml.executors.panda.client`; the per-trial journal in :mod:`.journal`.

Idempotence: the task name is unique per trial (``user.<nick>.<study>.trial-NNNN/``), and the task
id is journaled in ``<workdir>/panda.json`` as soon as the server answers; the task's parameters
and the trial's output folder in the executor's journal folder, so a restarted controller polls
its tasks without asking the server for anything but their status. A task killed on request
(Ctrl-C) is marked there: a resumed campaign never follows it again, it submits a new one. A resubmission of the
same attempt (controller crash) finds the task again, through the journal or the server's
"duplicate task" answer, and never creates a second one. A later attempt of a failed or finished
task is ``retryTask``; one whose task cannot be retried (broken, aborted, done, exhausted) gets a
new task ``...trial-NNNN.aK/``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gridml.data.base import DataManager
from gridml.errors import DuplicateTaskError, ExecutorError, GridmlError, NotFoundError
from gridml.executors.panda import client as pc
from gridml.executors.panda import journal
from gridml.executors.base import TaskRequest, TaskStatus
from gridml.executors.failures import deterministic
from gridml.executors.panda.outputs import collect_outputs, log_tail
from gridml.executors.panda.render import PandaTask, render_task_params
from gridml.executors.panda.request import render_for_request, resolve_nickname, task_from_request

__all__ = ["PandaExecutor", "render_for_request", "task_id_of", "trial_state"]

log = logging.getLogger("gridml.executors.panda")
client = pc  # (tests reach panda-client's wrapper as gridml.executors.panda.executor.client)

# JEDI task states -> trial states (TaskStatus.state). Everything not listed is still "submitted".
TRIAL_STATE = {
    "scouting": "running", "scouted": "running", "running": "running", "prepared": "running",
    "merging": "running", "passed": "running",
    "done": "completed", "finished": "completed",
    "failed": "failed", "broken": "failed", "exhausted": "failed",
    "aborting": "killed", "toabort": "killed", "aborted": "killed",
}
RETRYABLE = ("finished", "failed")  # what retryTask accepts from a user
OVER = ("done", "finished", "failed", "broken", "aborted", "exhausted")
REGISTER_GRACE_S = 3600.0  # a new task is in DEFT's table only, unknown to JEDI, this long at most


def trial_state(panda_status: str) -> str:
    """The trial state for a JEDI task status (``submitted`` while PanDA still queues it)."""
    return TRIAL_STATE.get(panda_status, "submitted")


# ---- the executor ----------------------------------------------------------------------------
class PandaExecutor:
    """:class:`gridml.executors.base.Executor` on PanDA (see the module docstring)."""

    name = "panda"
    remote = True
    watch_heartbeats = False  # PanDA enforces the walltime; worker nodes may have no network

    def __init__(self, data: DataManager | None, journal: Path | None = None) -> None:
        self._data = data  # the campaign's data manager: outputs and logs are read through it
        self._journal = journal  # folder: one <task id>.json per task (params, output folder)
        self._tasks: dict[str, tuple[dict[str, Any], Path]] = {}  # handle -> (params, output_dir)
        self._missing: dict[str, float] = {}  # handle -> since when JEDI does not know the task

    # -- submit ------------------------------------------------------------------------------
    def submit(self, req: TaskRequest) -> str:
        """Submit the trial's task, or find the one already submitted for this attempt."""
        task = task_from_request(req, resolve_nickname(req.site), source_url=pc.source_url(),
                                 client_version=pc.client_version(),
                                 upload=lambda path: pc.put_file(str(path)))
        noted = journal.read(req.workdir)
        if noted:
            found = self._resume(noted, req.attempt, req)
            if found:
                return found
        params = render_task_params(self._named(task, noted, req.attempt))
        task_id = self._insert(params, req, req.attempt)
        return self._remember(task_id, params, req.trial.output_dir)

    def _named(self, task: PandaTask, noted: dict[str, Any] | None, attempt: int) -> PandaTask:
        """A fresh task name (``.aK``) when the trial's earlier task cannot be retried."""
        if noted and noted.get("attempt", 1) < attempt:
            return replace(task, name_suffix=f".a{attempt}")
        return task

    def _resume(self, noted: dict[str, Any], attempt: int, req: TaskRequest) -> str | None:
        """The handle of the journaled task when it serves this attempt (resubmission or retry).

        A task killed on request never does: PanDA may still show it running while it aborts."""
        task_id = int(noted["jediTaskID"])
        if noted.get("killed"):
            return None
        try:
            status = pc.task_status(task_id)
        except NotFoundError:
            return None
        if noted.get("attempt", 1) >= attempt or status not in OVER:  # also: a kill that failed
            log.info("trial %d: following task %d (%s)", req.trial_number, task_id, status)
            journal.write(req.workdir, dict(noted, attempt=max(attempt, noted.get("attempt", 1))))
        elif status in RETRYABLE:
            log.info("trial %d attempt %d: retryTask %d (%s): %s", req.trial_number, attempt,
                     task_id, status, pc.retry(task_id))
            journal.record_retry(req.workdir, task_id, status, attempt)
        else:
            return None
        return self._remember(task_id, self._task_params(task_id), req.trial.output_dir)

    def _insert(self, params: dict[str, Any], req: TaskRequest, attempt: int) -> int:
        try:
            task_id, message = pc.submit(params)
            level = logging.WARNING if "reactivation" in message else logging.INFO
            log.log(level, "trial %d: %s", req.trial_number, message)  # code 3: the old task reruns
        except DuplicateTaskError as dup:
            task_id = int(dup.task_id)  # type: ignore[attr-defined]
            log.warning("trial %d: %s: following the existing task", req.trial_number, dup)
        journal.record_task(req.workdir, params["taskName"], task_id, attempt, pc.server_url())
        return task_id

    def _remember(self, task_id: int, params: dict[str, Any], output_dir: Path) -> str:
        handle = f"panda:{task_id}"
        self._tasks[handle] = (params, output_dir)
        if self._journal is not None:
            journal.write_task(self._journal, task_id, params, output_dir)
        return handle

    def _task_params(self, task_id: int) -> dict[str, Any]:
        """The task's parameters: from the journal, else from the server."""
        noted = journal.read_task(self._journal, task_id) if self._journal else None
        return noted[0] if noted else pc.task_params(task_id)

    # -- follow ------------------------------------------------------------------------------
    def poll(self, handle: str) -> TaskStatus:
        """The trial's state; when the task is over, its outputs are fetched (see module doc)."""
        task_id = task_id_of(handle)
        try:
            status = pc.task_status(task_id)
            params, output_dir = self._task(handle)
        except NotFoundError as exc:
            return self._not_found(handle, task_id, exc)
        except ExecutorError as exc:  # server down: keep waiting, PanDA keeps the task
            log.warning("%s: %s", handle, exc)
            return TaskStatus("unknown", str(exc))
        state = trial_state(status)
        message = f"PanDA task {task_id} is {status}"
        waited = journal.retry_pending(output_dir.parent, task_id, status)
        if waited is not None:  # the old final status, until JEDI acts on the retry
            return TaskStatus("submitted", f"{message}; retry registered {waited:.0f} s ago, "
                                           "waiting for JEDI to act on it")
        if state in ("completed", "failed", "killed"):
            message += _job_summary(task_id)
        if state == "completed":
            return self._completed(params, task_id, output_dir, message)
        if state in ("failed", "killed"):
            tail = self._log_tail(params, task_id)  # the payload's log: no exit code beside it
            return TaskStatus(state, message, log_tail=tail,
                              deterministic=state == "failed" and deterministic(None, tail))
        return TaskStatus(state, message)

    def _not_found(self, handle: str, task_id: int, exc: NotFoundError) -> TaskStatus:
        """A new task sits in DEFT's table until JEDI registers it: getTaskStatus does not know it
        yet. That is "submitted" for a while after the submission, then an error."""
        since = self._missing.setdefault(handle, self._submitted_at(handle, task_id) or time.time())
        age = time.time() - since
        if age < REGISTER_GRACE_S:
            return TaskStatus("submitted", f"PanDA task {task_id} is not registered by JEDI yet "
                                           f"({age:.0f} s after its submission)")
        return TaskStatus("failed", f"{exc}; JEDI still does not know it {age / 60:.0f} min "
                                    "after its submission")

    def _submitted_at(self, handle: str, task_id: int) -> float | None:
        if handle not in self._tasks:
            return None
        noted = journal.read(self._tasks[handle][1].parent) or {}
        return noted.get("submitted_at") if noted.get("jediTaskID") == task_id else None

    def _task(self, handle: str) -> tuple[dict[str, Any], Path]:
        if handle not in self._tasks:  # a restarted controller: its journal knows the task
            noted = journal.read_task(self._journal, task_id_of(handle)) if self._journal else None
            if noted is None:
                raise ExecutorError(f"{handle}: not in this executor's journal ({self._journal})",
                                    hint="poll it from the campaign that submitted it")
            self._tasks[handle] = noted
        return self._tasks[handle]

    def _completed(self, params: dict[str, Any], task_id: int, output_dir: Path,
                   message: str) -> TaskStatus:
        try:
            stored = collect_outputs(self._data_for(params), params, task_id, output_dir)
        except GridmlError as exc:  # the data store is unreachable: try again at the next poll
            log.warning("task %d: outputs not fetched yet: %s", task_id, exc)
            return TaskStatus("unknown", f"{message}, but its outputs could not be fetched yet: {exc}")
        if not stored:
            return TaskStatus("failed", f"{message}, but it stored no outputs",
                              log_tail=self._log_tail(params, task_id))
        return TaskStatus("completed", message, stored_outputs=stored)

    def _log_tail(self, params: dict[str, Any], task_id: int) -> str:
        try:
            return log_tail(self._data_for(params), params, task_id)
        except GridmlError as exc:
            return f"(no job log: {exc})"

    def _data_for(self, params: dict[str, Any]) -> DataManager:
        if self._data is None:
            raise ExecutorError("the PanDA executor was created without the campaign's data "
                                "manager: it cannot read the task's outputs",
                                hint="create it with executors.create('panda', data=...)")
        return self._data

    # -- control -----------------------------------------------------------------------------
    def kill(self, handle: str) -> None:
        """killTask. If the server cannot be reached the task may go on: that is logged, not
        raised, so that stopping a campaign stops everything else; a later submission of the
        trial follows the task again instead of starting a second one."""
        try:
            log.info("%s: %s", handle, pc.kill(task_id_of(handle)))
            self._mark_killed(handle)
        except NotFoundError as exc:
            log.info("%s: nothing to kill: %s", handle, exc)
        except ExecutorError as exc:
            log.error("%s: could not be killed, it may still run at PanDA: %s", handle, exc)

    def _mark_killed(self, handle: str) -> None:
        """PanDA accepted the kill: the trial's journal says so, so a resumed campaign starts a
        new task for the trial instead of following this one while it aborts."""
        if handle in self._tasks or self._journal is not None:
            try:
                _, output_dir = self._task(handle)
            except ExecutorError:
                return
            journal.record_kill(output_dir.parent, task_id_of(handle))

    def retry(self, handle: str) -> str:
        """retryTask: PanDA runs the task's failed jobs again; the handle stays the same."""
        task_id = task_id_of(handle)
        status = pc.task_status(task_id)
        log.info("%s: %s", handle, pc.retry(task_id))
        journal.record_retry(self._task(handle)[1].parent, task_id, status)
        return handle

    def close(self) -> None:
        """Nothing runs here: grid tasks go on (Ctrl-C kills them through ``kill`` first)."""
        self._tasks.clear()


def _job_summary(task_id: int) -> str:
    """`` (jobs: failed*1, PandaID 5002)`` from getJediTaskDetails, or '' if it cannot be had."""
    try:
        details = pc.task_details(task_id)
    except GridmlError:
        return ""
    ids = ", ".join(str(i) for i in sorted(details.get("PandaID") or []))
    stats = details.get("statistics") or "no statistics"
    return f" (jobs: {stats}; PandaID {ids or 'none'})"


def task_id_of(handle: str) -> int:
    try:
        return int(handle.rsplit(":", 1)[-1])
    except ValueError:
        raise ExecutorError(f"{handle!r} is not a PanDA task handle (panda:<jediTaskID>)") from None
