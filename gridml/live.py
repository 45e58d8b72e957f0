"""The controller's side of the live channel through the trial folders (the payload's side is
payloads/runtime/channel.py): what works where compute nodes cannot reach the controller's API
but share its runs folder (Slurm with the embedded server).

Each controller cycle (:meth:`LiveChannel.cycle`, from :class:`gridml.controller.Campaign`):

1. **ingest**: for every running trial, read what is new in its spool (``outputs/metrics.jsonl``)
   from the byte offset reached before: one ``stat`` when nothing changed, the new bytes only
   otherwise. A torn last line (no newline yet) is left for the next cycle. The offsets (with the
   file's inode: a resumed payload replaces the spool by rename) live in memory and in
   ``runs/<study>/live.json``, so a restarted controller does not re-read; re-reading anyway is
   harmless (the store is idempotent on (trial, epoch)). All the cycle's reports go to the store in
   one transaction. Latency from an epoch's end on the node to the store: at most one poll
   interval (``Campaign.poll_s``: 0.5 s locally, 2 s elsewhere) plus the shared filesystem's attribute cache.
2. **decide**: with ``search.early_stopping``, each trial whose curve grew gets the rule's answer
   (:func:`gridml.search.stopping.decide` on the curves of every trial of the study, as the API's
   should-stop computes them in gridml/server/searching.py) written to its ``decision.json``
   (written to a temporary file, renamed over it), ``{"epoch", "stop", "reason"}``; a payload
   without an API reads it at each epoch end and ends as ``pruned``, as over HTTP. Its first
   attempt gets a "go on" at epoch 0 before its job is submitted (:meth:`LiveChannel.announce`),
   so the payload asks from its first epoch on, however quickly it starts. A trial that
   `gridml stop` asked to stop (state ``stopping``, gridml/store/stopping.py) gets a stop
   decision instead (:meth:`LiveChannel.stop`, from ``Campaign._follow``), which no rule's
   answer replaces; the controller records it ``stopped`` when its job ends.
3. **stall** (:meth:`LiveChannel.stalled`, asked by the controller for each trial its executor
   says is running): ``progress.json``'s content (pid, epoch, batch counter) must change within
   ``backend.stall_timeout``; its modification time is never used (clocks differ across hosts).
   A stalled trial gets SIGUSR2 first (every rank dumps its stack to its log: faulthandler, set up
   in payloads/runtime/entry.py), then is killed, failed with ``stalled: no batch for N s``; its
   first stall does not use up a retry (it is retried once even with ``retries: 0``).

No inotify, no locks, no mtimes: only appends, renames and reads, which NFS and Lustre keep.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridml.errors import ConflictError, GridmlError
from gridml.layout import StudyPaths
from gridml.specmodel.model import parse_walltime
from gridml.store import EpochReport, Trial

log = logging.getLogger("gridml.live")
SPOOL = "metrics.jsonl"  # in a trial's outputs/ (payloads/runtime/spool.py)
DUMP_WAIT_S = 4.0  # between the stack-dump request and the kill (the watchers poll each 1 s)


def write_json(path: Path, obj: dict[str, Any]) -> None:
    """Atomically: a temporary file renamed over ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        got = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


@dataclass
class SpoolReader:
    """New complete lines of one append-only file, by byte offset; ``inode`` notices a file
    replaced by rename (a resumed payload drops the epochs it re-runs), which is read again."""

    path: Path
    inode: int = 0
    offset: int = 0

    def read_new(self) -> list[bytes]:
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        if st.st_ino != self.inode or st.st_size < self.offset:
            self.inode, self.offset = st.st_ino, 0
        if st.st_size == self.offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(st.st_size - self.offset)
        end = data.rfind(b"\n")
        if end < 0:
            return []  # only a torn line so far: next cycle
        self.offset += end + 1
        return [line for line in data[:end].split(b"\n") if line.strip()]


@dataclass
class _Watch:
    """What the stall check last saw of a trial: its attempt, progress key and since when."""

    attempt: int
    key: Any
    since: float
    checked: float = 0.0
    stale: Any = None  # the key at the attempt's first sight: an earlier attempt's progress
    restarts: int = 0  # the job's requeues when seen (a requeued job runs the attempt again)


