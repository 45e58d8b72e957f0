"""``backend.executor: phpo``: the whole search as one PanDA HPO task (phpo + iDDS steering).

The task parameters come from panda-client's own builder, ``pandaclient.PhpoScript.main(
get_taskparams=True, dry_mode=True)``, run in a child process (it parses ``sys.argv``, makes a
scratch folder in its working directory and registers exit handlers) with the options a phpo user
writes: ``--steeringContainer``/``--steeringExec "gridml steer --in %IN --out %OUT --num-points
%NUM_POINTS --max-points %MAX_POINTS --algorithm A --seed S"``, ``--evaluationContainer``/
``--evaluationExec "gridml evaluate ..."``, ``--maxPoints`` (search.max_trials),
``--nParallelEvaluation`` (search.parallel), ``--nPointsPerIteration``, ``--trainingDS`` (the
training and validation datasets), ``--searchSpaceFile`` (search.space, gridml's format),
``--evaluationMetrics``, ``--architecture`` for GPUs. gridml then sets what phpo has no option for:
``coreCount``, ``ramCount``, ``maxWalltime``, ``cliParams``, and the sandbox: the user's code
plus ``gridml_trial.json`` (the planned trial document ``gridml evaluate`` fills in), uploaded
with ``Client.putFile`` and named in the job parameters (``-a``) in place of phpo's own.

:class:`PhpoExecutor` follows the task for ``gridml submit``: iDDS, not gridml, proposes the
points, so the campaign loop hands each cycle to :meth:`PhpoExecutor.follow` (the controller calls
an executor's ``follow`` instead of asking its searcher). The first cycle submits the task
(``insertTaskParams``), journaled in ``<runs>/<study>/phpo/panda.json`` as PanDA trials' tasks are,
so a restarted controller follows the same task and never submits a second one (a resubmission the
journal missed is PanDA's "duplicate task" answer, followed too). Every cycle then reads the
evaluation jobs' metrics tarballs in the task's output dataset: each becomes a trial of the study
(its point and outcome from ``evaluation.json``, its epochs from ``metrics.jsonl``, the tarball,
which also holds the trained model, as its stored output: ``gridml fetch`` unpacks it, see
:mod:`gridml.executors.panda.phpo_outputs`), or completes the trial ``gridml evaluate --server`` already
made there. The campaign ends when the task ends. Ctrl-C leaves the task running at PanDA:
``gridml resume`` follows it again.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gridml import __version__
from gridml.data.base import DataManager, FileInfo
from gridml.errors import DuplicateTaskError, ExecutorError, GridmlError, NotFoundError
from gridml.executors.panda.executor import client as pc
from gridml.executors.panda.executor import journal
from gridml.executors.panda.executor import phpo_outputs
from gridml.executors.base import TaskRequest, TaskStatus
from gridml.executors.panda.outputs import task_files
from gridml.executors.panda.render import architecture, output_items, task_name
from gridml.executors.panda.request import grid_trial_document, resolve_nickname, trial_sandbox
from gridml.store import Trial, objective_of

log = logging.getLogger("gridml.executors.phpo")

TEMPLATE = "gridml_trial.json"
METRICS = "metrics.tgz"
DEFAULT_IMAGE = "docker://ghcr.io/gridml/payload:0.1"


def steer_exec(algorithm: str, seed: int, options: dict[str, Any]) -> str:
    """The steering command iDDS runs each step (its placeholders left for it)."""
    cmd = ["gridml", "steer", "--in", "%IN", "--out", "%OUT", "--num-points", "%NUM_POINTS",
           "--max-points", "%MAX_POINTS", "--algorithm", algorithm, "--seed", str(seed)]
    if options:
        cmd += ["--options", shlex.quote(json.dumps(options, sort_keys=True))]
    return " ".join(cmd)


def evaluate_exec() -> str:
    return (f"gridml evaluate --trial {TEMPLATE} --evaluationInput input.json "
            f"--evaluationTrainingData input_ds.json --evaluationOutput output.json "
            f"--evaluationMetrics {METRICS}")


def phpo_args(req: TaskRequest, out_ds: str, space_file: Path) -> list[str]:
    """phpo's command line for the study (what a phpo user would type)."""
    spec = req.trial.provenance.get("spec") or {}
    search = spec.get("search") or {}
    image = req.container or DEFAULT_IMAGE
    parallel = int(search.get("parallel", 1))
    args = ["--outDS", out_ds,
            "--steeringContainer", image,
            "--steeringExec", steer_exec(str(search.get("algorithm", "bayes")),
                                         int(search.get("seed", 0)), dict(search.get("options") or {})),
            "--evaluationContainer", image, "--evaluationExec", evaluate_exec(),
            "--evaluationInput", "input.json", "--evaluationTrainingData", "input_ds.json",
            "--evaluationOutput", "output.json", "--evaluationMetrics", METRICS,
            "--maxPoints", str(int(search.get("max_trials", 10))),
            "--nParallelEvaluation", str(parallel), "--nPointsPerIteration", str(parallel),
            "--trainingDS", ",".join(req.input_dids), "--searchSpaceFile", str(space_file)]
    if req.gpus:
        args += ["--architecture", architecture(req.gpus, req.vram_gb)]
    site = req.site
    if site.get("site"):
        args += ["--site", str(site["site"])]
    if site.get("working_group"):
        args += ["--workingGroup", str(site["working_group"])]
    return args


