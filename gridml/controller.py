"""The campaign loop: ask -> plan -> submit -> poll -> finalize -> tell, until the budget is spent.

Nothing here is kept only in memory: the searcher is rebuilt from the store every cycle, a
trial's submission is recorded before the executor is called, and executors' ``submit`` is
idempotent per attempt, so a controller killed at any point and restarted (``gridml resume``)
carries on without losing a metric or submitting a trial twice.

A study whose own service proposes the points (phpo) has a study driver instead of an executor
(:class:`~gridml.executors.base.StudyDriver`, chosen by :mod:`gridml.assemble`): each cycle is the
driver's, which sees the campaign only as a :class:`~gridml.executors.base.CampaignView`.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gridml import planner
from gridml.data import open_data_manager
from gridml.data.base import DataManager, FileInfo
from gridml.errors import (ConflictError, GridmlError, NotFoundError, PayloadError, SpecError,
                           UsageError)
from gridml.executors.base import Executor, StudyDriver, TaskRequest, TaskStatus
from gridml.executors.failures import repeated_failure
from gridml.layout import RunsLayout, StudyPaths
from gridml.live import LiveChannel
from gridml.search.study import propose
from gridml.spec import LoadedSpec, Spec, parse_walltime
from gridml.store import (
    ACTIVE_STATES,
    CampaignStore,
    EpochReport,
    MetricsStore,
    Study,
    Trial,
)
from gridml.store.best import diverged, scores_of
from gridml.store.stopping import STOPPED, stop_now, stop_trial

log = logging.getLogger("gridml.controller")
# search.algorithm external: how long a campaign whose trials are all done waits for its
# external optimizer to close the study (it reads the last results first) before it ends
EXTERNAL_GRACE_S = 60.0
# the trial states the controller follows (their executor's task runs)
FOLLOWED = ("submitted", "running", "stopping")
# what a trial leaves in its outputs folder that goes into the study's output dataset
OUTPUT_SUFFIXES = (".keras", ".h5", ".pt", ".onnx", ".png", ".jsonl", ".json", ".py")


def now() -> datetime:
    return datetime.now(UTC)


def loaded_from_study(study: Study) -> LoadedSpec:
    """The campaign's spec as stored with the study (paths already absolute)."""
    spec = Spec.model_validate({k: v for k, v in study.spec.items() if not k.startswith("x_")})
    model = Path(spec.payload.model)
    if not model.is_file():
        raise NotFoundError(f"study {study.name}: model file {model} is gone",
                            hint="restore it, or submit the spec again under a new name")
    return LoadedSpec(spec=spec, path=Path(f"<study {study.name}>"), model_path=model)


def data_manager_for(spec: Spec) -> DataManager:
    """The campaign's data backend, writing outputs where the spec's output section says."""
    life = spec.output.lifetime
    return open_data_manager(spec.backend.data, rse=spec.output.rse,
                             lifetime=parse_walltime(life) if life is not None else None)


def ensure_study(store: MetricsStore, loaded: LoadedSpec) -> Study:
    """The study for this spec: created, or the existing one if the spec is the same campaign."""
    try:
        study = store.get_study(loaded.spec.name)
    except NotFoundError:
        return store.create_study(loaded.spec.name, loaded.resolved(), loaded.hash)
    check_same_campaign(study, loaded)
    # the same campaign with other budget or backend fields (max_trials raised, then submitted
    # again): the stored spec is the one it now runs with (`gridml status` shows it)
    spec = {**{k: v for k, v in study.spec.items() if k.startswith("x_")}, **loaded.resolved()}
    if spec != study.spec:
        study = store.update_study_spec(study.id, spec, loaded.hash)
    return study


def check_same_campaign(study: Study, loaded: LoadedSpec) -> None:
    """SpecError when ``study`` (of the same name) was made from another spec."""
    if study.spec_hash != loaded.hash:
        raise SpecError(f"{loaded.path}: name: study {study.name!r} already exists with a different "
                        f"spec; give this campaign a new name, or `gridml resume {study.name}`")


DEFAULT_POLL_S = 2.0  # a campaign's cycle when its executor names none


