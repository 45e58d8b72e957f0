"""Job arrays (``slurm.array: true``): the trials a controller cycle submits, as one ``sbatch``.

``submit`` writes the attempt's batch script (``job.sh``, the same as one job per trial) and
holds the attempt back; the cycle's next call (``poll`` of any trial, or ``close``) submits
everything held back as one array per shape (:func:`~gridml.executors.slurm.render_pack.
array_script`: ``sbatch --array=0-<n-1>[%<slurm.array_throttle>]``), task ``i`` running the
attempt on line ``i+1`` of the batch's ``tasks.txt``. Handles: ``slurm-array:<study>.trial-NNNN.
a<attempt>``; the trial's journal holds the batch folder, then the array job id and task index.

Nothing twice: the batch's folder (``runs/<study>/.slurm/array-<time>``) is noted in every
attempt's journal before ``sbatch`` runs; a controller killed before the job id was written finds
the array by its name and comment (``gridml-array-<time>``), else submits that batch again.
Task states come from ``squeue -r`` (one call per array and second), then ``sacct``, then the
attempt's exit code file, with the same mapping as one job per trial.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gridml.errors import ExecutorError
from gridml.executors.base import TaskRequest, TaskStatus
from gridml.executors.journal import HandleIndex, write_json
from gridml.executors.logs import last_error_line, tail
from gridml.executors.slurm import cli, journal
from gridml.executors.slurm import render_pack as rp
from payloads.runtime.errors import CONTINUE_CODE

log = logging.getLogger("gridml.executors.slurm")

PREFIX = "slurm-array:"
CACHE_S = 1.0


@dataclass
class Held:
    key: str
    workdir: Path
    attempt: int


def handle_key(req: TaskRequest) -> str:
    return f"{req.study}.trial-{req.trial_number:04d}.a{req.attempt}"


class Arrays:
    """The arrayed trials of one :class:`~gridml.executors.slurm.executor.SlurmExecutor`."""

    def __init__(self, folder: Path | None,
                 judge: Callable[[cli.JobInfo, Path], TaskStatus]) -> None:
        self._judge = judge  # a job state -> the trial's (executor.trial_status)
        self._index = HandleIndex(folder / "array" if folder else None)
        self._held: list[Held] = []
        self._where: dict[str, tuple[Path, int]] = {}
        self._seen: dict[str, tuple[float, dict[int, cli.JobInfo]]] = {}
        self.sbatch_calls = 0

    def _locate(self, key: str) -> tuple[Path, int]:
        if key not in self._where:
            doc = self._index.read(key)
            if not doc:
                raise ExecutorError(f"{PREFIX}{key}: not in this executor's journal",
                                    hint="poll it from the campaign that submitted it")
            self._where[key] = (Path(doc["workdir"]), int(doc["attempt"]))
        return self._where[key]

    def submit(self, req: TaskRequest, script: str) -> str:
        key = handle_key(req)
        self._where[key] = (req.workdir, req.attempt)
        self._index.write_once(key, {"workdir": str(req.workdir), "attempt": req.attempt})
        entry = journal.attempt(req.workdir, req.attempt)
        if entry.get("array_shape") and not entry.get("killed"):
            self._hold(key, entry)
            return PREFIX + key
        run = rp.attempt_dir(req)
        (run / "job.sh").write_text(script)
        journal.update_attempt(req.workdir, req.attempt, array_shape=rp.alloc_shape(req),
                               array_opts=rp.array_own_options(req), study=req.study,
                               throttle=rp.array_throttle(req), killed=None, job_id=None,
                               array_folder=None, task=None, state="HELD")
        self._hold(key, journal.attempt(req.workdir, req.attempt))
        return PREFIX + key

    def _hold(self, key: str, entry: dict[str, object]) -> None:
        if entry.get("job_id") or any(h.key == key for h in self._held):
            return
        workdir, attempt = self._locate(key)
        self._held.append(Held(key, workdir, attempt))

    def flush(self) -> None:
        """Submit what is held back: one array per shape."""
        groups: dict[str, list[Held]] = {}
        for h in self._held:
            entry = journal.attempt(h.workdir, h.attempt)
            groups.setdefault(str(entry.get("array_folder") or entry.get("array_shape")), []).append(h)
        for group in groups.values():
            self._submit_batch(group)
            self._held = [h for h in self._held if h not in group]

    def _submit_batch(self, group: list[Held]) -> None:
        first = journal.attempt(group[0].workdir, group[0].attempt)
        folder = Path(str(first["array_folder"])) if first.get("array_folder") else \
            group[0].workdir.parent / ".slurm" / f"array-{time.time_ns():x}"
        study = str(first["study"])
        if first.get("array_folder"):  # a batch noted but maybe submitted: find it
            found = [j for j in cli.queue(name=rp.array_name(study)).values()
                     if j.comment == rp.array_comment(folder)]
            if found:
                self._adopt(group, found[0].job_id.split("_")[0], folder)
                return
        folder.mkdir(parents=True, exist_ok=True)
        n = len(group)
        throttle = first.get("throttle")
        (folder / "tasks.txt").write_text("".join(f"{h.workdir / f'attempt-{h.attempt}'}\n" for h in group))
        script = folder / "array.sh"
        script.write_text(rp.array_script(study, [str(o) for o in first["array_opts"]],  # type: ignore[attr-defined]
                                          folder, n, int(throttle) if throttle else None))  # type: ignore[call-overload]
        for h in group:
            journal.update_attempt(h.workdir, h.attempt, array_folder=str(folder), submitting=journal.now())
        job_id = cli.submit_array(script, rp.array_range(n, int(throttle) if throttle else None))  # type: ignore[call-overload]
        self.sbatch_calls += 1
        log.info("job array %s: %d trials (%s)", job_id, n, folder)
        self._adopt(group, job_id, folder)

    def _adopt(self, group: list[Held], job_id: str, folder: Path) -> None:
        write_json(folder / "array.json", {"job_id": job_id, "tasks": [h.key for h in group]})
        for i, h in enumerate(group):
            journal.update_attempt(h.workdir, h.attempt, job_id=job_id, task=i, state="PENDING",
                                   submitted_at=journal.now())

    def _tasks(self, job_id: str) -> dict[int, cli.JobInfo]:
        when, tasks = self._seen.get(job_id, (0.0, {}))
        if time.monotonic() - when > CACHE_S:
            tasks = cli.array_tasks(job_id)
            self._seen[job_id] = (time.monotonic(), tasks)
        return tasks

    def poll(self, key: str) -> TaskStatus:
        workdir, attempt = self._locate(key)
        entry = journal.attempt(workdir, attempt)
        killed = bool(entry.get("killed"))
        try:
            if not entry.get("job_id") and not killed:
                self._hold(key, entry)
                self.flush()
                entry = journal.attempt(workdir, attempt)
            elif self._held:
                self.flush()
            job_id, task = str(entry.get("job_id") or ""), int(entry.get("task") or 0)
            if not job_id:
                return TaskStatus("killed" if killed else "submitted", f"{PREFIX}{key}: not submitted")
            info = self._tasks(job_id).get(task)
        except ExecutorError as exc:
            log.warning("%s%s: %s", PREFIX, key, exc)
            return TaskStatus("unknown", str(exc))
        run = workdir / f"attempt-{attempt}"
        if info is None:
            info = cli.step_accounting(job_id).get(f"{job_id}_{task}")
        if info is not None:
            status = self._judge(info, run) if not killed else \
                TaskStatus("killed", f"Slurm array task {job_id}_{task}: cancelled on request (scancel)")
            if entry.get("state") != info.state:
                journal.update_attempt(workdir, attempt, state=info.state, nodes=info.nodes)
            return status
        if killed:
            return TaskStatus("killed", f"Slurm array task {job_id}_{task}: cancelled on request")
        try:
            code: int | None = int((run / "exit_code").read_text().strip())
        except (OSError, ValueError):
            code = None
        log_tail = tail(run / "payload.log")
        if code == 0:
            return TaskStatus("completed", f"Slurm array task {job_id}_{task} ended (exit code 0)")
        if code == CONTINUE_CODE:  # checkpointed on Slurm's warning: continued, no retry used
            return TaskStatus("failed", f"Slurm array task {job_id}_{task}: the trial checkpointed "
                              "and left to be continued", log_tail, continuation=True)
        if code is not None:
            last = last_error_line(log_tail)
            return TaskStatus("failed", f"Slurm array task {job_id}_{task}: the payload exited with "
                              f"code {code}" + (f": {last}" if last else ""), log_tail)
        return TaskStatus("failed", f"Slurm array task {job_id}_{task} is gone from the queue without "
                          "an exit code and this site keeps no accounting (sacct)", log_tail)

    def kill(self, key: str) -> None:
        try:
            workdir, attempt = self._locate(key)
        except ExecutorError as exc:
            log.error("%s%s: %s", PREFIX, key, exc)
            return
        self._held = [h for h in self._held if h.key != key]
        entry = journal.attempt(workdir, attempt)
        if entry.get("job_id"):
            try:
                cli.cancel(f"{entry['job_id']}_{entry.get('task') or 0}")
            except ExecutorError as exc:
                log.error("%s%s: could not be cancelled, it may still run: %s", PREFIX, key, exc)
        journal.update_attempt(workdir, attempt, killed=journal.now())

    def close(self) -> None:
        """What is held back is submitted (the controller's Ctrl-C killed its trials first)."""
        if self._held:
            try:
                self.flush()
            except ExecutorError as exc:
                log.error("job array not submitted: %s", exc)
