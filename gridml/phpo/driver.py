"""``backend.executor: phpo``: the whole study as one PanDA HPO task, followed by a study driver.

iDDS, not gridml, proposes the points, so the campaign hands each cycle to
:meth:`PhpoDriver.step` (through the :class:`~gridml.executors.base.StudyDriver` seam, chosen by
:mod:`gridml.assemble`) instead of asking its searcher. The first cycle renders the study's task
(:mod:`gridml.phpo.task`) from the campaign's plan of a trial without a point and submits it
through a :class:`PandaClient`, journaled in ``<runs>/<study>/phpo/panda.json`` as PanDA trials'
tasks are, so a restarted controller follows the same task and never submits a second one (a
resubmission the journal missed is PanDA's "duplicate task" answer, followed too). Every cycle
then reads the evaluation jobs' metrics tarballs in the task's output dataset: each becomes a
trial of the study (its point and outcome from ``evaluation.json``, its epochs from
``metrics.jsonl``, its objective by the rule every trial's is computed with, the tarball, which
also holds the trained model, as its stored output: ``gridml fetch`` unpacks it, see
:mod:`gridml.executors.panda.phpo_outputs`), or completes the trial ``gridml evaluate --server``
already made there. The campaign ends when the task ends. Ctrl-C leaves the task running at
PanDA: ``gridml resume`` follows it again.

``gridml submit --dry-run`` takes the same path with a :class:`RenderingClient`: it keeps the
task parameters it is handed and submits nothing (JEDI then knows no such task: the driver waits).
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from gridml.data.base import DataManager, FileInfo
from gridml.errors import DuplicateTaskError, ExecutorError, GridmlError, NotFoundError
from gridml.executors.base import CampaignView
from gridml.executors.panda import client as pc
from gridml.executors.panda import journal, phpo_outputs
from gridml.executors.panda.outputs import task_files
from gridml.executors.panda.render import output_items
from gridml.executors.panda.request import resolve_nickname
from gridml.phpo.task import render_phpo
from gridml.store import CampaignStore, Trial

log = logging.getLogger("gridml.phpo")

EVALUATION = phpo_outputs.EVALUATION  # what gridml evaluate packs into the tarball first
OVER = ("done", "finished", "failed", "broken", "aborted", "exhausted")
REGISTER_GRACE_S = 3600.0  # a new task is in DEFT's table only, unknown to JEDI, this long at most


class PandaClient(Protocol):
    """What the driver asks of PanDA (panda-client, or the dry run's renderer)."""

    def nickname(self, site: dict[str, Any]) -> str: ...
    def put_file(self, path: Path) -> str: ...  # the sandbox into PanDA's cache -> its name there
    def submit(self, params: dict[str, Any]) -> tuple[int, str]: ...  # -> (jediTaskID, message)
    def task_status(self, task_id: int) -> str: ...
    def task_params(self, task_id: int) -> dict[str, Any]: ...
    def server_url(self) -> str: ...


class PandaClientCalls:
    """The real panda-client (:mod:`gridml.executors.panda.client`)."""

    def nickname(self, site: dict[str, Any]) -> str:
        return resolve_nickname(site)

    def put_file(self, path: Path) -> str:
        return pc.put_file(str(path))

    def submit(self, params: dict[str, Any]) -> tuple[int, str]:
        return pc.submit(params)

    def task_status(self, task_id: int) -> str:
        return pc.task_status(task_id)

    def task_params(self, task_id: int) -> dict[str, Any]:
        return pc.task_params(task_id)

    def server_url(self) -> str:
        return pc.server_url()


class RenderingClient:
    """The dry run's client: keeps the task parameters it is handed (``rendered``), uploads and
    submits nothing; JEDI knows none of its tasks."""

    DRY_TASK_ID = 0

    def __init__(self) -> None:
        self.rendered: list[dict[str, Any]] = []

    def nickname(self, site: dict[str, Any]) -> str:
        return resolve_nickname(site, dry_run=True)

    def put_file(self, path: Path) -> str:
        return path.name  # the name it would have in PanDA's cache (named by its content)

    def submit(self, params: dict[str, Any]) -> tuple[int, str]:
        self.rendered.append(params)
        return self.DRY_TASK_ID, "dry run: nothing was submitted"

    def task_status(self, task_id: int) -> str:
        raise NotFoundError(f"dry run: task {task_id} was not submitted")

    def task_params(self, task_id: int) -> dict[str, Any]:
        raise NotFoundError(f"dry run: task {task_id} was not submitted")

    def server_url(self) -> str:
        return "(dry run)"


class PhpoDriver:
    """One HPO task per study, followed each cycle (see the module docstring)."""

    name = "phpo"
    remote = True  # the evaluation jobs stage their inputs themselves

    def __init__(self, data: DataManager, client: PandaClient, journal: Path | None = None) -> None:
        self._data = data
        self._client = client
        self._journal = journal  # folder: <task id>.json (the task's parameters)
        self._task: tuple[int, dict[str, Any]] | None = None

    def close(self) -> None:
        self._task = None  # the task goes on at PanDA: gridml resume follows it

    def step(self, campaign: CampaignView) -> bool:
        """Submit the study's task once, record its finished evaluations as trials; True when
        the task is over and every evaluation it left is recorded."""
        workdir = campaign.paths.phpo
        task_id, params = self._task or self._submitted(campaign, workdir)
        self._task = (task_id, params)
        try:
            status = self._client.task_status(task_id)
        except NotFoundError as exc:
            noted = journal.read(workdir) or {}
            age = time.time() - float(noted.get("submitted_at") or time.time())
            if age < REGISTER_GRACE_S:
                return False
            raise ExecutorError(f"{exc}; JEDI still does not know it {age / 60:.0f} min after "
                                "its submission") from None
        except ExecutorError as exc:  # the server is down: PanDA keeps the task, wait
            log.warning("phpo task %d: %s", task_id, exc)
            return False
        try:
            self._harvest(campaign, task_id, params)
        except GridmlError as exc:  # the data store is unreachable: the next cycle tries again
            log.warning("phpo task %d: evaluations not read yet: %s", task_id, exc)
            return False
        if status in OVER:
            log.info("phpo task %d is %s", task_id, status)
            return True
        return False

    def _submitted(self, campaign: CampaignView, workdir: Path) -> tuple[int, dict[str, Any]]:
        """The study's task: the journaled one, else submitted now (and journaled)."""
        noted = journal.read(workdir)
        if noted and not noted.get("killed"):
            task_id = int(noted["jediTaskID"])
            kept = journal.read_task(self._journal, task_id) if self._journal else None
            return task_id, (kept[0] if kept else self._client.task_params(task_id))
        req = campaign.template_request()
        params = render_phpo(req, self._client.nickname(req.site), upload=self._client.put_file)
        try:
            task_id, message = self._client.submit(params)
            log.info("study %s: phpo task: %s", req.study, message)
        except DuplicateTaskError as dup:  # submitted before the journal was written
            task_id = int(dup.task_id)  # type: ignore[attr-defined]
            log.warning("study %s: %s: following the existing task", req.study, dup)
        journal.record_task(workdir, params["taskName"], task_id, 1, self._client.server_url())
        if self._journal is not None:
            journal.write_task(self._journal, task_id, params, workdir)
        return task_id, params

    def _harvest(self, campaign: CampaignView, task_id: int, params: dict[str, Any]) -> None:
        known = {t.external_id for t in campaign.store.list_trials(campaign.study.id)
                 if t.external_id}
        for item in output_items(params):
            for f in task_files(self._data, item["dataset"], item["value"], task_id):
                handle = f"phpo:{task_id}:{f.did.name}"
                if handle not in known:
                    self._record(campaign, handle, f, campaign.paths.phpo_evaluations / f.did.name)

    def _record(self, campaign: CampaignView, handle: str, f: FileInfo, folder: Path) -> None:
        """One evaluation job's tarball -> a trial of the study (created, or the one
        ``gridml evaluate --server`` made), with its epochs, objective and stored output."""
        store = campaign.store
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".fetch-") as tmp:
            for path in self._data.download(str(f.did), Path(tmp)):
                phpo_outputs.read_records(Path(path), folder)  # the model stays in the store
        try:
            ev = json.loads((folder / EVALUATION).read_text())
        except (OSError, ValueError):
            log.warning("%s: no %s in %s (not made by gridml evaluate): skipped", handle,
                        EVALUATION, f.did)
            return
        trial = _trial_for(store, campaign.study.id, ev)
        trial = store.update_trial(trial.id, external_id=handle, attempts=max(1, trial.attempts),
                                   started=trial.started or _now())
        campaign.ingest_spool(trial, folder / "metrics.jsonl")
        scores = campaign.scores(trial)  # the rule every trial's objective follows
        objective = scores.pop("objective")
        outputs = [{"did": str(f.did), "name": f.did.name, "bytes": f.bytes, "adler32": f.adler32}]
        if ev.get("status") == 0 and objective is not None:
            store.update_trial(trial.id, state="completed", objective=objective, finished=_now(),
                               outputs=outputs, error=None, **scores)
            log.info("phpo: trial %d (%s) %s = %.6g", trial.number, handle,
                     campaign.spec.search.objective, objective)
        else:
            error = ev.get("message") or "the evaluation failed"
            if ev.get("status") == 0:  # trained, but no usable objective in its epochs
                error = f"no {campaign.spec.search.objective!r} reported by the evaluation"
            store.update_trial(trial.id, state="failed", finished=_now(), outputs=outputs,
                               error=str(error))


def _trial_for(store: CampaignStore, study_id: int, ev: dict[str, Any]) -> Trial:
    hparams = dict(ev.get("hparams") or {})
    trials = store.list_trials(study_id)
    if ev.get("trial_id") is not None:  # gridml evaluate --server made it in this store
        same = [t for t in trials if t.id == ev["trial_id"] and not t.external_id]
        if same:
            return same[0]
    # a trial recorded before a crash, its handle not yet written
    same = [t for t in trials if t.source == "phpo" and not t.external_id and t.hparams == hparams]
    return same[0] if same else store.create_trial(study_id, hparams, source="phpo", state="running")


def _now() -> datetime:
    return datetime.now(UTC)
