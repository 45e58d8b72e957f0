"""The build check of ``gridml validate`` and ``gridml submit``: the model built on this machine,
on one batch of the data's real shapes, before anything is submitted.

It runs the payload's own probe (``python -m payloads.probe trial.json``: payloads/probe.py) in
the payload's interpreter (``payload.python``, gridml/payload_env.py) in a subprocess with a
timeout, so this process never imports TensorFlow or torch and a model that hangs cannot block
``validate``. The trial file is the one a trial of the campaign gets (:func:`gridml.planner.
trial_document`), at the centre of the search space, reading the first file of ``data.train``
where the data backend has it on this machine. What it finds (a missing import, a wrong return
type, an unknown metric name, a shape mismatch) is one ``spec:line: field: problem; fix`` line.
Where the framework is not importable, or the data is not here, the check is skipped, saying why.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gridml import planner
from gridml.data.base import DataManager
from gridml.errors import GridmlError
from gridml.spec import LoadedSpec
from gridml.store.records import Study, Trial

TIMEOUT_S = 300.0  # TensorFlow's import alone takes tens of seconds on a busy login node
SWITCH = "GRIDML_BUILD_CHECK"  # 0: skip the check (validate and submit)


@dataclass(frozen=True)
class Verdict:
    """``problem`` (a field, a one-line message), ``skipped`` (why), or ``ok`` (what ran)."""

    ok: str | None = None
    problem: tuple[str, str] | None = None
    skipped: str | None = None
    seconds: float = 0.0


def centre(space: dict[str, Any]) -> dict[str, Any]:
    """A point of the search space: the middle of each range (geometric for a log range), the
    first choice of each categorical; a conditional dimension only where its condition holds."""
    point: dict[str, Any] = {}
    plain = {k: d for k, d in space.items() if not d.conditional}
    for name, d in list(plain.items()) + [(k, d) for k, d in space.items() if d.conditional]:
        if d.conditional and any(point.get(k) != v for k, v in d.conditional.items()):
            continue
        if d.type == "categorical":
            point[name] = (d.choices or [None])[0]
            continue
        low, high = float(d.low if d.low is not None else 0), float(d.high if d.high is not None else 1)
        mid = math.sqrt(low * high) if d.log and low > 0 else (low + high) / 2
        point[name] = int(round(mid)) if d.type == "int" else mid
    return point


def _first_local_file(dm: DataManager, dids: list[str]) -> Path | None:
    for did in dids[:1]:
        for f in dm.resolve(did)[:1]:
            if f.path is not None and Path(f.path).is_file():
                return Path(f.path)
    return None


def trial_file(loaded: LoadedSpec, train: Path, folder: Path) -> Path:
    """The trial document trial 0 of the campaign would get, reading ``train`` only."""
    spec = loaded.spec
    hparams = spec.search.initial_points[0] if spec.search.initial_points else \
        centre(spec.search.space)
    study = Study(id=0, name=spec.name, spec={}, spec_hash="")
    trial = Trial(id=0, study_id=0, number=0, hparams=dict(hparams))
    doc = planner.trial_document(loaded, study, trial, train=[str(train)], validation=[],
                                 inputs=[], output_dir=str(folder / "outputs"), api=None)
    path = folder / "trial.json"
    path.write_text(doc.dumps())
    return path


def _payloads_root() -> str:
    import payloads

    return str(Path(payloads.__file__).resolve().parent.parent)


def build_check(loaded: LoadedSpec, dm: DataManager | None, *,
                timeout_s: float = TIMEOUT_S) -> Verdict:
    """Build the campaign's model as a trial would (see the module docstring)."""
    from gridml.payload_env import payload_python

    if os.environ.get(SWITCH, "1").strip().lower() in ("0", "no", "off", "false"):
        return Verdict(skipped=f"${SWITCH} is {os.environ[SWITCH]}")
    spec = loaded.spec
    python = payload_python(spec.payload.python)
    if not Path(python).exists():
        return Verdict(skipped=f"the payload's interpreter {python} does not exist here")
    if dm is None:
        return Verdict(skipped="no data backend to read the data's shapes from")
    try:
        train = _first_local_file(dm, spec.data.dids("train"))
    except GridmlError as exc:
        return Verdict(skipped=f"the training data cannot be read here: {exc.message}")
    except Exception as exc:  # a data backend's own error: the check is no reason to stop
        return Verdict(skipped=f"the training data cannot be listed here: {exc}")
    if train is None:
        return Verdict(skipped=f"{spec.data.dids('train')[0]} has no copy on this machine "
                               f"({dm.where})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (_payloads_root(), os.environ.get("PYTHONPATH", "")) if p),
        "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}  # one batch: no GPU needed
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gridml-build-check-") as tmp:
        path = trial_file(loaded, train, Path(tmp))
        try:
            proc = subprocess.run([python, "-m", "payloads.probe", str(path)], cwd=tmp, env=env,
                                  capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            return Verdict(skipped=f"building the model took over {timeout_s:.0f} s (a model "
                                   "that hangs, or a very slow machine): not checked",
                           seconds=time.monotonic() - t0)
        except OSError as exc:
            return Verdict(skipped=f"{python} cannot be run: {exc}")
    seconds = time.monotonic() - t0
    verdict = _last_json(proc.stdout)
    if verdict is None:
        last = next((ln for ln in reversed(proc.stderr.splitlines()) if ln.strip()), "")
        return Verdict(skipped=f"the payload's probe ended with code {proc.returncode} and no "
                               f"verdict: {last[:300]}", seconds=seconds)
    if "problem" in verdict:
        field = str(verdict.get("field") or "payload.model")
        message = str(verdict["problem"]).removeprefix(f"{field}:").strip()  # located names it
        return Verdict(problem=(field, fix_hint(message, python)), seconds=seconds)
    if "skipped" in verdict:
        return Verdict(skipped=str(verdict["skipped"]), seconds=seconds)
    return Verdict(ok=str(verdict.get("ok", "")), seconds=seconds)


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def fix_hint(problem: str, python: str) -> str:
    """The payload's words, with the fix where they lack one (a package missing here)."""
    if "No module named" in problem and "failed to import" in problem:
        return (f"{problem}; install it in the payload's environment ({python}, and the nodes' "
                "or the grid container's), or remove the import")
    return problem
