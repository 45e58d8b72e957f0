"""Pure planning: spec + a trial -> the trial contract (trial.json) and a TaskRequest.

No I/O here (the caller writes the file), so the output is golden-file testable and the dry-run
executor comes for free.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

from gridml import __version__
from gridml.executors.base import TaskRequest
from gridml.spec import LoadedSpec, parse_walltime
from gridml.store import Study, Trial

CONTRACT_VERSION = 1
OUTPUT_FILES = ("model.keras", "curves.png", "metrics.jsonl", "provenance.json", "result.json")


def trial_seed(study_seed: int, number: int) -> int:
    """A per-trial seed derived from (study seed, trial number): stable across restarts."""
    digest = hashlib.sha256(f"{study_seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def output_name(study: str, number: int, filename: str) -> str:
    """How a trial's output file is named in the study's output dataset."""
    return f"{study}.trial-{number:04d}.{filename}"


def trial_document(loaded: LoadedSpec, study: Study, trial: Trial, *, train: list[str],
                   validation: list[str], inputs: list[dict[str, Any]], output_dir: str,
                   api: dict[str, str] | None, git: str | None = None) -> dict[str, Any]:
    """The trial contract (docs/trial-contract.md) as a JSON-ready dict."""
    spec = loaded.spec
    tr = spec.training
    return {
        "version": CONTRACT_VERSION,
        "study": study.name, "study_id": study.id,
        "trial_id": trial.id, "trial_number": trial.number,
        "hparams": trial.hparams,
        "model_file": str(loaded.model_path),
        "training": {
            "epochs": tr.epochs, "batch_size": tr.batch_size, "loss": tr.loss,
            "metrics": list(tr.metrics), "optimizer": tr.optimizer,
            "mixed_precision": tr.mixed_precision, **tr.options,
        },
        "data": {"features": spec.data.features, "labels": spec.data.labels,
                 "ragged": list(spec.data.ragged), "train": train, "validation": validation},
        "inputs": inputs,
        "output_dir": output_dir,
        "seed": trial_seed(spec.search.seed, trial.number),
        "resources": {"cores": spec.resources.cores, "gpus": spec.resources.gpus},
        "api": api,
        # a few heartbeats per timeout, so a healthy trial is never taken for a hung one
        "heartbeat_s": max(1, min(30, parse_walltime(spec.backend.heartbeat_timeout) // 3)),
        "early_stopping": spec.search.early_stopping is not None,
        "provenance": {"spec": loaded.resolved(), "spec_hash": loaded.hash,
                       "gridml_version": __version__, "git": git, "inputs": inputs},
    }


def task_request(loaded: LoadedSpec, study: Study, trial: Trial, workdir: Path) -> TaskRequest:
    spec = loaded.spec
    return TaskRequest(
        study=study.name, trial_id=trial.id, trial_number=trial.number, workdir=workdir,
        trial_file=workdir / "trial.json", workers=spec.training.workers,
        cores=spec.resources.cores, gpus=spec.resources.gpus, memory_gb=spec.resources.memory_gb,
        walltime_s=spec.resources.walltime_s, container=spec.resources.container,
        input_dids=spec.data.dids("train") + spec.data.dids("validation"),
        output_dataset=loaded.output_dataset,
        extra={"horovod": spec.training.horovod, "attempt": trial.attempts},
    )


def payload_command(workers: int, controller: str, trial_file: str,
                    python: str = "python", horovodrun: str = "horovodrun") -> list[str]:
    """The payload's command line: Horovod's launcher around ``python -m payloads.train_keras``."""
    return [horovodrun, "-np", str(workers), "-H", f"localhost:{workers}", f"--{controller}",
            python, "-m", "payloads.train_keras", trial_file]


def local_payload_command(req: TaskRequest) -> list[str]:
    """The command for this machine: the running interpreter and its environment's horovodrun."""
    bindir = Path(sys.executable).parent
    return payload_command(req.workers, req.extra.get("horovod", "gloo"), str(req.trial_file),
                           python=sys.executable, horovodrun=str(bindir / "horovodrun"))


def git_describe(path: Path) -> str | None:
    """The git hash of the folder holding ``path`` (the user's model), if it is in a repository."""
    try:
        out = subprocess.run(["git", "-C", str(path.parent), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
