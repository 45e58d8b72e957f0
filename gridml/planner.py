"""Pure planning: spec + a trial -> one :class:`TaskRequest` with the trial contract inside.

One call, :func:`plan`, derives everything an executor needs from the spec and the trial; no
executor reads ``trial.json`` back, rebuilds a spec or opens a data store of its own. No I/O here
(the controller writes the trial file and stages inputs) but for one look at whether stage-in
wrote the inputs' layout sidecars (:func:`layout_sidecars`), so the output is golden-file
testable and the dry run comes for free.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridml import __version__
from gridml.spec import LoadedSpec, Spec, parse_walltime
from gridml.store import Study, Trial
from payloads.runtime import trial as contract
from payloads.runtime.pipeline import layouts

OUTPUT_FILES = ("model.keras", "curves.png", "metrics.jsonl", "provenance.json", "result.json",
                "model_source.py")
TORCH_OUTPUT_FILES = ("model.pt", *OUTPUT_FILES[1:])
# Files a trial writes when it can: model.onnx is best-effort (an op the exporter lacks, no tf2onnx
# on the node), the reason it is missing is in provenance.json (runtime.onnx). On the grid a
# declared output that is missing fails the job, so these are declared as prun's --allowNoOutput
# declares them (the output template flagged ``allowNoOutput``, plus runGen's ``--allowNoOutput=``):
# JEDI marks their dataset, the dispatcher hands their names to the pilot, which stages out the
# ones that exist and drops the others, and the server records those as ``nooutput``, the job
# finished. Locally and on Slurm the controller uploads every output by suffix anyway.
# roc.json, roc.png and scores.png (the figures of merit, docs/payload.md) are written only by a
# classifier trial with a validation set: a regression trial leaves them unwritten.
OPTIONAL_OUTPUT_FILES = ("model.onnx", "roc.json", "roc.png", "scores.png")


def output_files(framework: str) -> tuple[str, ...]:
    """The files a grid job of ``framework`` declares as its outputs (the optional ones last)."""
    return (TORCH_OUTPUT_FILES if framework == "torch" else OUTPUT_FILES) + OPTIONAL_OUTPUT_FILES


def optional_output_files(framework: str) -> tuple[str, ...]:
    """Those of :func:`output_files` a job of ``framework`` may leave unwritten and still succeed."""
    return OPTIONAL_OUTPUT_FILES


@dataclass(frozen=True)
class TaskRequest:
    """One attempt of one trial: everything an executor needs, derived once from the spec."""

    study: str
    trial_id: int
    trial_number: int
    attempt: int
    workdir: Path  # the trial's directory: trial.json, outputs/, attempt-N/ logs
    trial: contract.TrialDoc  # the trial contract the payload reads (trial.json)
    model_file: Path  # the user's model file (its source travels to remote nodes)
    workers: int  # ranks in all
    cores: int
    gpus: int
    memory_gb: float
    walltime_s: int
    nodes: int = 1
    container: str | None = None
    vram_gb: float | None = None
    launcher: str = "gloo"  # horovodrun's controller: gloo | mpi
    train_dids: tuple[str, ...] = ()
    validation_dids: tuple[str, ...] = ()
    test_dids: tuple[str, ...] = ()  # data.test (evaluated once after training)
    output_dataset: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    site: dict[str, Any] = field(default_factory=dict)  # the executor's own spec section
    python: str | None = None  # payload.python: the payload's interpreter (gridml.payload_env)
    # the campaign's spec, typed: what a backend needs of it beyond the fields above (PanDA:
    # payload.files; phpo: the search section). Provenance is written, never read back.
    spec: Spec | None = None

    @property
    def trial_file(self) -> Path:
        return self.workdir / "trial.json"

    @property
    def input_dids(self) -> list[str]:
        return [*self.train_dids, *self.validation_dids, *self.test_dids]


def trial_seed(study_seed: int, number: int) -> int:
    """A per-trial seed derived from (study seed, trial number): stable across restarts."""
    digest = hashlib.sha256(f"{study_seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def output_name(study: str, number: int, filename: str) -> str:
    """How a trial's output file is named in the study's output dataset."""
    return f"{study}.trial-{number:04d}.{filename}"


def trial_document(loaded: LoadedSpec, study: Study, trial: Trial, *, train: list[str],
                   validation: list[str], inputs: list[dict[str, Any]], output_dir: str,
                   api: dict[str, str] | None, git: str | None = None,
                   test: list[str] | None = None,
                   layouts: list[str] | None = None) -> contract.TrialDoc:
    """The trial contract (payloads/runtime/trial.py, docs/trial-contract.md)."""
    spec = loaded.spec
    tr = spec.training
    return contract.TrialDoc(
        study=study.name, study_id=study.id, trial_id=trial.id, trial_number=trial.number,
        hparams=dict(trial.hparams), model_file=loaded.model_path,
        training=contract.Training(
            framework=spec.payload.framework, epochs=tr.epochs, batch_size=tr.batch_size,
            loss=tr.loss, metrics=tuple(tr.metrics), optimizer=tr.optimizer,
            mixed_precision=tr.mixed_precision, workers=tr.workers, launcher=tr.horovod,
            options=tr.options,
            class_weights=({str(k): float(v) for k, v in tr.class_weights.items()}
                           if isinstance(tr.class_weights, dict) else tr.class_weights),
            discriminant=(tr.discriminant.model_dump(mode="json")
                          if tr.discriminant is not None else None),
            stop_on_nan=tr.stop_on_nan),
        data=contract.Data(features=tuple(spec.data.input_names()),
                           labels=spec.data.labels, ragged=tuple(spec.data.ragged),
                           weights=spec.data.weights,
                           collections=tuple(i for i in spec.data.inputs or () if isinstance(i, str)),
                           views=tuple(i.model_dump(mode="json") for i in spec.data.inputs or ()
                                       if not isinstance(i, str)),
                           train=tuple(train), validation=tuple(validation),
                           test=tuple(test or ()), max_open_files=spec.data.max_open_files,
                           layouts=tuple(layouts or ())),
        inputs=tuple(inputs), output_dir=Path(output_dir),
        seed=trial_seed(spec.search.seed, trial.number),
        resources=contract.Resources(cores=spec.resources.cores, gpus=spec.resources.gpus,
                                     nodes=spec.resources.nodes),
        api=contract.Api(url=api["url"], token=api.get("token")) if api else None,
        # a few heartbeats per timeout, so a healthy trial is never taken for a hung one
        heartbeat_s=max(1, min(30, parse_walltime(spec.backend.heartbeat_timeout) // 3)),
        early_stopping=spec.search.early_stopping is not None,
        # the inputs once, beside the paths (provenance.json takes them from there: outputs.py)
        provenance={"spec": loaded.resolved(), "spec_hash": loaded.hash,
                    "gridml_version": __version__, "git": git})


def plan(loaded: LoadedSpec, study: Study, trial: Trial, workdir: Path, *, train: list[str],
         validation: list[str], inputs: list[dict[str, Any]], api: dict[str, str] | None,
         git: str | None = None, test: list[str] | None = None) -> TaskRequest:
    """The task request of the trial's current attempt, with its trial document inside."""
    spec = loaded.spec
    doc = trial_document(loaded, study, trial, train=train, validation=validation, inputs=inputs,
                         output_dir=str(workdir / "outputs"), api=api, git=git, test=test,
                         layouts=layout_sidecars(workdir, spec.data.dids("train")
                                                 + spec.data.dids("validation")
                                                 + spec.data.dids("test")))
    section = getattr(spec, {"phpo": "panda"}.get(spec.backend.executor, spec.backend.executor), None)
    return TaskRequest(
        study=study.name, trial_id=trial.id, trial_number=trial.number,
        attempt=max(1, trial.attempts), workdir=workdir, trial=doc, model_file=loaded.model_path,
        workers=spec.training.workers, cores=spec.resources.cores, gpus=spec.resources.gpus,
        nodes=spec.resources.nodes, memory_gb=spec.resources.memory_gb, walltime_s=spec.resources.walltime_s,
        container=spec.resources.container, vram_gb=spec.resources.vram_gb,
        launcher=spec.training.horovod, train_dids=tuple(spec.data.dids("train")),
        validation_dids=tuple(spec.data.dids("validation")),
        test_dids=tuple(spec.data.dids("test")),
        output_dataset=loaded.output_dataset, python=spec.payload.python, spec=spec,
        site=section.model_dump(mode="json") if section is not None else {})


