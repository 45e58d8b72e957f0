"""The one rule for objectives and the best trial, used by every reader of a study.

- A trial's objective is the objective metric of its last epoch with a finite value.
- The best trial is the completed trial with the lowest (``minimize``) or highest
  (``maximize``) objective; a None or non-finite (NaN, inf) objective is never best; ties go to
  the lower trial number. An infeasible trial (a ``search.constraints`` entry not met) is never
  best.
- Several objectives (``search.objectives``): a trial keeps all its values (``objectives``; the
  first is ``objective``); the Pareto front is the completed, feasible trials with every value
  usable that no other such trial dominates (:func:`pareto_front`).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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
    return pick_best(((t.objective, t.number, t) for t in trials
                      if t.state == "completed" and feasible(t)),
                     direction_of(study))


# ---- several objectives, constraints, the Pareto front ---------------------------------------
OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|<|>)\s*"
                         r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


@dataclass(frozen=True)
class Constraint:
    """``<metric> <op> <number>``: a trial is feasible when its metric (last epoch's finite
    value, the objective rule) satisfies it."""

    metric: str
    op: str
    bound: float

    def violation(self, value: Any) -> float | None:
        """0.0 when satisfied, else by how much it is missed (> 0); None: metric not reported."""
        if not usable(value):
            return None
        if OPS[self.op](float(value), self.bound):
            return 0.0
        return max(abs(float(value) - self.bound), 1e-12)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


def parse_constraint(text: Any) -> Constraint:
    """``"inference_ms <= 2"`` -> Constraint; ValueError (with the fix) when malformed."""
    m = _CONSTRAINT.match(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"{text!r} is not a constraint; write '<metric> <op> <number>' with op "
                         "one of <=, <, >=, > (e.g. 'inference_ms <= 2')")
    return Constraint(m[1], m[2], float(m[3]))


def objectives_spec(search: dict[str, Any]) -> list[tuple[str, str]]:
    """[(metric, direction)] of a ``search`` section (JSON form): ``objectives`` when given,
    else the single ``objective``/``direction``."""
    many = search.get("objectives") or []
    if many:
        return [(str(o["metric"]), o.get("direction") if o.get("direction") in DIRECTIONS
                 else "minimize") for o in many]
    direction = search.get("direction", "minimize")
    return [(str(search.get("objective", "val_loss")),
             direction if direction in DIRECTIONS else "minimize")]


def constraints_of(search: dict[str, Any]) -> list[Constraint]:
    return [parse_constraint(c) for c in search.get("constraints") or []]


def scores_of(epochs: list[EpochReport], search: dict[str, Any]) -> dict[str, Any]:
    """A finished trial's ``objective``, ``objectives`` and ``violations`` (the update_trial
    fields) from its epochs: each metric by the objective rule. ``objectives`` and
    ``violations`` are None for a single-objective study without constraints."""
    values = [objective_of(epochs, metric) for metric, _ in objectives_spec(search)]
    constraints = constraints_of(search)
    return {"objective": values[0],
            "objectives": values if len(values) > 1 else None,
            "violations": [c.violation(objective_of(epochs, c.metric)) for c in constraints]
            if constraints else None}


def feasible(trial: Trial) -> bool:
    """Every constraint met (a constraint whose metric was not reported is not met)."""
    return all(v is not None and v <= 0 for v in trial.violations or [])


def values_of(trial: Trial) -> list[float | None]:
    """All objective values of a trial (the first is ``trial.objective``)."""
    return list(trial.objectives) if trial.objectives else [trial.objective]


def pareto_front(study: Study, trials: Iterable[Trial]) -> list[Trial]:
    """The completed, feasible trials with all objectives usable that no other such trial
    dominates (at least as good in every objective, better in one; directions respected), by
    trial number. Equal vectors are all on the front."""
    signs = [-1.0 if d == "maximize" else 1.0 for _, d in objectives_spec(study.spec.get("search") or {})]
    cands: list[tuple[tuple[float, ...], Trial]] = []
    for t in trials:
        vals = values_of(t)
        if (t.state == "completed" and feasible(t) and len(vals) >= len(signs)
                and all(usable(v) for v in vals[:len(signs)])):
            cands.append((tuple(s * float(v) for s, v in zip(signs, vals)), t))  # type: ignore[arg-type]
    cands.sort(key=lambda c: c[0])  # a dominating vector sorts before the ones it dominates
    front: list[tuple[tuple[float, ...], Trial]] = []
    for vec, t in cands:
        if not any(_dominates(f, vec) for f, _ in front):
            front.append((vec, t))
    return sorted((t for _, t in front), key=lambda t: t.number)


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))
