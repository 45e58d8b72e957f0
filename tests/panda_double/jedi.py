"""JEDI, played in small: task registration with PanDA's duplicate rules, and the task life cycle.

A new task first sits in DEFT's table only (``register_delay_s``): the server answers "not found"
for it and a resubmission is a duplicate with code 1. Then tasks move registered -> defined -> ready -> running -> done | failed (one job per task, as gridml
submits them; ``finish_next`` makes a task end ``finished``, as when JEDI counts some of its input
files as failed), broken when they cannot be defined (an input dataset unknown or empty, no job
parameters), aborting -> aborted when killed. A phpo task (``hpoWorkflow``) runs as iDDS runs it
(:mod:`.idds`: the steering command for real, one evaluation job per point). The rules follow the real server's
``insertTaskParamsPanda`` and ``sendCommandTaskPanda``: a task name reused while the task is
active is a duplicate (code 2, the old jediTaskID in the message), reused after it ended means
incremental re-execution (code 3); too many active tasks is code 10; ``retry`` is accepted only
from finished/failed, ``kill`` only while the task is not over (code 4 otherwise).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.panda_double import idds, pilot

ACTIVE = ("registered", "defined", "ready", "scouting", "running", "paused", "throttled", "pending")
FINAL = ("finished", "failed", "aborted", "done", "exhausted")
REQUIRED = ("taskName", "vo", "prodSourceLabel", "jobParameters")


@dataclass
class Task:
    task_id: int
    params: dict[str, Any]
    user: str
    status: str = "registered"
    history: list[str] = field(default_factory=list)
    jobs: list[pilot.Job] = field(default_factory=list)
    streams: dict[str, list[str]] = field(default_factory=dict)
    datasets: dict[str, str] = field(default_factory=dict)  # stream -> dataset names
    error: str = ""
    command: str | None = None  # a pending kill/retry/incexec
    command_at: float = 0.0
    registered_at: float = 0.0  # before this, the task is only in DEFT's table: JEDI knows nothing

    def set(self, status: str) -> None:
        self.status = status
        self.history.append(status)


class Jedi:
    """The task table and the loop that advances it (one step per task per tick)."""

    def __init__(self, data: Callable[[], Any], workroot: Path, env: dict[str, str], *,
                 tick_s: float = 0.1, max_active_tasks: int | None = None) -> None:
        self.data = data
        self.workroot = Path(workroot)
        self.env = env
        self.tick_s = tick_s
        self.max_active_tasks = max_active_tasks
        self.tasks: dict[int, Task] = {}
        self.inserts = 0  # insertTaskParams calls that reached the task table
        self.hold = False  # True: ready tasks wait (a queue without free slots)
        self.fail_next = 0  # the next N jobs fail at stage-in (a lost worker node)
        self.finish_next = 0  # the next N tasks end "finished": JEDI counted input files as failed
        self.command_delay_s = 0.0  # commands are registered, JEDI acts on them this much later
        self.register_delay_s = 0.0  # a new task reaches JEDI's tables this much later
        self._next_task, self._next_job = 1000, 5000
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jedi", daemon=True)

    # ---- commands from the API ------------------------------------------------------------------
    def insert(self, params: dict[str, Any], user: str) -> tuple[int, str]:
        """insertTaskParamsPanda: (code, message) as the real server answers."""
        with self._lock:
            self.inserts += 1
            if not isinstance(params, dict) or any(k not in params for k in REQUIRED):
                return 4, "failed to register task"
            active = [t for t in self.tasks.values() if t.user == user and t.status in ACTIVE]
            if self.max_active_tasks is not None and len(active) + 1 > self.max_active_tasks:
                return 10, f"Too many active tasks for {user} {len(active) + 1}>{self.max_active_tasks}"
            old = self._by_name(params, user)
            if old is not None:
                return self._duplicate(old, params)
            task = Task(self._new_task_id(), dict(params, userName=user, taskType="anal"), user,
                        registered_at=time.monotonic() + self.register_delay_s)
            task.set("registered")
            self.tasks[task.task_id] = task
            return 0, f"succeeded. new jediTaskID={task.task_id}"

    def _by_name(self, params: dict[str, Any], user: str) -> Task | None:
        if params.get("uniqueTaskName") is not True:
            return None
        same = [t for t in self.tasks.values()
                if t.user == user and t.params["taskName"] == params["taskName"]]
        return max(same, key=lambda t: t.task_id) if same else None

    def _duplicate(self, old: Task, params: dict[str, Any]) -> tuple[int, str]:
        name = params["taskName"]
        if not self.in_jedi(old):
            return 1, (f"jediTaskID={old.task_id} is already queued for outDS={name}. "
                       "You cannot submit duplicated tasks. ")
        if old.status not in FINAL:
            return 2, (f"jediTaskID={old.task_id} is in the {old.status} state for outDS={name}. "
                       "You can re-submit the task with new parameters for the same or another "
                       "input once it goes into finished/failed/done. Or you can retry the task "
                       "once it goes into running/finished/failed/done. ")
        old.command, old.command_at = "incexec", time.monotonic()
        return 3, ("reactivation accepted. "
                   f"jediTaskID={old.task_id} (currently in {old.status} state) will be "
                   "re-executed with old and/or new input")

    def command(self, task_id: int, com: str) -> tuple[int, str]:
        """sendCommandTaskPanda for kill and retry."""
        with self._lock:
            task = self.get(task_id)
            if task is None:
                return 2, f"jediTaskID={task_id} not found"
            allowed = (task.status in ("finished", "failed") if com == "retry" else
                       task.status not in ("finished", "done", "prepared", "broken", "aborted",
                                           "toabort", "aborting", "failed"))
            if not allowed:
                return 4, (f"Command rejected: the {com} command is not accepted if the task is "
                           f"in {task.status} status ")
            task.command, task.command_at = com, time.monotonic()
            return 0, (f"command={com} is registered for task ID {task_id}. "
                       "will be executed in a few minutes")

    def get(self, task_id: int) -> Task | None:
        """The task as JEDI's tables show it (None while it is only in DEFT's)."""
        with self._lock:
            task = self.tasks.get(task_id)
            return task if task is not None and self.in_jedi(task) else None

    def register_pending(self) -> None:
        """Every task still only in DEFT's table reaches JEDI's now (ends a long register_delay_s)."""
        with self._lock:
            now = time.monotonic()
            for task in self.tasks.values():
                task.registered_at = min(task.registered_at, now)

    @staticmethod
    def in_jedi(task: Task) -> bool:
        return time.monotonic() >= task.registered_at

    # ---- the loop ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            for task in self.tasks.values():
                for job in task.jobs:
                    job.kill()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            with self._lock:
                tasks = list(self.tasks.values())
            for task in tasks:
                self.step(task)

    def step(self, task: Task) -> None:
        """Advance one task by one state (or act on its pending command)."""
        with self._lock:
            if not self.in_jedi(task):
                return None
            if task.command and time.monotonic() - task.command_at >= self.command_delay_s:
                return self._act(task)
            if task.status == "registered":
                return self._define(task)
            if task.status == "defined":
                return task.set("ready")
            if task.status == "ready" and not self.hold and task.params.get("hpoWorkflow"):
                task.set("running")
                return idds.start(self, task)  # iDDS ends the task
            if task.status == "ready" and not self.hold:
                return self._start_job(task)
            if task.status == "running" and not task.params.get("hpoWorkflow"):
                return self._watch_job(task)
            if task.status == "aborting" and not any(j.status == "running" for j in task.jobs):
                task.set("aborted")
        return None

    def _act(self, task: Task) -> None:
        com, task.command = task.command, None
        if com == "kill":
            task.set("aborting")
            for job in task.jobs:
                if job.status == "running":
                    job.status = "cancelled"
                    job.kill()
        elif com in ("retry", "incexec"):
            task.set("ready")

    def _define(self, task: Task) -> None:
        """Resolve every input stream to its files; broken when that is impossible."""
        try:
            for item in task.params["jobParameters"]:
                if item.get("param_type") == "input":
                    stream = pilot._PLACEHOLDER.search(item["value"]).group(1)  # type: ignore[union-attr]
                    task.streams[stream] = self._files(item)
                    task.datasets[stream] = item["dataset"]
        except Exception as exc:
            task.error = f"failed to define the task: {exc}"
            return task.set("broken")
        task.set("defined")

    def _files(self, item: dict[str, Any]) -> list[str]:
        from gridml.executors.panda.render import panda_did

        files = []
        for ds in str(item["dataset"]).split(","):
            found = self.data().resolve(panda_did(ds))
            files += [str(f.did) for f in found]
        if not files:
            raise ValueError(f"no files in {item['dataset']}")
        return files

    def _start_job(self, task: Task) -> None:
        self._next_job += 1
        serial = len(task.jobs) + 1
        job = pilot.Job(self._next_job, task.task_id, serial,
                        self.workroot / f"{task.task_id}" / f"{self._next_job}", dict(task.streams))
        task.jobs.append(job)
        task.set("running")
        hours = float(task.params.get("maxWalltime") or 24)
        fail = self.fail_next > 0
        self.fail_next -= int(fail)
        threading.Thread(target=pilot.run, args=(task.params, job, self.data(), self.env, hours * 3600),
                         kwargs={"fail": fail}, name=f"pilot-{job.panda_id}", daemon=True).start()

    def start_hpo_job(self, task: Task, point: Any) -> pilot.Job:
        """An evaluation job of a phpo task for ``point`` (iDDS asks for it)."""
        with self._lock:
            self._next_job += 1
            job = pilot.Job(self._next_job, task.task_id, len(task.jobs) + 1,
                            self.workroot / f"{task.task_id}" / f"{self._next_job}", dict(task.streams))
            task.jobs.append(job)
        hours = float(task.params.get("maxWalltime") or 24)
        threading.Thread(target=pilot.run_hpo, args=(task.params, job, point, self.data(), self.env,
                                                      hours * 3600),
                         name=f"pilot-{job.panda_id}", daemon=True).start()
        return job

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    def stopped(self) -> bool:
        return self._stop.is_set()

    def _watch_job(self, task: Task) -> None:
        job = task.jobs[-1]
        if job.status in ("finished", "failed"):
            task.error = job.diag
            partial = job.status == "finished" and self.finish_next > 0
            self.finish_next -= int(partial)
            task.set("failed" if job.status == "failed" else "finished" if partial else "done")

    def _new_task_id(self) -> int:
        self._next_task += 1
        return self._next_task

    def wait(self, task_id: int, states: tuple[str, ...], timeout_s: float = 120) -> str:
        """Test helper: block until the task is in one of ``states``; its status."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            task = self.get(task_id)
            if task is not None and task.status in states:
                return task.status
            time.sleep(0.05)
        raise TimeoutError(f"task {task_id} not in {states} after {timeout_s} s "
                           f"(history {self.get(task_id).history if self.get(task_id) else None})")
