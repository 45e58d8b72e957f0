"""trial.json (version 1, docs/trial-contract.md) as a typed object with defaults filled in."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from payloads.runtime.errors import PayloadFailure

TRAINING_DEFAULTS: dict[str, Any] = {
    "epochs": 1, "batch_size": 256, "loss": "binary_crossentropy", "metrics": ["accuracy"],
    "optimizer": "adam", "mixed_precision": False, "lr_scaling": "linear",
    "shuffle_buffer_chunks": 8, "prefetch_batches": 4, "cache_budget_mb": 1024,
    "cache_compression": "auto", "bucket_by_length": False, "bucket_boundaries": None,
    "checkpoint": True, "adapt_samples": 20000, "verbose": 0, "gradient_compression": "none",
    "reader_processes": "auto",
}


@dataclass
class TrialConfig:
    """Everything the payload reads from trial.json."""

    path: Path
    study: str
    trial_id: int
    trial_number: int
    hparams: dict[str, Any]
    model_file: Path
    training: dict[str, Any]
    data: dict[str, Any]
    output_dir: Path
    seed: int
    cores: int
    gpus: int
    api: dict[str, Any] | None
    heartbeat_s: float = 30.0
    early_stopping: bool = False
    provenance: dict[str, Any] = field(default_factory=dict)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def learning_rate(self) -> float:
        return float(self.hparams.get("learning_rate", 1e-3))


def _need(d: dict[str, Any], key: str, path: Path) -> Any:
    if key not in d or d[key] is None:
        raise PayloadFailure(f"{path}: field '{key}' is missing; the controller must write it "
                             f"(see docs/trial-contract.md)", code=2)
    return d[key]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise PayloadFailure(f"{path}: trial file not found", code=2) from None
    except json.JSONDecodeError as e:
        raise PayloadFailure(f"{path}:{e.lineno}: not valid JSON ({e.msg})", code=2) from None


def load_trial(path: str | Path) -> TrialConfig:
    """Read and check trial.json; relative paths are taken relative to the trial file."""
    path = Path(path).resolve()
    d = _read_json(path)
    data = dict(_need(d, "data", path))
    for k in ("train", "validation"):
        data[k] = [str((path.parent / p).resolve()) for p in data.get(k) or []]
    if not data["train"]:
        raise PayloadFailure(f"{path}: data.train lists no files", code=2)
    res = d.get("resources") or {}
    return TrialConfig(
        path=path, study=str(d.get("study", "study")), trial_id=int(_need(d, "trial_id", path)),
        trial_number=int(d.get("trial_number", 0)), hparams=dict(d.get("hparams") or {}),
        model_file=(path.parent / _need(d, "model_file", path)).resolve(),
        training={**TRAINING_DEFAULTS, **(d.get("training") or {})}, data=data,
        output_dir=(path.parent / _need(d, "output_dir", path)).resolve(),
        seed=int(d.get("seed", 0)), cores=max(1, int(res.get("cores") or 1)),
        gpus=int(res.get("gpus") or 0), api=d.get("api") or None,
        heartbeat_s=float(d.get("heartbeat_s") or 30.0),
        early_stopping=bool(d.get("early_stopping", False)),
        provenance=dict(d.get("provenance") or {}), inputs=list(d.get("inputs") or []), raw=d,
    )
