"""A study's searcher, rebuilt from its stored trials: the one path the controller and the
server's /ask route share (no optimizer state is ever kept between cycles)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from gridml.search import create
from gridml.search.base import Point
from gridml.store import ACTIVE_STATES, Trial
from gridml.store import objective_of as objective_of  # re-export: the one rule is the store's


def observations(trials: Iterable[Trial]) -> tuple[list[Point], list[float | None], list[Point]]:
    """(told points, their values, pending points). Failed trials are told as None (never
    proposed again, never modelled); pruned trials are told the value they stopped at."""
    points: list[Point] = []
    values: list[float | None] = []
    pending: list[Point] = []
    for trial in trials:
        if trial.state in ACTIVE_STATES:
            pending.append(trial.hparams)
        elif trial.state in ("completed", "pruned", "failed"):
            points.append(trial.hparams)
            ok = trial.state != "failed" and trial.objective is not None and math.isfinite(trial.objective)
            values.append(float(trial.objective) if ok else None)  # type: ignore[arg-type]
    return points, values, pending


def searcher_for(search: dict[str, Any]) -> Any:
    """The searcher a spec's ``search`` section (JSON form) describes."""
    space = {name: {k: v for k, v in dim.items() if v is not None} for name, dim in search["space"].items()}
    return create(search.get("algorithm", "bayes"), space, seed=int(search.get("seed") or 0),
                  direction=search.get("direction", "minimize"), **(search.get("options") or {}))


def propose(search: dict[str, Any], trials: list[Trial], n: int) -> tuple[list[Point], bool]:
    """``n`` new points for a study with these trials; True when the searcher is exhausted."""
    searcher = searcher_for(search)
    points, values, pending = observations(trials)
    if points:
        searcher.tell(points, values)
    proposed = searcher.ask(n, pending=pending)
    return proposed, bool(getattr(searcher, "exhausted", False))
