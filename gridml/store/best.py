"""The one rule for objectives and the best trial, used by every reader of a study.

- A trial's objective is the objective metric of its last epoch with a finite value.
- The best trial is the completed trial with the lowest (``minimize``) or highest
  (``maximize``) objective; a None or non-finite (NaN, inf) objective is never best; ties go to
  the lower trial number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, TypeVar

from gridml.store.records import EpochReport, Study, Trial

T = TypeVar("T")
DIRECTIONS = ("minimize", "maximize")


def usable(value: Any) -> bool:
    """Whether ``value`` can be an objective: a finite number."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def objective_of(epochs: list[EpochReport], metric: str) -> float | None:
    """A trial's objective: the objective metric of its last epoch with a finite value."""
    for report in reversed(epochs):
        value = report.metrics.get(metric)
        if usable(value):
            return float(value)  # type: ignore[arg-type]
    return None


def direction_of(study: Study) -> str:
    direction = (study.spec.get("search") or {}).get("direction", "minimize")
    return direction if direction in DIRECTIONS else "minimize"


def pick_best(candidates: Iterable[tuple[Any, int, T]], direction: str) -> T | None:
    """The item of the best ``(objective, number, item)``: see the module's rule."""
    sign = -1.0 if direction == "maximize" else 1.0
    best: tuple[float, int, T] | None = None
    for objective, number, item in candidates:
        if usable(objective) and (best is None or (sign * objective, number) < best[:2]):
            best = (sign * float(objective), number, item)
    return None if best is None else best[2]


def best_trial(study: Study, trials: Iterable[Trial]) -> Trial | None:
    """The best completed trial of ``trials`` (None: none completed with a usable objective)."""
    return pick_best(((t.objective, t.number, t) for t in trials if t.state == "completed"),
                     direction_of(study))
