"""``gridml evaluate``: the evaluation command of a phpo job, one point through gridml's payload.

phpo's transformation (runHPO) leaves in the job's directory the point iDDS chose
(``--evaluationInput``, default ``input.json``: ``{hp}``, or ``[model_id, {hp}]`` for segmented
HPO) and the staged training files (``--evaluationTrainingData``, default ``input_ds.json``: a
JSON list of file names; ``{"train": [...], "validation": [...]}`` works too), and reads back
``--evaluationOutput`` (default ``output.json``): ``{"status": 0, "loss": <objective, negated when
maximised>, "message": ...}``, or a non-zero status and the reason when training failed.

The job's sandbox (``-a``, unpacked by runHPO or by ``--sandbox``) carries the user's model files
and ``gridml_trial.json``: the trial document the phpo executor planned for the study (training
block, data layout, input checksums, the resolved spec). This command puts the point and the
staged files into it and runs the framework's own payload command (horovodrun / torchrun: thread
plan, input pipeline, checkpoint, spool), with as many ranks as the spec asks and the job's cores
allow. ``--evaluationMetrics`` gets metrics.jsonl, curves.png, provenance.json, result.json, the
payload log and the trained model (model.keras or model.pt, model_source.py, model.onnx when it was
exported) as a tarball, evaluation.json first (gridml.executors.panda.phpo_outputs: why one tarball;
output.json, which runHPO parses, only names its members). With ``--server``/``--token`` (or
``GRIDML_SERVER``/``GRIDML_TOKEN``) the point becomes a trial of the study on that ``gridml
serve`` and reports every epoch like any.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gridml.errors import GridmlError
from gridml.executors.panda import phpo_outputs
from gridml.planner import payload_command
from gridml.search.validate import point_problems
from payloads.runtime import trial as contract

log = logging.getLogger("gridml.phpo")
TEMPLATE = "gridml_trial.json"
METRIC_FILES = phpo_outputs.METRIC_FILES
EVALUATION = phpo_outputs.EVALUATION  # in the tarball: the point, output.json, the server trial
HOROVOD_DEFAULTS = {"HOROVOD_START_TIMEOUT": "300", "HOROVOD_GLOO_TIMEOUT_SECONDS": "300"}


class EvaluationFailed(Exception):
    """Training could not run or failed: ``status`` and the reason go to output.json."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Files:
    """The phpo file names (as phpo's --evaluation* options name them)."""

    input: Path = Path("input.json")
    training_data: Path = Path("input_ds.json")
    output: Path = Path("output.json")
    metrics: Path | None = None


# ---- the pieces ---------------------------------------------------------------------------------
def unpack_sandbox(source: str, cwd: Path) -> list[str]:
    """Unpack the job's sandbox (a tarball path, or a URL of the PanDA cache) into ``cwd``."""
    path = Path(source)
    if source.startswith(("http://", "https://")):
        path = cwd / source.rstrip("/").rsplit("/", 1)[-1]
        try:
            with urllib.request.urlopen(source, timeout=60) as r, open(path, "wb") as fh:
                shutil.copyfileobj(r, fh)
        except OSError as exc:
            raise EvaluationFailed(f"cannot download the sandbox {source}: {exc}") from None
    try:
        with tarfile.open(path) as tar:
            names = tar.getnames()
            tar.extractall(cwd, filter="data")
    except (OSError, tarfile.TarError) as exc:
        raise EvaluationFailed(f"{path}: not a readable sandbox tarball ({exc})") from None
    return names