def phpo_task_params(args: list[str], cwd: Path) -> dict[str, Any]:
    """PhpoScript's task parameter map for ``args`` (dry mode: nothing uploaded or sent)."""
    code = ("import json, sys; from pandaclient import PhpoScript; sys.argv = ['phpo']; "
            "m = PhpoScript.main(get_taskparams=True, dry_mode=True, ext_args=json.loads(sys.stdin.read())); "
            "print('@@' + json.dumps(m))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDML_")}
    env.setdefault("PANDA_BEHIND_REAL_LB", "1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, input=json.dumps(args),
                          capture_output=True, text=True, timeout=120, check=False)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("@@")), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ExecutorError(f"panda-client's phpo did not build the task parameters: {tail[0]}")
    return json.loads(line[2:])  # type: ignore[no-any-return]


def render_phpo(req: TaskRequest, nickname: str, *,
                upload: Callable[[Path], str] | None = None) -> dict[str, Any]:
    """The phpo task parameters for the study of ``req`` (its first trial's plan as template)."""
    template = grid_trial_document(req.trial.to_json())
    template.update(hparams={}, trial_id=0, trial_number=0, api=None)
    sandbox = trial_sandbox(req, {TEMPLATE: json.dumps(template, indent=2, sort_keys=True).encode()})
    name = upload(sandbox.write(req.workdir / "sandbox")) if upload else sandbox.name
    space = {name: {k: v for k, v in dim.items() if v is not None} for name, dim in
             ((req.trial.provenance.get("spec") or {}).get("search", {}).get("space") or {}).items()}
    out_ds = task_name(nickname, req.study, 0).replace(".trial-0000/", ".phpo/")
    with tempfile.TemporaryDirectory(prefix="gridml-phpo-") as tmp:
        space_file = Path(tmp) / "space.json"
        space_file.write_text(json.dumps(space, sort_keys=True))
        params = phpo_task_params(phpo_args(req, out_ds, space_file), Path(tmp))
    params["jobParameters"] = [
        dict(p, value=f"-a {name} " + p["value"].split(" ", 2)[2])
        if str(p.get("value", "")).startswith("-a ") else p for p in params["jobParameters"]]
    params.update(
        coreCount=req.cores, ramCount=math.ceil(req.memory_gb * 1024 / max(req.cores, 1)),
        ramCountUnit="MBPerCore", maxWalltime=max(1, math.ceil(req.walltime_s / 3600)),
        cliParams=f"gridml {__version__} submit: study {req.study} (phpo)",
        sourceURL=pc.source_url(), uniqueTaskName=True)
    if req.site.get("vo"):
        params["vo"] = req.site["vo"]
    return params


def render_for_request(req: TaskRequest) -> dict[str, Any]:
    """What ``gridml submit --dry-run`` shows for a phpo study."""
    return render_phpo(req, resolve_nickname(req.site, dry_run=True))


def submit_study(req: TaskRequest) -> tuple[int, dict[str, Any]]:
    """Upload the sandbox and submit the study's phpo task: (jediTaskID, parameters)."""
    params = render_phpo(req, resolve_nickname(req.site), upload=lambda p: pc.put_file(str(p)))
    task_id, _message = pc.submit(params)
    return task_id, params


# ---- following the task --------------------------------------------------------------------------
EVALUATION = phpo_outputs.EVALUATION  # what gridml evaluate packs into the tarball first
OVER = ("done", "finished", "failed", "broken", "aborted", "exhausted")
REGISTER_GRACE_S = 3600.0  # a new task is in DEFT's table only, unknown to JEDI, this long at most


