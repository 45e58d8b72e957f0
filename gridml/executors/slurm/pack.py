"""Packed allocations (``slurm.pack: K``): trials as job steps of allocations of K slots.

Slurm's own job steps, no scheduler of gridml's on the nodes: an allocation
(:func:`gridml.executors.slurm.render_pack.alloc_script`) holds K slots of one trial's resources
and runs nothing; the controller starts each trial attempt as a step of it from the submit host
(``srun --jobid=<allocation> --exact ...``, :func:`~gridml.executors.slurm.render_pack.srun_argv`)
as soon as a slot is free and the allocation has the trial's walltime left (+
:data:`~gridml.executors.slurm.render_pack.MARGIN_S`). Trials wait in a queue of their shape
(resources and site options); when the queue holds more trials than the pending allocations
have slots, one more allocation per K queued trials is submitted. An allocation with no running
step and no queued trial for :data:`IDLE_S` is released (``scancel``); one the controller
forgets (campaign over, controller gone) ends itself (its lease).

Handles: ``slurm-pack:<study>.trial-NNNN.a<attempt>``. The trial's journal (``slurm.json``) holds
for the attempt its shape, the srun line, then the allocation and the step's name once started;
the executor's journal folder holds ``pack/<allocation>.json`` for every allocation submitted.
A restarted controller thus finds queued trials (queued again), running steps (``squeue
--steps``, adopted) and live allocations (used again) without submitting anything twice.

A step's end: its exit code file (``exit_code`` in the attempt folder, written by ``step.sh``);
a step gone without one is judged from ``sacct`` (its state by name), with the rules of one job
per trial (:mod:`gridml.executors.slurm.follow`). Continued from the trial's checkpoint, no retry
used (``TaskStatus.continuation``, ``backend.max_continuations``): a step that exits 75 (it
checkpointed on ``srun --signal=USR1@<slurm.signal_grace>``), a step that its own walltime
(TIMEOUT) or its allocation's (TIMEOUT) ended after a checkpoint. A step whose allocation ended
otherwise (NODE_FAIL, PREEMPTED, TIMEOUT before any checkpoint) or whose node Slurm sees lost is
lost to the infrastructure: resubmitted without using a retry.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from gridml.errors import ExecutorError
from gridml.executors.base import TaskRequest, TaskStatus
from gridml.executors.journal import read_json
from gridml.executors.logs import last_error_line, tail
from gridml.executors.slurm import cli, journal
from gridml.executors.slurm import render_pack as rp
from gridml.executors.slurm.follow import (Handles, NodeWatch, continuation, ended, exit_code,
                                           lost_status, trial_status)

log = logging.getLogger("gridml.executors.slurm")

PREFIX = "slurm-pack:"
IDLE_S = 3.0  # an allocation idle (no step, no queued trial) this long is released
START_GRACE_S = 30.0  # a step not yet in squeue this long after srun started is still starting
CACHE_S = 1.0
ALIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED")
LOST_ALLOC = {"NODE_FAIL": "a node of its allocation failed", "BOOT_FAIL": "its allocation's "
              "nodes failed to boot", "PREEMPTED": "its allocation was preempted",
              "TIMEOUT": "its allocation hit its walltime (slurm.pack_walltime)"}


@dataclass
class Allocation:
    job_id: str
    shape: str
    folder: Path
    slots: int
    state: str = "PENDING"
    time_left_s: float | None = None
    nodes: str = ""
    idle_since: float | None = None
    steps: dict[str, str] = field(default_factory=dict)  # step name -> step id (squeue)
    gone: bool = False


@dataclass
class Queued:
    key: str
    workdir: Path
    attempt: int
    shape: str
    walltime_s: int
    since: float


def allocation_ended(head: str, state: str, run: Path) -> TaskStatus:
    """A step whose allocation ended ``state`` (one of :data:`LOST_ALLOC`) under it: not the
    payload's doing, so no retry used. After a checkpoint, an allocation's TIMEOUT continues the
    trial from there (``TaskStatus.continuation``, counted against backend.max_continuations),
    as a trial's own TIMEOUT does; else the trial is resubmitted as lost to the infrastructure
    (its next attempt still resumes from a checkpoint, if one is written by then)."""
    log_tail = tail(run / "payload.log")
    if continuation(state, None, run) is not None:
        return TaskStatus("failed", f"{head}: {LOST_ALLOC[state]} after the trial checkpointed: "
                          "continued from there in a new step", log_tail, continuation=True)
    return TaskStatus("failed", f"{head}: {LOST_ALLOC[state]}, not the payload; resubmitted "
                      "without using a retry", log_tail, infrastructure=True)


class Packer:
    """The packed trials of one :class:`~gridml.executors.slurm.executor.SlurmExecutor`."""

    def __init__(self, folder: Path | None, nodes: NodeWatch | None = None) -> None:
        self._handles = Handles(PREFIX, folder / "pack" if folder else None)
        self._nodes = nodes or NodeWatch()
        self._folder = folder
        self._allocs: dict[str, Allocation] = {}
        self._queue: list[Queued] = []
        self._started: dict[str, str] = {}  # handle key -> allocation of its running step
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._reap: list[subprocess.Popen[bytes]] = []
        self._seen_at = 0.0
        self.sbatch_calls = 0
        self.srun_calls = 0
        self.start_latency_s: list[float] = []  # queued -> srun started, inside a running allocation
        self._load()

    # -- journal ---------------------------------------------------------------------------------
    def _load(self) -> None:
        """A restarted controller: every allocation it submitted that Slurm may still run."""
        if self._folder is None or not (self._folder / "pack").is_dir():
            return
        for path in (self._folder / "pack").glob("alloc-*.json"):
            doc = read_json(path)
            if isinstance(doc, dict) and not doc.get("over"):
                self._allocs[str(doc["job_id"])] = Allocation(
                    str(doc["job_id"]), str(doc["shape"]), Path(doc["folder"]), int(doc["slots"]))

    def _note_alloc(self, alloc: Allocation, **extra: object) -> None:
        if self._folder is None:
            return
        from gridml.executors.journal import write_json

        write_json(self._folder / "pack" / f"alloc-{alloc.job_id}.json",
                   {"job_id": alloc.job_id, "shape": alloc.shape, "folder": str(alloc.folder),
                    "slots": alloc.slots, **extra}, indent=None)

    # -- submit ----------------------------------------------------------------------------------
    def submit(self, req: TaskRequest, step_text: str) -> str:
        """Queue the attempt for a slot (idempotent: a queued or started attempt is found)."""
        key, known = self._handles.add(req, "pack")
        if known is not None:
            self._requeue(key, known)
            return PREFIX + key
        (rp.attempt_dir(req) / "step.sh").write_text(step_text)
        folder = rp.alloc_folder(req)
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / "alloc.sh"
        if not script.exists():
            script.write_text(rp.alloc_script(req, folder))
        journal.update_attempt(req.workdir, req.attempt, pack=rp.alloc_shape(req), killed=None,
                               job_id=None, state="QUEUED", queued_at=journal.now(),
                               srun=rp.srun_argv(req, "{alloc}"), walltime_s=req.walltime_s,
                               alloc_folder=str(folder), slots=rp.pack_slots(req.site),
                               step=rp.step_name(req))
        self._requeue(key, journal.attempt(req.workdir, req.attempt))
        self.pump()
        return PREFIX + key

    def _requeue(self, key: str, entry: dict[str, object]) -> None:
        if entry.get("alloc") or any(q.key == key for q in self._queue):
            return
        workdir, attempt = self._handles.locate(key)
        self._queue.append(Queued(key, workdir, attempt, str(entry["pack"]),
                                  int(entry.get("walltime_s") or 0),  # type: ignore[call-overload]
                                  float(entry.get("queued_at") or time.time())))  # type: ignore[arg-type]

    # -- the pump: allocations, steps ------------------------------------------------------------
    def pump(self, force: bool = False) -> None:
        """Refresh what Slurm says of the allocations (once per CACHE_S unless ``force``), start
        queued trials in free slots, submit allocations for the rest, release the idle ones."""
        self._reap = [p for p in self._reap if p.poll() is None]
        if force or time.monotonic() - self._seen_at >= CACHE_S:
            self._refresh()  # else what squeue said less than CACHE_S ago, and our own starts
        self._launch()
        self._grow()
        self._release()

    def _refresh(self) -> None:
        live = [a for a in self._allocs.values() if not a.gone]
        ids = [a.job_id for a in live]
        states = cli.allocations(ids)
        running = [j for j, i in states.items() if i.state == "RUNNING"]
        steps = cli.steps(running) if running else {}
        self._seen_at = time.monotonic()
        for a in live:
            info = states.get(a.job_id)
            if info is None or info.state not in ALIVE:
                a.gone, a.state = True, info.state if info else "GONE"
                self._note_alloc(a, over=a.state)
                continue
            a.state, a.time_left_s, a.nodes = info.state, info.time_left_s, info.nodes
            a.steps = steps.get(a.job_id, {})
            try:  # the holder's lease: the controller is here
                os.utime(a.folder / "lease") if (a.folder / "lease").exists() else \
                    (a.folder / "lease").touch()
            except OSError:
                pass

    def _used(self, a: Allocation) -> int:
        mine = sum(1 for alloc in self._started.values() if alloc == a.job_id)
        return max(mine, len(a.steps))

    def _fits(self, a: Allocation, q: Queued) -> bool:
        """``q`` may start in ``a``: the same shape, and the trial's walltime left in it (+
        MARGIN_S once it runs: srun's start and the step's end take that)."""
        margin = rp.MARGIN_S if a.state == "RUNNING" else 0
        return (a.shape == q.shape and not a.gone and
                (a.time_left_s is None or a.time_left_s >= q.walltime_s + margin))

    def _launch(self) -> None:
        for q in list(self._queue):
            for a in self._allocs.values():
                if a.state == "RUNNING" and self._fits(a, q) and self._used(a) < a.slots:
                    self._start(q, a)
                    break

    def _start(self, q: Queued, a: Allocation) -> None:
        entry = journal.attempt(q.workdir, q.attempt)
        argv = [str(x).replace("{alloc}", a.job_id) for x in entry["srun"]]
        run = q.workdir / f"attempt-{q.attempt}"
        with open(run / "srun.log", "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # the step outlives a controller's exit
        self.srun_calls += 1
        self._procs[q.key] = proc
        self._started[q.key] = a.job_id
        self._queue.remove(q)
        a.idle_since = None
        started = journal.now()
        self.start_latency_s.append(max(started - q.since, 0.0))
        journal.update_attempt(q.workdir, q.attempt, alloc=a.job_id, job_id=a.job_id,
                               started_at=started, state="STEP", nodes=a.nodes)
        log.info("%s: job step of allocation %s (%d/%d slots)", q.key, a.job_id, self._used(a), a.slots)

    def _grow(self) -> None:
        """One more allocation per K queued trials the pending allocations have no slot for."""
        by_shape: dict[str, list[Queued]] = {}
        for q in self._queue:
            by_shape.setdefault(q.shape, []).append(q)
        for shape, queued in by_shape.items():
            free = sum(a.slots - self._used(a) for a in self._allocs.values()
                       if a.shape == shape and not a.gone and a.state != "RUNNING")
            # a running allocation's free slots were just used by _launch; what is left waits
            # only for slots that walltime allows
            free += sum(a.slots - self._used(a) for a in self._allocs.values()
                        if a.state == "RUNNING" and self._fits(a, queued[0]))
            missing = len(queued) - max(free, 0)
            entry = journal.attempt(queued[0].workdir, queued[0].attempt)
            slots = int(entry.get("slots") or 1)
            folder = Path(str(entry["alloc_folder"]))
            while missing > 0:
                job_id = cli.submit(folder / "alloc.sh")
                self.sbatch_calls += 1
                alloc = Allocation(job_id, shape, folder, slots)
                self._allocs[job_id] = alloc
                self._note_alloc(alloc)
                log.info("packed allocation %s submitted (%d slots, %d trials queued)", job_id,
                         slots, len(queued))
                missing -= slots

    def _release(self) -> None:
        now = time.monotonic()
        for a in self._allocs.values():
            if a.gone or self._used(a) > 0:
                a.idle_since = None if not a.gone else a.idle_since
                continue
            wanted = any(self._fits(a, q) for q in self._queue)
            if wanted:
                a.idle_since = None
                continue
            a.idle_since = a.idle_since or now
            if now - a.idle_since >= IDLE_S:
                self.cancel_alloc(a, "no trial left for it")

    def cancel_alloc(self, a: Allocation, why: str) -> None:
        try:
            cli.cancel(a.job_id)
        except ExecutorError as exc:
            log.warning("allocation %s: not released: %s", a.job_id, exc)
            return
        a.gone, a.state = True, "RELEASED"
        self._note_alloc(a, over="RELEASED")
        log.info("packed allocation %s released (%s)", a.job_id, why)

    # -- follow ----------------------------------------------------------------------------------
    def poll(self, key: str) -> TaskStatus:
        workdir, attempt = self._handles.locate(key)
        entry = journal.attempt(workdir, attempt)
        if entry.get("killed"):
            return TaskStatus("killed", f"{PREFIX}{key}: cancelled on request")
        if (lost := self._handles.lost(key)) is not None:
            return lost
        try:
            if not entry.get("alloc"):
                self._requeue(key, entry)
            self.pump()
        except ExecutorError as exc:
            log.warning("%s%s: %s", PREFIX, key, exc)
            return TaskStatus("unknown", str(exc))
        entry = journal.attempt(workdir, attempt)
        alloc_id = entry.get("alloc")
        if not alloc_id:
            pending = [a.job_id for a in self._allocs.values() if a.shape == entry.get("pack")
                       and not a.gone]
            return TaskStatus("submitted", f"queued for a slot of a packed allocation "
                              f"({', '.join(pending) or 'none yet'})")
        alloc_id = str(alloc_id)
        self._started.setdefault(key, alloc_id)  # a restarted controller adopts the step
        status = self._handles.settle(key, self._step_status(key, entry, workdir / f"attempt-{attempt}",
                                                             alloc_id))
        if status.state in ("completed", "failed", "killed"):
            self._started.pop(key, None)
            proc = self._procs.pop(key, None)
            if proc is not None and proc.poll() is None:
                self._reap.append(proc)  # srun still ending the step: reaped by a later pump
            journal.update_attempt(workdir, attempt, state=status.state.upper())
        return status

    def _step_status(self, key: str, entry: dict[str, object], run: Path, alloc_id: str) -> TaskStatus:
        name = str(entry.get("step"))
        a = self._allocs.get(alloc_id)
        head = f"step {name} of allocation {alloc_id}"
        status = ended(head, exit_code(run), run)  # 0, 75 (continued) or the payload's code
        if status is not None:
            return status
        if a is not None and not a.gone and name in a.steps:
            lost = self._nodes.lost(a.nodes, f"allocation {alloc_id}")
            if lost:
                self._cancel_step(alloc_id, a.steps[name])
                return lost_status(head, lost, tail(run / "payload.log"))
            return TaskStatus("running", f"{head} running on {a.nodes}")
        proc = self._procs.get(key)
        started = float(entry.get("started_at") or 0)  # type: ignore[arg-type]
        if (proc is not None and proc.poll() is None) or time.time() - started < START_GRACE_S:
            if a is None or not a.gone:
                return TaskStatus("running", f"{head}: starting (srun)")
        if a is not None and a.gone and a.state in LOST_ALLOC:
            return allocation_ended(head, a.state, run)
        info = cli.step_accounting(alloc_id).get(name)
        if info is not None and info.state == "CANCELLED":
            # the allocation's end (walltime, preemption) cancels its steps: say why it ended
            over = cli.accounting(alloc_id)
            if over is not None and over.state in LOST_ALLOC:
                return allocation_ended(head, over.state, run)
        if info is not None and info.state not in ("RUNNING", "PENDING"):
            return trial_status(info, run)  # the step's own TIMEOUT after a checkpoint: continued
        srun = tail(run / "srun.log")
        last = last_error_line(srun) or (srun.strip().splitlines() or [""])[-1]
        return TaskStatus("failed", f"{head} ended without an exit code" + (f": {last}" if last else ""),
                          tail(run / "payload.log") or srun)

    def _cancel_step(self, alloc_id: str, step_id: str) -> None:
        try:
            cli.cancel(f"{alloc_id}.{step_id}")
        except ExecutorError as exc:
            log.warning("step %s.%s: not cancelled: %s", alloc_id, step_id, exc)

    # -- control ---------------------------------------------------------------------------------
    def kill(self, key: str) -> None:
        found = self._handles.find(key)
        if found is None:
            return
        workdir, attempt = found
        entry = journal.attempt(workdir, attempt)
        self._queue = [q for q in self._queue if q.key != key]
        alloc_id = entry.get("alloc")
        if alloc_id:
            a = self._allocs.get(str(alloc_id))
            step_id = a.steps.get(str(entry.get("step"))) if a else None
            if step_id is None:
                step_id = cli.steps([str(alloc_id)]).get(str(alloc_id), {}).get(str(entry.get("step")))
            if step_id is not None:
                self._cancel_step(str(alloc_id), step_id)
            proc = self._procs.pop(key, None)
            if proc is not None and proc.poll() is None:
                proc.terminate()
            self._started.pop(key, None)
        journal.update_attempt(workdir, attempt, killed=journal.now())

    def close(self) -> None:
        """Release the allocations no step runs in (queued trials go back to the campaign's
        queue with `gridml resume`); allocations with running steps go on for them."""
        for a in self._allocs.values():
            if not a.gone and not any(j == a.job_id for j in self._started.values()):
                self.cancel_alloc(a, "the controller stops")