def read_point(path: Path) -> tuple[Any, dict[str, Any]]:
    """(model_id or None, hyperparameters) from phpo's evaluation input."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EvaluationFailed(f"{path}: cannot read the point ({exc})", 2) from None
    if isinstance(doc, list) and len(doc) == 2 and isinstance(doc[1], dict):
        return doc[0], dict(doc[1])
    if isinstance(doc, dict):
        return None, dict(doc)
    raise EvaluationFailed(f"{path}: a point is {{name: value}} or [model_id, {{...}}]", 2)


def read_training_files(path: Path, doc: contract.TrialDoc, cwd: Path) -> tuple[list[str], list[str]]:
    """(train, validation) staged file paths: a list is split by the names the trial document
    recorded for each (a name it does not know is a training file)."""
    try:
        listed = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EvaluationFailed(f"{path}: cannot read the training file list ({exc})", 2) from None
    if isinstance(listed, dict):
        train, val = list(listed.get("train", [])), list(listed.get("validation", []))
    elif isinstance(listed, list):
        known_val = {Path(n).name for n in doc.data.validation}
        val = [n for n in listed if Path(str(n)).name in known_val]
        train = [n for n in listed if n not in val]
    else:
        raise EvaluationFailed(f"{path}: must be a JSON list of file names", 2)
    if not train or not val:
        raise EvaluationFailed(f"{path}: {len(train)} training and {len(val)} validation file(s); "
                               "both are needed (the task's --trainingDS holds both datasets)", 2)
    resolve = [str(p if (p := Path(str(n))).is_absolute() else cwd / p) for n in train + val]
    missing = [p for p in resolve if not Path(p).is_file()]
    if missing:
        raise EvaluationFailed(f"{path}: not staged in: {', '.join(missing)}", 3)
    return resolve[:len(train)], resolve[len(train):]


def job_cores() -> int:
    """The cores this job may use: the pilot's ATHENA_CORE_NUMBER, else the machine's."""
    for key in ("ATHENA_CORE_NUMBER", "ATHENA_PROC_NUMBER"):
        if os.environ.get(key, "").isdigit() and int(os.environ[key]) > 0:
            return int(os.environ[key])
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def spec_of(doc: contract.TrialDoc) -> dict[str, Any]:
    return dict(doc.provenance.get("spec") or {})


def objective_name(doc: contract.TrialDoc) -> tuple[str, str]:
    s = spec_of(doc).get("search") or {}
    return str(s.get("objective", "val_loss")), str(s.get("direction", "minimize"))


class Server:
    """The study on a ``gridml serve``: the point becomes a trial there (best effort)."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url, self.token = url.rstrip("/"), token

    def _call(self, route: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(self.url + route, data=json.dumps(body).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read() or b"null")

    def new_trial(self, study: str, hparams: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return dict(self._call(f"/api/v1/studies/{study}/trials", {"hparams": hparams}))
        except (OSError, ValueError, TypeError) as exc:
            log.warning("gridml server %s: no trial for this point (%s); training goes on", self.url, exc)
            return None

    def finish(self, trial_id: int, state: str, objective: float | None, error: str | None) -> None:
        try:
            self._call(f"/api/v1/trials/{trial_id}/finish",
                       {"state": state, "objective": objective, "error": error})
        except (OSError, ValueError) as exc:
            log.warning("gridml server %s: trial %d not finished there (%s)", self.url, trial_id, exc)


# ---- the evaluation -----------------------------------------------------------------------------
def prepare(template: Path, files: Files, cwd: Path, server: Server | None,
            workers: int | None) -> tuple[contract.TrialDoc, dict[str, Any] | None]:
    """The trial document for this point, written to ``cwd/trial.json``."""
    try:
        doc = contract.TrialDoc.from_json(json.loads(template.read_text()), base=template.parent,
                                          where=str(template))
    except (GridmlError, Exception) as exc:  # PayloadFailure and friends: one line
        raise EvaluationFailed(f"{template}: not a gridml trial document ({exc})", 2) from None
    _, hparams = read_point(files.input)
    space = (spec_of(doc).get("search") or {}).get("space") or {}
    problems = point_problems(space, hparams, where=str(files.input)) if space else []
    if problems:
        raise EvaluationFailed(problems[0], 2)
    train, val = read_training_files(files.training_data, doc, cwd)
    cores = max(1, min(job_cores(), doc.resources.cores or job_cores()))
    ranks = max(1, min(workers or doc.training.workers, cores))
    trial = server.new_trial(doc.study, hparams) if server else None
    api = contract.Api(server.url, server.token) if server and trial else None
    model = cwd / Path(doc.model_file).name
    if not model.is_file():
        raise EvaluationFailed(f"{model.name}: the model file is not in the job's directory "
                               "(the task's sandbox brings it)", 2)
    doc = doc.replace(
        hparams=hparams, model_file=model, output_dir=cwd / "outputs",
        trial_id=int(trial["id"]) if trial else doc.trial_id,
        trial_number=int(trial["number"]) if trial else doc.trial_number,
        # the spec's data section as it is (weights, collections, views, max_open_files), with
        # the job's staged files; no test split (refused for phpo) and no layout records (they
        # live in the controller's study folder, not on this node)
        data=replace(doc.data, train=tuple(train), validation=tuple(val), test=(), layouts=()),
        training=contract.Training(**{**doc.training.__dict__, "workers": ranks}),
        resources=contract.Resources(cores=cores, gpus=doc.resources.gpus, nodes=1), api=api)
    (cwd / "outputs").mkdir(exist_ok=True)
    (cwd / "trial.json").write_text(doc.dumps())
    return doc, trial


def run_payload(doc: contract.TrialDoc, cwd: Path) -> tuple[int, str]:
    """The framework's payload command; (exit code, the last reason line of its log)."""
    bindir = Path(sys.executable).parent
    torchrun = str(bindir / "torchrun") if (bindir / "torchrun").exists() else "torchrun"
    command = payload_command(doc.training.workers, doc.training.launcher, "trial.json",
                              python=sys.executable,
                              framework=doc.training.framework, torchrun=torchrun)
    env = {**HOROVOD_DEFAULTS, **os.environ}
    log_path = cwd / "payload.log"
    with open(log_path, "wb") as fh:
        rc = subprocess.run(command, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                            check=False).returncode
    lines = log_path.read_text(errors="replace").splitlines()
    reasons = [ln.split("gridml payload error:", 1)[1].strip() for ln in lines
               if "gridml payload error:" in ln]
    return rc, (reasons[-1] if reasons else (lines[-1].strip() if lines else ""))


def loss_of(doc: contract.TrialDoc, outputs: Path) -> float:
    """The objective from result.json (negated when maximised): what iDDS minimises."""
    name, direction = objective_name(doc)
    try:
        result = json.loads((outputs / "result.json").read_text())
    except (OSError, ValueError) as exc:
        raise EvaluationFailed(f"the payload left no readable result.json ({exc})") from None
    final = result.get("objective_metrics") or {}
    if name not in final or final[name] is None:
        raise EvaluationFailed(f"result.json has no {name!r} (search.objective); it has "
                               f"{sorted(final)}")
    value = float(final[name])
    return -value if direction == "maximize" else value


def pack_metrics(path: Path, cwd: Path, evaluation: dict[str, Any] | None = None) -> list[str]:
    """The evaluation tarball (phpo's ``--evaluationMetrics``, the one file a phpo job returns):
    ``evaluation`` (point and outcome, with each member's sha256) as evaluation.json, so whoever
    follows the task (gridml's phpo executor) knows which point each tarball is, then the metric
    files and payload.log, then the trained model (model.keras or model.pt, model_source.py,
    model.onnx when the export worked); why there and in that order:
    :mod:`gridml.executors.panda.phpo_outputs`."""
    log = cwd / "payload.log"
    return phpo_outputs.pack(path, cwd / "outputs", log if log.is_file() else None, evaluation)


def write_output(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)


def evaluate(template: Path, files: Files, *, cwd: Path | None = None, sandbox: str | None = None,
             server: Server | None = None, workers: int | None = None) -> dict[str, Any]:
    """Train the point, write output.json (and the metrics tarball); returns output.json's doc."""
    cwd = cwd or Path.cwd()
    trial: dict[str, Any] | None = None
    try:
        if sandbox:
            unpack_sandbox(sandbox, cwd)
        doc, trial = prepare(template, files, cwd, server, workers)
        rc, reason = run_payload(doc, cwd)
        if rc != 0:
            raise EvaluationFailed(f"training failed (exit {rc}): {reason or 'see payload.log'}", rc)
        loss = loss_of(doc, cwd / "outputs")
        name, direction = objective_name(doc)
        out = {"status": 0, "loss": loss,
               "message": f"{name} = {loss if direction == 'minimize' else -loss:.6g} ({direction}d)"}
        if server and trial:
            server.finish(int(trial["id"]), "completed", loss if direction == "minimize" else -loss, None)
    except EvaluationFailed as exc:
        out = {"status": exc.status or 1, "loss": None, "message": str(exc)}
        if server and trial:
            server.finish(int(trial["id"]), "failed", None, str(exc))
    if files.metrics is not None:
        out["metrics"] = pack_metrics(files.metrics, cwd, _evaluation(files, out, trial))
    write_output(files.output, out)
    return out


def _evaluation(files: Files, out: dict[str, Any], trial: dict[str, Any] | None) -> dict[str, Any]:
    try:
        model_id, hparams = read_point(files.input)
    except EvaluationFailed:
        model_id, hparams = None, None
    return {"hparams": hparams, "model_id": model_id, **out,
            "trial_id": int(trial["id"]) if trial else None,
            "trial_number": int(trial["number"]) if trial else None}


def template_from_spec(spec_path: Path, cwd: Path) -> Path:
    """A trial document for ``gridml evaluate --spec`` (by hand, outside a phpo task)."""
    from gridml.planner import trial_document
    from gridml.spec import load_spec
    from gridml.store import Study, Trial

    loaded = load_spec(spec_path)
    study = Study(id=0, name=loaded.spec.name, spec=loaded.resolved(), spec_hash=loaded.hash)
    doc = trial_document(loaded, study, Trial(id=0, study_id=0, number=0, hparams={}),
                         train=[], validation=[], inputs=[], output_dir=str(cwd / "outputs"),
                         api=None)
    path = cwd / TEMPLATE
    if Path(loaded.model_path).parent != cwd:
        shutil.copy(loaded.model_path, cwd / Path(loaded.model_path).name)
    path.write_text(doc.dumps())
    return path
