"""The trial's side of the filesystem channel with the controller (gridml/live.py is the other).

On an HPC cluster the compute nodes often cannot reach the controller's API, but they share the
trial's folder with it (``runs/<study>/trial-NNNN/``, the parent of ``outputs/``). Three files
make a two-way channel there, with NFS-like semantics only (no inotify, no file locks, no
modification times compared across hosts):

- ``outputs/metrics.jsonl`` (payloads/runtime/spool.py): the epoch reports, appended and
  fsync'd one line per epoch; the controller reads what is new by byte offset;
- ``progress.json`` (written here by rank 0, replaced by rename at most every
  :data:`PROGRESS_EVERY_S`): epoch, batches done in it, batches per epoch, a batch counter that
  only grows, the time, the writer's pid, the attempt (``$GRIDML_ATTEMPT``, which the local
  and Slurm executors set) and the run of it (``$SLURM_RESTART_COUNT``: a job Slurm requeued
  runs the same attempt again); the controller judges a stall by that counter, never by mtimes;
- ``decision.json`` (written by the controller, replaced by rename): ``{"epoch": E, "stop":
  bool, "reason": ...}``, its early-stopping answer after epoch ``E``. A payload without an API
  reads it at each epoch end (:func:`read_decision`, from ``TrialCore.should_stop``).

Imports nothing of gridml (the payload runs without it); the controller imports the names and
the writers from here would create a dependency the wrong way, so gridml/live.py spells the same
file names (checked by tests/unit/test_live_files.py).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

PROGRESS = "progress.json"
DECISION = "decision.json"
DUMP = "dump.request"  # the controller asks every rank for its stacks (a stalled trial)
PROGRESS_EVERY_S = 2.0  # rank 0 rewrites progress.json at most this often (and at epoch ends)
# how long a payload without an API waits at an epoch end for the controller's decision on that
# epoch, once the controller has shown it answers this trial (a decision.json exists): the
# decisions then fall on the same epochs as over HTTP. GRIDML_DECISION_WAIT_S overrides it.
DECISION_WAIT_S = 60.0
ATTEMPT_VAR = "GRIDML_ATTEMPT"  # the trial's attempt number, set by the executor (1, 2, ...)


def attempt_number(environ: Any = os.environ) -> int | None:
    """This run's attempt (``$GRIDML_ATTEMPT``), None where the executor did not say."""
    try:
        n = int(environ.get(ATTEMPT_VAR, ""))
    except ValueError:
        return None
    return n if n >= 1 else None


def restart_count(environ: Any = os.environ) -> int:
    """Times Slurm requeued this job (``$SLURM_RESTART_COUNT``; 0 where unset)."""
    value = str(environ.get("SLURM_RESTART_COUNT", "0")).strip()
    return int(value) if value.isdigit() else 0


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """``obj`` into ``path`` atomically (a temporary file renamed over it): readers on other
    hosts see the old or the new content, never a torn one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


class Progress:
    """Rank 0's progress file: :meth:`batch` per training batch (cheap: a clock read unless the
    file is due), :meth:`epoch_start`/:meth:`epoch_end` around each epoch."""

    def __init__(self, trial_dir: Path, every_s: float = PROGRESS_EVERY_S) -> None:
        self.path = Path(trial_dir) / PROGRESS
        self.every_s = every_s
        self.epoch = 0
        self.batch_no = 0
        self.batches: int | None = None
        self.total = 0  # batches finished by this attempt: the counter the controller watches
        self.attempt = attempt_number()  # so a controller that first looks knows whose it is
        self.restart = restart_count()
        self._due = 0.0

    def epoch_start(self, epoch: int, batches: int | None) -> None:
        """Epoch ``epoch`` (1-based) begins, with ``batches`` training batches."""
        self.epoch, self.batch_no, self.batches = epoch, 0, batches
        self.write()

    def batch(self) -> None:
        self.batch_no += 1
        self.total += 1
        if time.monotonic() >= self._due:
            self.write()

    def epoch_end(self) -> None:
        self.write(done=True)

    def write(self, done: bool = False) -> None:
        self._due = time.monotonic() + self.every_s
        try:
            write_json(self.path, {"epoch": self.epoch, "batch": self.batch_no,
                                   "batches": self.batches, "total": self.total,
                                   "epoch_done": done, "time": time.time(), "pid": os.getpid(),
                                   "attempt": self.attempt, "restart": self.restart})
        except OSError:
            pass  # progress is advisory: a full or read-only disk must not end the training


def read_decision(trial_dir: Path, epoch: int, wait_s: float | None = None) -> tuple[bool, str]:
    """The controller's early-stopping decision for the trial after epoch ``epoch``.

    No ``decision.json``: no controller answers through the folder, go on. One about an earlier
    epoch: the controller follows this trial; wait (up to ``wait_s``) for its decision on this
    epoch, so the trial stops after the same epoch as it would over HTTP; on timeout, go on."""
    path = Path(trial_dir) / DECISION
    got = read_json(path)
    if got is None:
        return False, ""
    if wait_s is None:
        wait_s = float(os.environ.get("GRIDML_DECISION_WAIT_S", DECISION_WAIT_S))
    end = time.monotonic() + wait_s
    while not got.get("stop") and int(got.get("epoch") or 0) < epoch and time.monotonic() < end:
        time.sleep(0.1)
        got = read_json(path) or got
    return bool(got.get("stop")), str(got.get("reason") or "")


def write_decision(trial_dir: Path, epoch: int, stop: bool, reason: str) -> None:
    """The controller's side: its decision after epoch ``epoch`` (gridml/live.py writes the same
    content; this one serves the payload's tests and tools)."""
    write_json(Path(trial_dir) / DECISION, {"epoch": epoch, "stop": stop, "reason": reason,
                                            "time": time.time()})


def watch_dump_requests(trial_dir: Path, every_s: float = 1.0) -> None:
    """A daemon thread: when the controller writes a new ``dump.request`` into the trial's
    folder, every thread's stack goes to stderr (the log). This works where a signal cannot
    reach the ranks alone (on Slurm ``scancel --signal`` also ends the launchers first); a rank
    stuck in C code holding the GIL is left to the SIGUSR2 dump (entry.py)."""
    import faulthandler
    import sys
    import threading

    path = Path(trial_dir) / DUMP

    def loop() -> None:
        seen = read_json(path)
        while True:
            time.sleep(every_s)
            got = read_json(path)
            if got is not None and got != seen:
                seen = got
                print(f"gridml: stacks of pid {os.getpid()} (dump requested: stalled)",
                      file=sys.stderr, flush=True)
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)

    threading.Thread(target=loop, name="gridml-dump-watch", daemon=True).start()