class PhpoExecutor:
    """``backend.executor: phpo`` for a real campaign: one HPO task per study, followed by
    :meth:`follow` (see the module docstring). ``submit``/``poll`` are never per trial here."""

    name = "phpo"
    remote = True
    watch_heartbeats = False

    def __init__(self, data: DataManager | None, journal: Path | None = None) -> None:
        self._data = data
        self._journal = journal  # folder: <task id>.json (the task's parameters)
        self._task: tuple[int, dict[str, Any]] | None = None

    # -- the Executor seam: a phpo study has no per-trial tasks ----------------------------
    def submit(self, req: TaskRequest) -> str:
        raise ExecutorError(f"study {req.study}: backend.executor phpo submits one task for the "
                            "whole study (iDDS proposes the points), not one per trial",
                            hint="run the campaign with `gridml submit` or `gridml resume`")

    def poll(self, handle: str) -> TaskStatus:
        return TaskStatus("completed" if handle.startswith("phpo:") else "unknown",
                          "an evaluation job of the study's phpo task")

    def kill(self, handle: str) -> None:
        return None  # evaluation jobs are iDDS's; the task goes on (gridml resume follows it)

    def close(self) -> None:
        self._task = None

    # -- the campaign's cycle --------------------------------------------------------------
    def follow(self, campaign: Any) -> bool:
        """Submit the study's task once, record its finished evaluations as trials; True when
        the task is over and every evaluation it left is recorded."""
        workdir = Path(campaign.runs_dir) / campaign.study.name / "phpo"
        task_id, params = self._task or self._submitted(campaign, workdir)
        self._task = (task_id, params)
        try:
            status = pc.task_status(task_id)
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
            self._harvest(campaign, task_id, params, workdir)
        except GridmlError as exc:  # the data store is unreachable: the next cycle tries again
            log.warning("phpo task %d: evaluations not read yet: %s", task_id, exc)
            return False
        if status in OVER:
            log.info("phpo task %d is %s", task_id, status)
            return True
        return False

    def _submitted(self, campaign: Any, workdir: Path) -> tuple[int, dict[str, Any]]:
        """The study's task: the journaled one, else submitted now (and journaled)."""
        noted = journal.read(workdir)
        if noted and not noted.get("killed"):
            task_id = int(noted["jediTaskID"])
            kept = journal.read_task(self._journal, task_id) if self._journal else None
            return task_id, (kept[0] if kept else pc.task_params(task_id))
        req = campaign.template_request()
        params = render_phpo(req, resolve_nickname(req.site), upload=lambda p: pc.put_file(str(p)))
        try:
            task_id, message = pc.submit(params)
            log.info("study %s: phpo task: %s", req.study, message)
        except DuplicateTaskError as dup:  # submitted before the journal was written
            task_id = int(dup.task_id)  # type: ignore[attr-defined]
            log.warning("study %s: %s: following the existing task", req.study, dup)
        journal.record_task(workdir, params["taskName"], task_id, 1, pc.server_url())
        if self._journal is not None:
            journal.write_task(self._journal, task_id, params, workdir)
        return task_id, params

    def _harvest(self, campaign: Any, task_id: int, params: dict[str, Any], workdir: Path) -> None:
        store, study = campaign.store, campaign.study
        known = {t.external_id for t in store.list_trials(study.id) if t.external_id}
        for item in output_items(params):
            for f in task_files(self._data_for(), item["dataset"], item["value"], task_id):
                handle = f"phpo:{task_id}:{f.did.name}"
                if handle not in known:
                    self._record(campaign, handle, f, workdir / "evaluations" / f.did.name)

    def _record(self, campaign: Any, handle: str, f: FileInfo, folder: Path) -> None:
        """One evaluation job's tarball -> a trial of the study (created, or the one
        ``gridml evaluate --server`` made), with its epochs, objective and stored output."""
        store, study, search = campaign.store, campaign.study, campaign.spec.search
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".fetch-") as tmp:
            for path in self._data_for().download(str(f.did), Path(tmp)):
                phpo_outputs.read_records(Path(path), folder)  # the model stays in the store
        try:
            ev = json.loads((folder / EVALUATION).read_text())
        except (OSError, ValueError):
            log.warning("%s: no %s in %s (not made by gridml evaluate): skipped", handle,
                        EVALUATION, f.did)
            return
        trial = self._trial_for(store, study.id, ev)
        trial = store.update_trial(trial.id, external_id=handle, attempts=max(1, trial.attempts),
                                   started=trial.started or _now())
        campaign.ingest_spool(trial, folder / "metrics.jsonl")
        objective = objective_of(store.list_epochs(trial.id), search.objective)
        if objective is None and isinstance(ev.get("loss"), int | float):
            objective = -float(ev["loss"]) if search.direction == "maximize" else float(ev["loss"])
        outputs = [{"did": str(f.did), "name": f.did.name, "bytes": f.bytes, "adler32": f.adler32}]
        if ev.get("status") == 0 and objective is not None:
            store.update_trial(trial.id, state="completed", objective=objective, finished=_now(),
                               outputs=outputs, error=None)
            log.info("phpo: trial %d (%s) %s = %.6g", trial.number, handle, search.objective,
                     objective)
        else:
            store.update_trial(trial.id, state="failed", finished=_now(), outputs=outputs,
                               error=str(ev.get("message") or "the evaluation failed"))

    @staticmethod
    def _trial_for(store: Any, study_id: int, ev: dict[str, Any]) -> Trial:
        hparams = dict(ev.get("hparams") or {})
        trials = store.list_trials(study_id)
        if ev.get("trial_id") is not None:  # gridml evaluate --server made it in this store
            same = [t for t in trials if t.id == ev["trial_id"] and not t.external_id]
            if same:
                return same[0]
        # a trial recorded before a crash, its handle not yet written
        same = [t for t in trials if t.source == "phpo" and not t.external_id
                and t.hparams == hparams]
        return same[0] if same else store.create_trial(study_id, hparams, source="phpo",
                                                       state="running")

    def _data_for(self) -> DataManager:
        if self._data is None:
            raise ExecutorError("the phpo executor was created without the campaign's data "
                                "manager: it cannot read the evaluations",
                                hint="create it with executors.create('phpo', data=...)")
        return self._data


def _now() -> datetime:
    return datetime.now(UTC)
