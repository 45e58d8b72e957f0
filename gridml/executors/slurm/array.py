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
attempt's exit code file, with the same mapping as one job per trial
(:mod:`gridml.executors.slurm.follow`), its lost-node fast path included: a running task one of
whose nodes Slurm sees DOWN/NOT_RESPONDING is cancelled and resubmitted at once, no retry used.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from gridml.errors import ExecutorError
from gridml.executors.base import TaskRequest, TaskStatus
from gridml.executors.journal import write_json
from gridml.executors.slurm import cli, journal
from gridml.executors.slurm import render_pack as rp
from gridml.executors.slurm.follow import Handles, NodeWatch, left_queue, trial_status

log = logging.getLogger("gridml.executors.slurm")

PREFIX = "slurm-array:"
CACHE_S = 1.0


@dataclass
class Held:
    key: str
    workdir: Path
    attempt: int


class Arrays:
    """The arrayed trials of one :class:`~gridml.executors.slurm.executor.SlurmExecutor`."""

    def __init__(self, folder: Path | None, nodes: NodeWatch | None = None) -> None:
        self._handles = Handles(PREFIX, folder / "array" if folder else None)
        self._nodes = nodes or NodeWatch()  # the lost-node fast path, as for one job per trial
        self._held: list[Held] = []
        self._seen: dict[str, tuple[float, dict[int, cli.JobInfo]]] = {}
        self.sbatch_calls = 0

    def submit(self, req: TaskRequest, script: str) -> str:
        key, known = self._handles.add(req, "array_shape")
        if known is not None:
            self._hold(key, known)
            return PREFIX + key
        (rp.attempt_dir(req) / "job.sh").write_text(script)
        journal.update_attempt(req.workdir, req.attempt, array_shape=rp.alloc_shape(req),
                               array_opts=rp.array_own_options(req), study=req.study,
                               throttle=rp.array_throttle(req), killed=None, job_id=None,
                               array_folder=None, task=None, state="HELD")
        self._hold(key, journal.attempt(req.workdir, req.attempt))
        return PREFIX + key

    def _hold(self, key: str, entry: dict[str, object]) -> None:
        if entry.get("job_id") or any(h.key == key for h in self._held):
            return
        workdir, attempt = self._handles.locate(key)
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
        workdir, attempt = self._handles.locate(key)
        if (lost := self._handles.lost(key)) is not None:
            return lost
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
            if killed:
                return TaskStatus("killed", f"Slurm array task {job_id}_{task}: cancelled on "
                                  "request (scancel)")
            status = trial_status(info, run)
            if info.state in ("RUNNING", "COMPLETING"):  # a node lost under it: at once
                status = self._handles.settle(key, self._nodes.judge(status, info, run,
                                                                     f"{job_id}_{task}"))
            if entry.get("state") != info.state:
                journal.update_attempt(workdir, attempt, state=info.state, nodes=info.nodes)
            return status
        if killed:
            return TaskStatus("killed", f"Slurm array task {job_id}_{task}: cancelled on request")
        return left_queue(f"Slurm array task {job_id}_{task}", run)

    def kill(self, key: str) -> None:
        found = self._handles.find(key)
        if found is None:
            return
        workdir, attempt = found
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
