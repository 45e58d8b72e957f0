"""The study's own search logic, as the server uses it: /ask, should-stop, enqueue validation.

``gridml.search`` (the Searcher engineer's package) is imported lazily: the server starts, and
every other route works, without it.
"""

from __future__ import annotations

import math
from typing import Any

from gridml.errors import GridmlError, SearchError, SpecError
from gridml.store import Study
from gridml.store.sql import SqlStore


def search_section(study: Study) -> dict[str, Any]:
    search = study.spec.get("search")
    if not isinstance(search, dict) or not isinstance(search.get("space"), dict):
        raise SearchError(f"study '{study.name}' has no search.space in its spec",
                          hint="create the study from a spec with a `search:` section")
    return search


def ask(store: SqlStore, study: Study, n: int) -> tuple[list[dict], bool]:
    """``n`` points from the study's searcher, rebuilt from the stored observations."""
    from gridml.search import study as engine  # lazy: the searchers import skopt

    cfg = search_section(study)
    try:
        return engine.propose(cfg, store.list_trials(study.id), n)
    except GridmlError:
        raise
    except Exception as exc:  # a searcher bug or a space it cannot handle: say so, not 500
        raise SearchError(f"the searcher of study '{study.name}' failed: {exc!r}",
                          hint="check search.algorithm and search.space of the spec") from exc


def should_stop(store: SqlStore, study: Study, trial_id: int) -> tuple[bool, str]:
    """The early-stopping rule of the study applied to the stored curves."""
    cfg = study.spec.get("search") or {}
    rule, metric = cfg.get("early_stopping"), cfg.get("objective")
    if not rule or not metric:
        return False, "no early_stopping rule in the spec"
    try:
        from gridml.search.stopping import decide
    except ImportError:
        return False, "early stopping is not available on this server"
    curves = {tid: [r.metrics.get(metric, math.nan) for r in reps]
              for tid, reps in store.study_epochs(study.id).items()}
    mine = curves.pop(trial_id, [])
    return decide(rule, mine, list(curves.values()), cfg.get("direction", "minimize"),
                  metric=metric)


def validate_hparams(study: Study, hparams: dict[str, Any]) -> None:
    """Refuse a point outside the study's space: names, types, ranges, choices."""
    space = search_section(study)["space"]
    problems = [f"hparams.{k}: not in search.space (known: {sorted(space)})"
                for k in hparams if k not in space]
    for name, dim in space.items():
        if name not in hparams:
            if not (isinstance(dim, dict) and ("conditional" in dim or "condition" in dim)):
                problems.append(f"hparams.{name}: missing")
            continue
        problem = _check_dim(name, dim, hparams[name])
        if problem:
            problems.append(problem)
    if problems:
        raise SpecError(problems, hint="send a point inside the study's search.space")


def _check_dim(name: str, dim: Any, value: Any) -> str | None:
    kind = dim.get("type") if isinstance(dim, dict) else None
    if kind == "categorical":
        choices = dim.get("choices", [])
        return None if value in choices else f"hparams.{name}: {value!r} not in {choices}"
    if kind in ("real", "int"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"hparams.{name}: {value!r} is not a number"
        if kind == "int" and not float(value).is_integer():
            return f"hparams.{name}: {value!r} is not an integer"
        low, high = dim.get("low"), dim.get("high")
        if low is not None and high is not None and not low <= value <= high:
            return f"hparams.{name}: {value!r} outside [{low}, {high}]"
        return None
    return None  # an unknown dimension type: the spec validator's business, not ours
