"""GET /api/v1/studies/{study}/roc: the ROC curves of the best completed trials, for the
dashboard's overlay (background rejection vs signal efficiency, log y).

Each curve is the trial's stored ``roc.json`` (its validation figures, written by the payload:
payloads/runtime/figures.py), read once from the study's data store (the local store or Rucio,
``backend.data``) and kept in memory: a completed trial's outputs do not change. A trial whose
``roc.json`` cannot be read (a regression trial has none, a grid trial's outputs may be packed)
is listed under ``missing`` with why.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query

from gridml.server.deps import Store, Who, can_read_study
from gridml.server.errors import documented
from gridml.server.routes.studies import StudyRef
from gridml.server.schemas import RocOut
from gridml.store import Study, Trial
from gridml.store.best import direction_of, feasible, usable
from gridml.store.spec import spec_of

router = APIRouter(prefix="/api/v1/studies", tags=["studies"])
log = logging.getLogger("gridml.server")
MAX_POINTS = 400  # per curve sent (roc.json keeps up to 2000)
_CACHE: dict[tuple[int, str], dict[str, Any]] = {}  # (trial id, roc.json DID) -> curve
_LOCK = threading.Lock()


def best_completed(study: Study, trials: list[Trial], n: int) -> list[Trial]:
    """The ``n`` best completed, feasible trials by the (first) objective, best first (ties:
    the lower trial number), as gridml.store.best ranks the best one."""
    sign = -1.0 if direction_of(study) == "maximize" else 1.0
    done = [t for t in trials if t.state == "completed" and feasible(t) and usable(t.objective)]
    return sorted(done, key=lambda t: (sign * float(t.objective or 0.0), t.number))[:n]


def _thin(values: list[Any], keep: list[int]) -> list[Any]:
    return [values[i] for i in keep]


def _curve(body: dict[str, Any]) -> dict[str, Any]:
    eff_s, eff_b = body["signal_efficiency"], body["background_efficiency"]
    n = len(eff_s)
    keep = sorted({round(i * (n - 1) / (MAX_POINTS - 1)) for i in range(MAX_POINTS)}) \
        if n > MAX_POINTS else list(range(n))
    return {"signal_efficiency": _thin(eff_s, keep), "background_efficiency": _thin(eff_b, keep),
            "auc": body.get("auc"), "rejection": body.get("rejection") or {},
            "output": body.get("output")}


def _read_roc(study: Study, trial: Trial, dm_box: list[Any]) -> dict[str, Any] | str:
    """The trial's ROC curve, or why there is none."""
    out = next((o for o in trial.outputs if str(o.get("name", "")).endswith(".roc.json")), None)
    if out is None:
        return "no roc.json among its outputs"
    key = (trial.id, str(out["did"]))
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
    try:
        if not dm_box:
            from gridml.data import open_data_manager

            dm_box.append(open_data_manager(spec_of(study).backend.data))
        with tempfile.TemporaryDirectory(prefix="gridml-roc-") as tmp:
            paths = dm_box[0].download(str(out["did"]), Path(tmp))
            curve = _curve(json.loads(Path(paths[0]).read_text()))
    except Exception as exc:  # a missing or unreadable file: that trial is left out, said why
        log.warning("trial %d: roc.json %s not read: %s", trial.number, out["did"], exc)
        return f"roc.json not read: {exc}"
    with _LOCK:
        _CACHE[key] = curve
    return curve


@router.get("/{study}/roc", response_model=RocOut,
            responses=documented(400, 401, 403, 404, 422))
def study_roc(study: StudyRef, store: Store, who: Who,
              n: Annotated[int, Query(ge=1, le=20, description="how many best trials")] = 5
              ) -> dict[str, Any]:
    """The validation ROC curves (roc.json) of the ``n`` best completed trials, best first:
    ``{"trials": [{id, number, objective, auc, rejection, output, signal_efficiency,
    background_efficiency}], "missing": [{number, reason}]}``."""
    found = store.get_study(study)
    can_read_study(who, found)
    curves: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    dm_box: list[Any] = []
    for t in best_completed(found, store.list_trials(found.id), n):
        got = _read_roc(found, t, dm_box)
        if isinstance(got, str):
            missing.append({"number": t.number, "reason": got})
        else:
            curves.append({"id": t.id, "number": t.number, "objective": t.objective, **got})
    return {"trials": curves, "missing": missing}