def layout_sidecars(workdir: Path, dids: list[str]) -> list[str]:
    """The layout sidecars of the input datasets ``dids`` that stage-in wrote into the study's
    ``inputs/`` folder (beside ``workdir``: payloads/runtime/pipeline/layouts.py), for
    trial.json's ``data.layouts``; the one look at the disk here (a remote executor's inputs
    are staged by its jobs: no sidecar, the payload opens each file once)."""
    folder = workdir.parent / "inputs"
    out = [folder / layouts.sidecar_name(d) for d in dict.fromkeys(dids)]
    return [str(p.resolve()) for p in out if p.is_file()]  # absolute: Slurm copies trial.json


def payload_command(workers: int, controller: str, trial_file: str,
                    python: str = "python", *, framework: str = "keras",
                    torchrun: str = "torchrun") -> list[str]:
    """The payload's command line: Horovod's launcher around ``python -m payloads.train_keras``,
    or for ``framework: torch`` torchrun (one node, ``workers`` processes, a c10d rendezvous on a
    free local port) around ``-m payloads.train_torch``; torchrun starts its own interpreter.

    Horovod's launcher is horovodrun itself, started as ``python -m payloads.hvdrun`` (the same
    arguments and code) so that its build probe does not import all of TensorFlow first: ~5 s
    of CPU and wall less before every multi-rank Keras trial (payloads/hvdrun.py).

    One worker runs ``python -m payloads.train_<framework>`` itself, with no launcher: the
    payload is then a single rank (Horovod's Gloo controller in one process, no process group
    for torch) and trains, reports and exits exactly as under a launcher, while a launcher only
    adds its own start (torchrun ~4 s of CPU here: the framework imported once more) to every
    one-GPU trial."""
    module = "payloads.train_torch" if framework == "torch" else "payloads.train_keras"
    if workers == 1:
        return [python, "-m", module, trial_file]
    if framework == "torch":
        return [torchrun, "--nnodes", "1", "--nproc-per-node", str(workers), "--rdzv-backend",
                "c10d", "--rdzv-endpoint", "localhost:0", "-m", "payloads.train_torch",
                trial_file]
    return [python, "-m", "payloads.hvdrun", "-np", str(workers), "-H", f"localhost:{workers}",
            f"--{controller}", python, "-m", "payloads.train_keras", trial_file]


def local_payload_command(req: TaskRequest) -> list[str]:
    """The command for this machine: the payload's interpreter (payload.python,
    $GRIDML_PAYLOAD_PYTHON, else the running one) and its environment's launcher."""
    from gridml.payload_env import launcher_path, payload_python

    return payload_command(req.workers, req.launcher, str(req.trial_file),
                           python=payload_python(req.python),
                           framework=req.trial.training.framework,
                           torchrun=launcher_path("torchrun", req.python))


def git_describe(path: Path) -> str | None:
    """The git hash of the folder holding ``path`` (the user's model), if it is in a repository."""
    try:
        out = subprocess.run(["git", "-C", str(path.parent), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