@dataclass
class Campaign:
    """``executor``: runs each trial the searcher proposes; ``driver`` instead: a study driver
    (phpo) whose service proposes and runs the points (``executor`` is then None)."""

    loaded: LoadedSpec
    store: CampaignStore
    executor: Executor | None
    data: DataManager
    runs_dir: Path
    api_url: str | None = None
    # seconds between cycles; None: the executor's ``poll_s`` (the local one: 0.5 s, a cycle
    # reads a few files), else DEFAULT_POLL_S (a cycle asks a batch system or a grid service)
    poll_s: float | None = None
    on_cycle: Callable[[Study, list[Trial]], None] | None = None
    driver: StudyDriver | None = None
    study: Study = field(init=False)
    _inputs: dict[str, list[FileInfo]] = field(init=False, default_factory=dict)
    _handles: dict[int, str] = field(init=False, default_factory=dict)
    _exhausted: bool = field(init=False, default=False)  # the searcher has nothing new left
    _done_at: float | None = field(init=False, default=None)  # external: all trials finished
    _cancelled: set[int] = field(init=False, default_factory=set)  # `gridml stop --now` sent
    # backend.max_same_failures trials failed with one error: why the campaign stopped
    stopped_by: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if (self.executor is None) == (self.driver is None):
            raise UsageError("a campaign runs its trials with an executor or a study driver "
                             "(one of the two)")
        if self.poll_s is None:
            self.poll_s = float(getattr(self.executor, "poll_s", DEFAULT_POLL_S))
        self.study = ensure_study(self.store, self.loaded)
        self.spec = self.loaded.spec
        self.paths: StudyPaths = RunsLayout(self.runs_dir).study(self.study.name)
        # spools read while trials run, decisions and stalls through the trial folders
        self.live = LiveChannel(self.store, self.study.id, self.paths,
                                self.spec.search.model_dump(mode="json"),
                                self.spec.backend.stall_timeout)
        # silence is judged only over the time this controller listened: while it was down (and
        # its API with it) no trial could report, so downtime is no evidence of a hang
        self._listening_since = now()

    # ---- the loop -------------------------------------------------------------------------
    def run(self) -> Study:
        """Drive the campaign to its end; Ctrl-C stops every trial and leaves it resumable.
        A study stopped by `gridml stop` ends ``stopped`` (`gridml resume` carries it on)."""
        # (a closed study stays closed: resume only drains it; a stopping one goes on stopping)
        if self.store.get_study(self.study.id).state not in ("closed", "stopping"):
            self.store.set_study_state(self.study.id, "running")
        try:
            while not self.step():
                time.sleep(self.poll_s or 0.0)
        except KeyboardInterrupt:
            self.interrupt()
            raise
        if self.stopped_by is not None:  # the same error again and again: one line, exit 1
            self.store.set_study_state(self.study.id, "failed")
            raise PayloadError(self.stopped_by, hint=f"fix what it names and submit again under "
                               f"a new name; see `gridml status {self.study.name}`")
        if self.store.get_study(self.study.id).state not in ("stopping", "stopped"):
            self.store.set_study_state(self.study.id, "finished")
        self.study = self.store.get_study(self.study.id)  # (its state as it ended)
        return self.study

    def step(self) -> bool:
        """One cycle; True when the campaign is over."""
        if self.driver is not None:  # the study's own service proposes the points (phpo: iDDS)
            done = self.driver.step(self)
            if self.on_cycle:
                self.on_cycle(self.study, self.store.list_trials(self.study.id))
            return done
        trials = self.store.list_trials(self.study.id)
        # `gridml stop STUDY` (gridml/store/stopping.py): every trial started since is asked too
        stopping = self.store.get_study(self.study.id).state == "stopping"
        if stopping and any(t.state in ("queued", "submitted", "running") for t in trials):
            for t in trials:
                stop_trial(self.store, t)
            trials = self.store.list_trials(self.study.id)
        following = [t for t in trials if t.state in FOLLOWED]
        if not self._remote:  # the live channel: new epochs and decisions (gridml/live.py)
            self.live.cycle(following)
        changed = [self._follow(trial) for trial in following]
        if any(changed):  # (an idle cycle reads the trials once)
            trials = self.store.list_trials(self.study.id)
        if self.stopped_by is None:
            self.stopped_by = self.same_failures(trials)
        if self.stopped_by is not None:  # no new trial; the running ones end (none is killed)
            if self.on_cycle:
                self.on_cycle(self.study, trials)
            return not any(t.state in FOLLOWED for t in trials)
        if not stopping:  # a stopping study takes no new trials
            if self._fill_slots(trials):
                trials = self.store.list_trials(self.study.id)
        if self.on_cycle:
            self.on_cycle(self.study, trials)
        active = [t for t in trials if t.state in ACTIVE_STATES]
        # search.algorithm external proposes nothing and is never exhausted: the campaign waits
        # for enqueued points until max_trials are done, or until the external optimizer closes
        # the study (POST /api/v1/studies/{study}/close: what is queued or running still runs)
        if active:
            return False
        if stopping:  # its last trial ended: stopped (`gridml resume` carries it on)
            self.store.set_study_state(self.study.id, "stopped")
            return True
        if self._closed():
            return True
        done = len(trials) >= self.spec.search.max_trials or self._exhausted
        if done and self.spec.search.algorithm == "external":
            # the external optimizer has yet to read the last results (and close the study):
            # the API stays up for it a while
            self._done_at = self._done_at or time.monotonic()
            return time.monotonic() - self._done_at > EXTERNAL_GRACE_S
        return done

    def _closed(self) -> bool:
        return self.store.get_study(self.study.id).state == "closed"

    def same_failures(self, trials: list[Trial]) -> str | None:
        """Why the campaign must stop: ``backend.max_same_failures`` of its trials failed with
        the same error (gridml.executors.failures.signature), else None."""
        limit = self.spec.backend.max_same_failures
        same = repeated_failure((t.error for t in trials if t.state == "failed"), limit)
        if same is None:
            return None
        line, n = same
        return (f"study {self.study.name} stopped: {n} trials failed with the same error "
                f"(backend.max_same_failures: {limit}): {line}")

    # ---- proposing and submitting ---------------------------------------------------------
    def _fill_slots(self, trials: list[Trial]) -> bool:
        """Submit queued trials and new points into the free slots; True if any was."""
        running = [t for t in trials if t.state in FOLLOWED]  # (a stopping trial holds its slot)
        free = self.spec.search.parallel - len(running)
        queued = [t for t in trials if t.state == "queued"]
        for trial in queued[:max(free, 0)]:
            self.submit(trial)
        changed = bool(queued[:max(free, 0)])
        free -= min(len(queued), max(free, 0))
        budget = self.spec.search.max_trials - len(trials)
        if free <= 0 or budget <= 0 or self._exhausted:
            return changed
        for point in self.propose(min(free, budget), trials):
            self.submit(self.store.create_trial(self.study.id, point))
            changed = True
        return changed

    def propose(self, n: int, trials: list[Trial]) -> list[dict[str, Any]]:
        """Rebuild the searcher from the stored observations and ask it for ``n`` points."""

        # a diverged trial is told to the searcher as a failure (never modelled, never proposed
        # again): docs/search.md
        told = [replace(t, state="failed") if t.state == "diverged" else t for t in trials]
        points, exhausted = propose(self.spec.search.model_dump(mode="json"), told, n,
                                     store=self.store)
        self._exhausted = exhausted and len(points) < n
        return points

    def submit(self, trial: Trial) -> None:
        """Record the submission, plan the attempt once, write its trial file, hand it over."""
        trial = self.store.update_trial(trial.id, state="submitted", attempts=trial.attempts + 1,
                                        started=now(), error=None, external_id=None,
                                        last_heartbeat=None)  # the last attempt's is stale
        req = self.request_for(trial)
        _write_private(req.trial_file, req.trial.dumps())
        if not self._remote:  # early stopping answers through the folder from the first epoch
            self.live.announce(trial)
        handle = self._executor.submit(req)
        self._handles[trial.id] = handle
        self.store.update_trial(trial.id, state="running", external_id=handle)
        log.info("trial %d submitted (%s)", trial.number, handle)

    def request_for(self, trial: Trial) -> TaskRequest:
        """The task request of the trial's current attempt (inputs staged, token issued)."""
        workdir = self._workdir(trial)
        train, val, inputs, test = self._stage_inputs(workdir)
        token = self._trial_token(trial, workdir / "trial.json")
        return planner.plan(self.loaded, self.study, trial, workdir, train=train, validation=val,
                            inputs=inputs, test=test,
                            api={"url": self.api_url, "token": token} if self.api_url else None,
                            git=self._git)

    def template_request(self) -> TaskRequest:
        """The plan of a trial without a point yet, in ``<runs>/<study>/phpo``: what a study
        driver (phpo) sends once, for its service to fill in each point."""
        workdir = self.paths.phpo
        train, val, inputs, test = self._stage_inputs(workdir)
        trial = Trial(id=0, study_id=self.study.id, number=0, hparams={})
        return planner.plan(self.loaded, self.study, trial, workdir, train=train, validation=val,
                            inputs=inputs, api=None, git=self._git, test=test)

    @functools.cached_property
    def _git(self) -> str | None:
        return planner.git_describe(self.loaded.model_path)

    def _trial_token(self, trial: Trial, path: Path) -> str:
        """The trial's token: the one an earlier attempt got, if still valid (a PanDA retry
        reruns the first attempt's job with its trial file), else a new one."""
        old = (_read_json(path).get("api") or {}).get("token")
        if old and self.store.check_trial_token(trial.id, old):
            return str(old)
        return self.store.issue_trial_token(trial.id)

    def _stage_inputs(self, workdir: Path) -> tuple[list[str], list[str], list[dict[str, Any]],
                                                     list[str]]:
        """(train, validation, inputs, test): the staged files' paths (names on a remote node)."""
        paths: dict[str, list[str]] = {}
        inputs: list[dict[str, Any]] = []
        for which in ("train", "validation", "test"):
            paths[which] = []
            for did in self.spec.data.dids(which):
                if did not in self._inputs:
                    dest = self.paths.inputs
                    self._inputs[did] = self.data.resolve(did) if self._remote \
                        else self.data.stage_in(did, dest)
                for f in self._inputs[did]:  # remote jobs find their staged files by name
                    paths[which].append(f.did.name if self._remote else str(f.path))
                    inputs.append({"did": str(f.did), "dataset": did, "adler32": f.adler32, "bytes": f.bytes})
        return paths["train"], paths["validation"], inputs, paths["test"]

    # ---- following and finishing ----------------------------------------------------------
    @property
    def _remote(self) -> bool:
        return self.driver.remote if self.driver is not None else self._executor.remote

    @property
    def _executor(self) -> Executor:
        if self.executor is None:
            raise UsageError(f"study {self.study.name}: its study driver runs its trials; the "
                             "campaign has no executor")
        return self.executor

    def _follow(self, trial: Trial) -> bool:
        """Poll the trial's task and act on what it says; True when the store was written."""
        handle = self._handles.get(trial.id) or trial.external_id
        stopping = trial.state == "stopping"
        if not handle:  # recorded as submitted, but the controller died before the executor call
            if stopping:  # (asked to stop before it ran: nothing to run)
                self.store.update_trial(trial.id, state="stopped", finished=now(),
                                        error=f"{STOPPED} before it started")
                return True
            self.submit(self.store.update_trial(trial.id, state="queued", attempts=trial.attempts - 1))
            return True
        if stopping:
            self._ask_to_stop(trial, handle)
        status = self._executor.poll(handle)
        if status.state in ("completed", "failed", "killed"):
            self.finalize(trial, status)
            if stopping:
                self._stopped(trial)
        elif status.state in ("submitted", "running") and status.state != trial.state \
                and not stopping:
            self.store.update_trial(trial.id, state=status.state)  # e.g. queued at PanDA
        elif status.state == "running" and not self._remote and (stall := self.live.stalled(trial, status.restarts)):
            self.live.stop_stalled(self._executor, handle, trial)  # stacks to the log, then killed
            tail = self._executor.poll(handle).log_tail
            if stopping:
                self.store.update_trial(trial.id, state="stopped", error=f"{STOPPED}; {stall}",
                                        finished=now())
            elif self.live.first_stall(trial):  # retried once (a free attempt), whatever retries
                self._add_free_attempt(trial)
                self.finalize(trial, TaskStatus("failed", stall, tail))
            else:
                self.store.update_trial(trial.id, state="failed", error=stall, finished=now())
        elif status.state == "running" and self._executor.watch_heartbeats and self._silent(trial):
            # (grid/HPC nodes often have no outbound network: no heartbeats; PanDA and Slurm
            # enforce the walltime: their executors set watch_heartbeats = False)
            self._executor.kill(handle)
            timeout = self.spec.backend.heartbeat_timeout
            self.finalize(trial, TaskStatus("failed", f"no heartbeat for {timeout}: the trial hung"))
            if stopping:
                self._stopped(trial)
        else:
            return False  # still running, nothing stored
        return True

    # ---- `gridml stop` (gridml/store/stopping.py) -----------------------------------------
    def _ask_to_stop(self, trial: Trial, handle: str) -> None:
        """A ``stopping`` trial: graceful, through the early-stopping path (its decision.json;
        a payload with an API gets it from should-stop); ``--now``: its job is cancelled with
        the executor's kill (once per controller: the trial is then followed to its end)."""
        if stop_now(trial):
            if trial.id not in self._cancelled:
                self._cancelled.add(trial.id)
                log.info("trial %d: stop now (gridml stop --now): cancelling %s", trial.number,
                         handle)
                self._executor.kill(handle)
        elif not self._remote:
            self.live.stop(trial, trial.error or STOPPED)

    def _stopped(self, trial: Trial) -> None:
        """A ``stopping`` trial's task ended and ``finalize`` recorded it: unless it completed
        every epoch (completed), failed on its own or diverged, it is ``stopped`` (never
        retried), keeping what finalize stored (its objective so far, its model)."""
        ended = self.store.get_trial(trial.id)
        now_ = stop_now(trial)
        if ended.state in ("queued", "pruned", "stopping", "killed") or \
                (now_ and ended.state == "failed"):
            how = "--now: its job was cancelled" if now_ else "it ended after its epoch"
            self.store.update_trial(trial.id, state="stopped", finished=now(),
                                    error=f"{STOPPED}: {how} ({ended.epochs_done} epochs)")
            log.info("trial %d stopped (gridml stop) after %d epochs", trial.number,
                     ended.epochs_done)
        self._cancelled.discard(trial.id)
        self.live.forget(trial)

    def _silent(self, trial: Trial) -> bool:
        """Silent past ``backend.heartbeat_timeout``, judged on evidence: the last sign of life
        is the newest of its heartbeat, its start, when this controller began listening
        (``gridml resume`` after a downtime: the trial could not report meanwhile) and what
        it last wrote to its outputs folder (spool, result.json, model: a trial that finished
        training and is writing its outputs or retrying its posts is not hung)."""
        signs = [t for t in (trial.last_heartbeat, trial.started, self._listening_since)
                 if t is not None]
        signs = [t.replace(tzinfo=UTC) if t.tzinfo is None else t for t in signs]
        timeout = parse_walltime(self.spec.backend.heartbeat_timeout)
        if (now() - max(signs)).total_seconds() <= timeout:
            return False  # (the common case: no folder read)
        written = _newest_mtime(self._workdir(trial) / "outputs")
        if written is not None and time.time() - written <= timeout:
            return False
        # a trial whose training is over (every epoch spooled, or its result written) sends no
        # heartbeats while it saves its model and drains its reports: it is finishing, not hung
        # (the walltime still bounds it)
        outputs = self._workdir(trial) / "outputs"
        self.ingest_spool(trial, outputs / "metrics.jsonl")
        if (self.store.get_trial(trial.id).epochs_done >= self.spec.training.epochs
                or (outputs / "result.json").exists()):
            log.debug("trial %d: silent, but its training is over: left to finish", trial.number)
            return False
        return True

    def finalize(self, trial: Trial, status: TaskStatus) -> None:
        outputs = self._workdir(trial) / "outputs"
        self.ingest_spool(trial, outputs / "metrics.jsonl")
        scores = self.scores(trial)
        objective = scores.pop("objective")  # the first objective; scores: objectives, violations
        result = _read_json(outputs / "result.json")
        self._record_test(trial, result)
        if status.state == "completed" and (result.get("state") == "diverged"
                                            or self.diverged(trial)):
            # the last epoch's objective is NaN/inf: never best, told to the searcher as a
            # failure; its outputs are kept (curves, logs) but it is never fetched as best
            files = status.stored_outputs if status.stored_outputs is not None \
                else self.store_outputs(trial, outputs, None)
            why = result.get("reason") or "an objective of the last epoch is not finite"
            self.store.update_trial(trial.id, state="diverged", objective=None, finished=now(),
                                    outputs=files, error=f"diverged: {why}",
                                    **{**scores, "objectives": None})
            log.warning("trial %d diverged: %s", trial.number, why)
            return
        if status.state == "completed" and objective is not None:
            state = "pruned" if result.get("state") == "pruned" else "completed"
            files = status.stored_outputs if status.stored_outputs is not None \
                else self.store_outputs(trial, outputs, objective)
            self.store.update_trial(trial.id, state=state, objective=objective, finished=now(),
                                    outputs=files, **scores)
            return
        if status.continuation and self._continue(trial, status):  # checkpointed: no retry used
            return
        if status.infrastructure:  # a lost node, not the payload's fault: no retry used up
            self._add_free_attempt(trial)
            log.warning("trial %d: %s; resubmitting (no retry used)", trial.number, status.message)
            self.store.update_trial(trial.id, state="queued", error=status.message)
            return
        error = status.message or "the payload ended without reporting the objective"
        if status.state == "completed":
            error = f"no {self.spec.search.objective!r} reported by the payload"
        if status.log_tail:
            error += "\n" + status.log_tail
        if status.deterministic:  # certain to fail again (exit 2, an import error): no retry
            log.warning("trial %d failed, not retried (it would fail the same way): %s",
                        trial.number, error)
            self.store.update_trial(trial.id, state="failed", error=error, finished=now())
        elif trial.attempts <= self.spec.backend.retries + self._interruptions(trial):
            log.warning("trial %d failed (attempt %d), retrying: %s", trial.number, trial.attempts, error)
            self.store.update_trial(trial.id, state="queued", error=error)
        else:
            self.store.update_trial(trial.id, state="failed", error=error, finished=now())

    def _record_test(self, trial: Trial, result: dict[str, Any]) -> None:
        """The figures of the payload's one evaluation on data.test (result.json's ``test``),
        stored apart from the epochs: never an objective, never told to the searcher."""
        test = result.get("test")
        if not isinstance(test, dict) or not isinstance(test.get("metrics"), dict):
            return
        values: dict[str, float | None] = {}
        for k, v in test["metrics"].items():
            try:
                values[str(k)] = None if v is None else float(v)
            except (TypeError, ValueError):  # "inf" (a rejection with no background left) is a float
                log.warning("trial %d: test metric %s=%r is not a number: skipped", trial.number, k, v)
        self.store.update_trial(trial.id, test_metrics=values)

    def ingest_spool(self, trial: Trial, spool: Path) -> int:
        """Record the payload's spooled reports (idempotent: already-posted epochs are no-ops).

        A line is read as the API reads a post (a ``null`` metric is NaN, a diverged epoch);
        only a torn last line (a payload killed mid-write) is expected to be unreadable."""
        added = 0
        if not spool.exists():
            return 0
        lines = spool.read_text().splitlines()
        for n, line in enumerate(lines, 1):
            try:
                report = EpochReport.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                if n < len(lines):  # not a torn last line: say so, the epoch is lost
                    log.warning("trial %d: line %d of %s is not an epoch report (%s): skipped",
                                trial.number, n, spool, exc)
                continue
            try:
                added += bool(self.store.record_epoch(trial.id, report))
            except ConflictError as exc:
                log.warning("trial %d epoch %d: spool differs from the stored report: %s",
                            trial.number, report.epoch, exc)
        return added

    def scores(self, trial: Trial) -> dict[str, Any]:
        """The trial's ``objective``, ``objectives`` and ``violations`` from its stored epochs, by
        the one rule (:mod:`gridml.store.best`), whoever ran it (executor or study driver)."""
        return scores_of(self.store.list_epochs(trial.id), self.spec.search.model_dump(mode="json"))

    def diverged(self, trial: Trial) -> bool:
        """An objective of the trial's last epoch is not finite (:func:`gridml.store.best.diverged`)."""
        return diverged(self.store.list_epochs(trial.id), self.spec.search.model_dump(mode="json"))

    def store_outputs(self, trial: Trial, outputs: Path,
                      objective: float | None) -> list[dict[str, Any]]:
        """Upload the trial's model, plots, metrics and provenance into the study's output dataset."""
        files = sorted(p for p in outputs.iterdir() if p.is_file() and not p.name.startswith(".")
                       and p.suffix in OUTPUT_SUFFIXES)
        names = [planner.output_name(self.study.name, trial.number, p.name) for p in files]
        meta = {"study": self.study.name, "trial": trial.number, "hparams": trial.hparams,
                "objective": objective, "objective_name": self.spec.search.objective}
        try:
            infos = self.data.upload(files, self.loaded.output_dataset, metadata=meta, names=names)
        except GridmlError as exc:
            log.error("trial %d: outputs not stored: %s", trial.number, exc)
            return []
        return [{"did": str(i.did), "name": i.did.name, "bytes": i.bytes, "adler32": i.adler32} for i in infos]

    def _workdir(self, trial: Trial) -> Path:
        return self.paths.trial(trial.number)

    def _interruptions(self, trial: Trial) -> int:
        return _read_int(self.paths.interrupted(trial.number))

    def _continue(self, trial: Trial, status: TaskStatus) -> bool:
        """A trial that checkpointed before its job ended (preemption, walltime) goes back to
        the queue without using a retry, at most backend.max_continuations times (counted in
        the trial folder's ``continued``); past that it is judged as a failure."""
        marker = self._workdir(trial) / "continued"
        done = _read_int(marker)
        if done >= self.spec.backend.max_continuations:
            log.warning("trial %d: continued %d times already (backend.max_continuations): "
                        "counted as a failure", trial.number, done)
            return False
        self._add_free_attempt(trial)
        marker.write_text(str(done + 1))
        log.warning("trial %d: %s; continued in a new job (%d of %d, no retry used)",
                    trial.number, status.message, done + 1, self.spec.backend.max_continuations)
        self.store.update_trial(trial.id, state="queued", error=status.message)
        return True

    def _add_free_attempt(self, trial: Trial) -> None:
        """One more attempt that does not count against backend.retries (Ctrl-C, lost node)."""
        marker = self.paths.interrupted(trial.number)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(self._interruptions(trial) + 1))

    def interrupt(self) -> None:
        """Ctrl-C: stop every running trial; they go back to the queue for `gridml resume`.
        A study driver's service keeps the study's task: `gridml resume` follows it again."""
        if self.driver is not None:
            self.driver.close()
        else:
            self._stop_trials(self._executor)
        if not self._closed():
            self.store.set_study_state(self.study.id, "stopped")

    def _stop_trials(self, executor: Executor) -> None:
        for trial in self.store.list_trials(self.study.id, states=FOLLOWED):
            handle = self._handles.get(trial.id) or trial.external_id
            if handle:
                executor.kill(handle)
            if trial.state == "stopping":  # asked to stop (gridml stop): it is not resumed
                self.store.update_trial(trial.id, state="stopped", finished=now(),
                                        error=f"{STOPPED}: its job was cancelled (Ctrl-C)")
                continue
            # the attempt keeps its number (its folder holds the killed run), so resume starts a
            # fresh one; it is not a failure, so it does not use up a retry
            self._add_free_attempt(trial)
            self.store.update_trial(trial.id, state="queued", error="interrupted (Ctrl-C)")
        executor.close()


def _write_private(path: Path, text: str) -> None:
    """Atomically, readable by the user only (a trial file holds the trial's token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.chmod(0o600)
    tmp.rename(path)


def _newest_mtime(folder: Path) -> float | None:
    """The newest modification time of the files directly in ``folder`` (None: none)."""
    times = []
    try:
        for p in folder.iterdir():
            try:
                times.append(p.stat().st_mtime)
            except OSError:
                continue
    except OSError:
        return None
    return max(times, default=None)


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 0


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
