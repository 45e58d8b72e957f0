"""The one rule for objectives and the best trial, used by every reader of a study.

- A trial's objective is the objective metric of its last epoch (the last one that reports
  that metric). When that value is not finite (NaN, inf) the trial has no objective: it
  *diverged* (:func:`diverged`; the controller gives it the trial state ``diverged``), and an
  earlier finite epoch does not stand in for it (its model is the diverged one).
- The best trial is the completed trial with the lowest (``minimize``) or highest
  (``maximize``) objective; a None or non-finite (NaN, inf) objective is never best; ties go to
  the lower trial number. An infeasible trial (a ``search.constraints`` entry not met) is never
  best.
- Several objectives (``search.objectives``): a trial keeps all its values (``objectives``; the
  first is ``objective``); the Pareto front is the completed, feasible trials with every value
  usable that no other such trial dominates (:func:`pareto_front`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from gridml.specmodel import Search
from gridml.specmodel.constraint import OPS as OPS  # re-exported: the one constraint rule
from gridml.specmodel.constraint import Constraint as Constraint
from gridml.specmodel.constraint import parse_constraint as parse_constraint
from gridml.specmodel.constraint import usable as usable
from gridml.store.records import EpochReport, Study, Trial
from gridml.store.spec import search_of, stored_search

T = TypeVar("T")


def last_value(epochs: list[EpochReport], metric: str) -> float | None:
    """The value of ``metric`` in the last epoch that reports it (NaN/inf as they are)."""
    for report in sorted(epochs, key=lambda r: r.epoch, reverse=True):
        if metric in report.metrics:
            value = report.metrics[metric]
            return float(value) if isinstance(value, (int, float)) else float("nan")
    return None


def objective_of(epochs: list[EpochReport], metric: str) -> float | None:
    """A trial's objective: the objective metric of its last epoch (None when no epoch reports
    it, or when that last value is not finite: the trial diverged)."""
    value = last_value(epochs, metric)
    return value if usable(value) else None


def diverged(epochs: list[EpochReport], search: SearchLike) -> bool:
    """An objective (``search.objectives``) whose last reported value is not finite."""
    for metric, _ in stored_search(search).goals():
        value = last_value(epochs, metric)
        if value is not None and not usable(value):
            return True
    return False


def direction_of(study: Study) -> str:
    return search_of(study).direction


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
# A ``search`` argument is the typed section (gridml.specmodel.Search: its ``goals()`` are the
# objectives, its ``parsed_constraints()`` the constraints) or its JSON form, read as a stored one.
SearchLike = Search | Mapping[str, Any]


def scores_of(epochs: list[EpochReport], search: SearchLike) -> dict[str, Any]:
    """A finished trial's ``objective``, ``objectives`` and ``violations`` (the update_trial
    fields) from its epochs: each metric by the objective rule. ``objectives`` and
    ``violations`` are None for a single-objective study without constraints."""
    typed = stored_search(search)
    values = [objective_of(epochs, metric) for metric, _ in typed.goals()]
    constraints = typed.parsed_constraints()
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
    signs = [-1.0 if d == "maximize" else 1.0 for _, d in search_of(study).goals()]
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