@dataclass
class LiveChannel:
    """The live channel of one study's running trials (see the module docstring).

    ``store``: the campaign's store (``record_epochs`` when it has it, else ``record_epoch``);
    ``search``: the spec's search section as a dict (objective, direction, early_stopping);
    ``stall_timeout``: ``backend.stall_timeout``."""

    store: Any
    study_id: int
    paths: StudyPaths
    search: dict[str, Any]
    stall_timeout: str | int = "30m"
    readers: dict[int, SpoolReader] = field(default_factory=dict)  # by trial number
    curves: dict[int, dict[int, float]] = field(default_factory=dict)  # trial id -> epoch -> value
    decided: dict[int, int] = field(default_factory=dict)  # trial id -> epoch of the last decision
    stopping: set[int] = field(default_factory=set)  # trial ids given a `gridml stop` decision
    _curves_at: float | None = None
    _watch: dict[int, _Watch] = field(default_factory=dict)
    _state_dirty: bool = False

    def __post_init__(self) -> None:
        self.stall_s = float(parse_walltime(self.stall_timeout))
        saved = read_json(self.paths.live_state) or {}
        for number, (inode, offset) in (saved.get("spools") or {}).items():
            n = int(number)
            self.readers[n] = SpoolReader(self._spool(n), int(inode), int(offset))

    def _spool(self, number: int) -> Path:
        return self.paths.trial_outputs(number) / SPOOL

    # ---- one cycle ----------------------------------------------------------------------------
    def cycle(self, trials: Iterable[Trial]) -> int:
        """Ingest the new reports of ``trials`` (the running ones), then write the early-stopping
        decisions of those whose curves grew. Returns the number of reports read."""
        trials = list(trials)
        got = self.ingest(trials)
        if self.search.get("early_stopping"):
            self.decide(trials, {tid for tid, _ in got})
        self.save_state()
        return len(got)

    def ingest(self, trials: list[Trial]) -> list[tuple[int, EpochReport]]:
        items: list[tuple[int, EpochReport]] = []
        for trial in trials:
            reader = self.readers.get(trial.number)
            if reader is None:
                reader = self.readers[trial.number] = SpoolReader(self._spool(trial.number))
            before = (reader.inode, reader.offset)
            lines = reader.read_new()
            if (reader.inode, reader.offset) != before:
                self._state_dirty = True
            for line in lines:
                try:
                    items.append((trial.id, EpochReport.from_json(json.loads(line))))
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("trial %d: a line of %s is not an epoch report (%s): skipped",
                                trial.number, reader.path, exc)
        if items:
            self._record(items)
            metric = self.search.get("objective", "")
            for tid, report in items:
                self.curves.setdefault(tid, {})[report.epoch] = \
                    report.metrics.get(metric, math.nan)
        return items

    def _record(self, items: list[tuple[int, EpochReport]]) -> None:
        many: Callable[..., Any] | None = getattr(self.store, "record_epochs", None)
        results: list[Any] = []
        try:
            if many is not None:
                results = many(items)
        except Exception as exc:  # one bad report must not lose the others: one at a time
            log.warning("%d reports not stored together (%s): storing them one by one",
                        len(items), exc)
            many = None
        if many is None:
            for tid, report in items:
                try:
                    results.append(self.store.record_epoch(tid, report))
                except Exception as exc:  # (a report the store refuses is logged, not fatal)
                    results.append(exc)
        for (tid, report), result in zip(items, results):
            if isinstance(result, ConflictError):
                log.warning("trial id %d epoch %d: spool differs from the stored report: %s",
                            tid, report.epoch, result)
            elif isinstance(result, BaseException):
                log.warning("trial id %d epoch %d: not stored: %s", tid, report.epoch, result)

    def save_state(self) -> None:
        """The spools' offsets into ``live.json`` (only when they moved)."""
        if not self._state_dirty:
            return
        spools = {str(n): [r.inode, r.offset] for n, r in self.readers.items() if r.offset}
        try:
            write_json(self.paths.live_state, {"spools": spools})
            self._state_dirty = False
        except OSError as exc:
            log.warning("%s: not written: %s", self.paths.live_state, exc)

    def forget(self, trial: Trial) -> None:
        """The trial ended: its offset and stall watch are no longer needed in memory."""
        self._watch.pop(trial.id, None)
        self.stopping.discard(trial.id)

    # ---- `gridml stop` ---------------------------------------------------------------------------
    def stop(self, trial: Trial, reason: str) -> None:
        """`gridml stop` (gridml/store/stopping.py) asked ``trial`` to stop: a stop decision in
        its decision.json, as early stopping writes one (its payload ends after its current
        epoch, saves its model); written once, and no rule's answer replaces it."""
        if trial.id in self.stopping:
            return
        epoch = max(self.curves.get(trial.id, {}), default=trial.epochs_done)
        try:
            write_json(self.paths.decision(trial.number),
                       {"epoch": epoch, "stop": True, "reason": reason, "time": time.time()})
        except OSError as exc:
            log.warning("trial %d: stop decision not written: %s", trial.number, exc)
            return
        self.stopping.add(trial.id)
        log.info("trial %d: asked to stop (%s)", trial.number, reason)

    # ---- decisions ------------------------------------------------------------------------------
    def _load_curves(self) -> None:
        """Every trial's curve from the store, once (a restarted controller); then the curves
        grow from what each cycle ingests: every running trial's spool is read before its end is
        handled (``Campaign.step``), so no epoch of a local or Slurm trial is missed."""
        if self._curves_at is not None:
            return
        self._curves_at = time.monotonic()
        epochs = getattr(self.store, "study_epochs", None)
        if epochs is None:
            return
        metric = self.search.get("objective", "")
        for tid, reports in epochs(self.study_id).items():
            self.curves[tid] = {r.epoch: r.metrics.get(metric, math.nan) for r in reports}

    def announce(self, trial: Trial) -> None:
        """Before the trial's attempt is handed to its executor: the decision a cycle would
        write for it now (:meth:`decide`: a first attempt's "go on" at epoch 0), so its payload
        knows from its first epoch end that the controller answers through the folder and waits
        for that epoch's decision. Left to the next cycle, a job that starts and ends its first
        epochs before that cycle trains on without asking (seen on a loaded machine: a hopeless
        trial ran to its last epoch). A retry's decisions already made stand (decide skips a
        trial decided whose curve has not grown; a restarted controller decides on the stored
        curve)."""
        if self.search.get("early_stopping"):
            self.decide([trial], set())

    def decide(self, trials: list[Trial], grown: set[int]) -> None:
        """The rule's answer for each running trial whose curve grew, into its decision.json;
        a trial with none yet gets a "go on" at epoch 0, which tells its payload that the
        controller answers through the folder (the payload then waits for each epoch's)."""
        from gridml.search.stopping import decide  # the searchers' package (as the server's)

        rule = self.search["early_stopping"]
        self._load_curves()
        ordered: dict[int, list[float]] | None = None  # the curves as lists, built once
        for trial in trials:
            if trial.state == "stopping" or trial.id in self.stopping:
                continue  # `gridml stop` decided (LiveChannel.stop)
            if trial.id in self.decided and trial.id not in grown:
                continue
            mine = self.curves.get(trial.id, {})
            epoch = max(mine, default=0)
            if trial.id in self.decided and epoch <= self.decided[trial.id]:
                continue
            stop, reason = False, "no epoch yet"
            if epoch:
                if ordered is None:
                    ordered = {tid: [c[e] for e in sorted(c)] for tid, c in self.curves.items()}
                others = [c for tid, c in ordered.items() if tid != trial.id]
                stop, reason = decide(rule, ordered[trial.id], others,
                                      self.search.get("direction", "minimize"),
                                      metric=self.search.get("objective", "objective"))
            try:
                write_json(self.paths.decision(trial.number),
                           {"epoch": epoch, "stop": stop, "reason": reason, "time": time.time()})
            except OSError as exc:
                log.warning("trial %d: decision not written: %s", trial.number, exc)
                continue
            self.decided[trial.id] = epoch
            if stop:
                log.info("trial %d: stop after epoch %d (%s)", trial.number, epoch, reason)

    # ---- progress and stalls --------------------------------------------------------------------
    def progress(self, number: int) -> dict[str, Any] | None:
        """The payload's last progress.json of trial ``number`` (None: none yet)."""
        return progress_of(self.paths.trial(number))

    def stalled(self, trial: Trial, restarts: int = 0) -> str | None:
        """``stalled: no batch for N s`` when the trial's progress has not moved for
        ``stall_timeout`` (judged by progress.json's content only), else None. The clock starts
        at the attempt's first progress (what an earlier attempt left does not count). Progress
        this attempt had already written when the controller first looked at it (a busy submit
        host, a resumed controller, a trial that hung within seconds of its restart) starts it
        at that look: the file names its attempt (``$GRIDML_ATTEMPT``, which the local and
        Slurm executors set). Where it does not (a payload of an earlier version), a pid other
        than the one last seen of the attempt before is this attempt's (pids, not the file's
        times: the nodes' clocks are not the controller's), and with no earlier attempt seen
        what is there counts as an earlier attempt's. ``restarts``: the executor's count of
        the job's requeues (Slurm's restart count, ``TaskStatus.restarts``): a requeued job is
        the same attempt run again, judged like a new attempt (the file names its run,
        ``$SLURM_RESTART_COUNT``), so its time in the queue is no stall. The file is read at
        most every tenth of the timeout."""
        if self.stall_s <= 0:
            return None
        now = time.monotonic()
        w = self._watch.get(trial.id)
        if w is not None and now - w.checked < min(self.stall_s / 10, 30.0):
            return None
        p = self.progress(trial.number) or {}
        key = (p.get("pid"), p.get("epoch"), p.get("total"), p.get("epoch_done"), p.get("time"))
        if w is None or (w.attempt, w.restarts) != (trial.attempts, restarts):  # a new run
            attempt = p.get("attempt")
            if isinstance(attempt, int):
                ours = attempt == trial.attempts and p.get("restart", 0) == restarts
            else:  # no attempt in the file: tell it by the pid of the run before
                before = w.key if w is not None and (
                    w.attempt == trial.attempts - 1
                    or w.attempt == trial.attempts and w.restarts != restarts) else None
                ours = before is not None and None not in (before[0], p.get("pid")) \
                    and p.get("pid") != before[0]
            self._watch[trial.id] = _Watch(trial.attempts, key, now, now,
                                           stale=None if ours else key, restarts=restarts)
            return None
        w.checked = now
        if key != w.key:
            w.key, w.since = key, now
            return None
        if key == w.stale or now - w.since < self.stall_s:
            return None  # not started yet, or moving
        return f"stalled: no batch for {int(now - w.since)} s"

    def stop_stalled(self, executor: Any, handle: str, trial: Trial | None = None) -> None:
        """Every rank's stack into the log, then the kill: ``dump.request`` in the trial's folder
        (each rank's watcher thread dumps, payloads/runtime/channel.py) and the executor's
        ``dump`` (SIGUSR2 to the ranks, for a rank whose threads cannot run)."""
        if trial is not None:
            try:
                write_json(self.paths.trial(trial.number) / "dump.request",
                           {"time": time.time(), "attempt": trial.attempts})
            except OSError as exc:
                log.warning("trial %d: no dump request: %s", trial.number, exc)
        time.sleep(DUMP_WAIT_S)  # first the watchers (on Slurm the signal ends the launchers)
        dump = getattr(executor, "dump", None)
        try:
            if dump is not None:
                dump(handle)
                time.sleep(1.0)
        except GridmlError as exc:
            log.warning("%s: no stack dump signal: %s", handle, exc)
        executor.kill(handle)

    def first_stall(self, trial: Trial) -> bool:
        """Count the trial's stalls (``stalled`` in its folder); True for its first."""
        marker = self.paths.trial(trial.number) / "stalled"
        try:
            n = int(marker.read_text().strip())
        except (OSError, ValueError):
            n = 0
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(n + 1))
        return n == 0


def progress_of(trial_dir: Path) -> dict[str, Any] | None:
    """A trial folder's progress.json (payloads/runtime/channel.py), None when there is none."""
    return read_json(trial_dir / "progress.json")


def describe_progress(p: dict[str, Any] | None) -> str:
    """``epoch 3, batch 120/266`` (for `gridml status`); empty without progress."""
    if not p or not p.get("epoch"):
        return ""
    of = f"/{p['batches']}" if p.get("batches") else ""
    return f"epoch {p['epoch']}, batch {p.get('batch', 0)}{of}"
