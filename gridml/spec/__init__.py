"""The training spec: ``load_spec(path)`` -> :class:`LoadedSpec`, or a SpecError listing every problem."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable

from gridml.errors import SpecError
from gridml.spec import checks
from gridml.spec.loader import read_yaml, validate_model
from gridml.specmodel.model import Spec, StoredSpec, parse_walltime, stored_spec

__all__ = ["LoadedSpec", "Spec", "StoredSpec", "load_spec", "json_schema", "parse_walltime", "stored_spec"]


# Spec fields added after the first release, with their defaults: the campaign hash leaves them
# out while they hold the default (see LoadedSpec.hash). Add every new field here.
ADDED_SINCE_0_1: dict[tuple[str, str], Any] = {
    ("payload", "framework"): "keras", ("payload", "files"): None,
    ("search", "warm_start"): [], ("search", "initial_points"): [], ("resources", "nodes"): 1,
    ("search", "objectives"): [], ("search", "constraints"): [],
    ("training", "stop_on_nan"): False,
    ("data", "weights"): None, ("data", "inputs"): None,
    ("data", "test"): None, ("data", "max_open_files"): None,
    ("training", "class_weights"): None, ("training", "discriminant"): None,
    ("backend", "max_same_failures"): 3,  # (the backend section is left out of the hash anyway)
    ("slurm", "pack"): None, ("slurm", "pack_walltime"): None, ("slurm", "array"): False,
    ("slurm", "array_throttle"): None,
    ("slurm", "signal_grace"): 120, ("backend", "max_continuations"): 10,
}


@dataclass
class LoadedSpec:
    spec: Spec
    path: Path
    model_path: Path

    def resolved(self) -> dict[str, Any]:
        """The spec as stored with the study and in provenance: defaults filled, paths absolute."""
        data = self.spec.model_dump(mode="json")
        data["payload"]["model"] = str(self.model_path)
        data["output"]["dataset"] = self.output_dataset
        return data

    @property
    def output_dataset(self) -> str:
        if self.spec.output.dataset:
            return self.spec.output.dataset
        scope = self.spec.data.dids("train")[0].split(":", 1)[0]
        return f"{scope}:{self.spec.name}.out"

    @property
    def hash(self) -> str:
        """Identity of the campaign: what changes results (not backend choices or parallelism).

        Stable across gridml versions: a field added since (at its default) is left out, so a
        study submitted before an upgrade is still recognised by `gridml resume` and a rerun."""
        data = self.resolved()
        data["payload"].pop("model")  # its content counts (below), not where it lies
        data["payload"].pop("python", None)  # which interpreter runs it, not what it runs
        for volatile in ("backend", "panda", "slurm"):
            data.pop(volatile, None)
        data["search"].pop("parallel", None)
        data["search"].pop("max_trials", None)
        for (section, key), default in ADDED_SINCE_0_1.items():
            if data.get(section, {}).get(key, default) == default:
                data.get(section, {}).pop(key, None)
        data["training"]["options"] = self.spec.training.options_given()
        data["model_source"] = hashlib.sha256(self.model_path.read_bytes()).hexdigest()
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def load_spec(path: str | Path, *, did_exists: Callable[[str], bool] | None = None) -> LoadedSpec:
    """Read, validate and check a spec. ``did_exists`` (a data backend's ``exists``) checks DIDs."""
    path = Path(path)
    data, lines = read_yaml(path)
    spec = validate_model(Spec, data, path, lines)
    model_path = checks.resolve_model_path(spec, path)
    problems = (checks.check_model_file(model_path, spec.payload.framework) + checks.check_objective(spec)
                + checks.check_early_stopping(spec) + checks.check_search(spec))
    if did_exists is not None:  # on the submit host (validate, submit): its data and launcher
        problems += checks.check_dids(spec, did_exists) + checks.check_launcher(spec)
    if problems:
        raise SpecError(checks.format_problems(path, lines, problems))
    return LoadedSpec(spec=spec, path=path.resolve(), model_path=model_path)


def json_schema() -> dict[str, Any]:
    schema = Spec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gridml training spec"
    return schema
