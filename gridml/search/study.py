"""A study's searcher, rebuilt from its stored trials: the one path the controller and the
server's /ask route share (no optimizer state is ever kept between cycles).

The ``search`` section is read typed (:class:`gridml.specmodel.Search`); the JSON form a caller may
still hand in is read as the store reads a stored spec (:func:`gridml.store.spec.stored_search`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gridml.errors import NotFoundError, SearchError
from gridml.search import create
from gridml.search.base import Point
from gridml.search.validate import point_problems
from gridml.store import ACTIVE_STATES, StoreReader, Trial
from gridml.store import objective_of as objective_of  # re-export: the one rule is the store's
from gridml.store.best import SearchLike, values_of
from gridml.store.spec import Search, search_of, stored_search


log = logging.getLogger(__name__)


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


def vectors(trials: Iterable[Trial], k: int) -> tuple[list[Any], list[Any]]:
    """Of the finished trials (as :func:`observations` orders them): the objective vectors
    (None when failed or not all usable) and the constraint violations (None: none stored)."""
    values: list[Any] = []
    violations: list[Any] = []
    for trial in trials:
        if trial.state in ("completed", "pruned", "failed"):
            vals = values_of(trial)[:k]
            ok = trial.state != "failed" and len(vals) == k and all(
                v is not None and math.isfinite(v) for v in vals)
            values.append([float(v) for v in vals] if ok else None)  # type: ignore[arg-type]
            violations.append(trial.violations)
    return values, violations


def searcher_for(search: SearchLike) -> Any:
    """The searcher a spec's ``search`` section describes."""
    search = stored_search(search)
    directions = [d for _, d in search.goals()]
    return create(search.algorithm, search.space_dict(), seed=search.seed,
                  direction=directions[0], **({"directions": directions} if len(directions) > 1
                                              else {}),
                  **({"constraints": len(search.constraints)} if search.constraints else {}),
                  **search.options)


@dataclass
class WarmStart:
    """Finished trials of earlier studies told to a new study's searcher."""

    points: list[Point] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)  # floats, or vectors (several objectives)
    violations: list[Any] = field(default_factory=list)
    used: dict[str, int] = field(default_factory=dict)  # study -> trials told
    skipped: dict[str, int] = field(default_factory=dict)  # study -> points outside the space


def warm_start(search: SearchLike, store: StoreReader | None) -> WarmStart:
    """The finished trials of the studies named in ``search.warm_start`` whose points lie in this
    study's space (the others are skipped and counted). They must optimise the same objective in
    the same direction."""
    out = WarmStart()
    search = stored_search(search)
    names = search.warm_start
    if not names:
        return out
    if store is None:
        raise SearchError("search.warm_start: no metrics store to read earlier studies from",
                          hint="run the campaign through gridml submit or gridml serve")
    space = search.space_dict()
    for name in names:
        try:
            other = store.get_study(name)
        except NotFoundError:
            raise SearchError(f"search.warm_start: study {name!r} not found",
                              hint="name a study that `gridml status` lists") from None
        mine, yours = search.goals(), search_of(other).goals()
        if yours != mine:
            raise SearchError(f"search.warm_start: study {name!r} optimises {_said(yours)}, "
                              f"this one {_said(mine)}",
                              hint="warm-start only from studies with the same objective")
        trials = store.list_trials(other.id)
        points, values, _ = observations(trials)
        if len(mine) > 1:
            values = vectors(trials, len(mine))[0]
        violations = _violations(trials, search)
        keep = [i for i, p in enumerate(points) if not point_problems(space, p)]
        out.points += [points[i] for i in keep]
        out.values += [values[i] for i in keep]
        out.violations += [violations[i] for i in keep]
        out.used[name], out.skipped[name] = len(keep), len(points) - len(keep)
    return out


def initial_points(search: SearchLike, searcher: Any, known: list[Point],
                   n: int) -> list[Point]:
    """Up to ``n`` of ``search.initial_points`` not yet told or pending, in the spec's order."""
    given = [dict(p) for p in stored_search(search).initial_points]
    if not given or n <= 0:
        return []
    searcher.space.check(given, "search.initial_points")  # the one validator
    seen = set(searcher.space.keys(searcher.space.columns(known))) if known else set()
    return searcher.novel(given, seen, n)


def propose(search: SearchLike, trials: list[Trial], n: int,
            store: StoreReader | None = None) -> tuple[list[Point], bool]:
    """``n`` new points for a study with these trials; True when the searcher is exhausted.

    ``search.initial_points`` come first; finished trials of the ``search.warm_start`` studies
    (read from ``store``) are told to the searcher along with the study's own."""
    search = stored_search(search)
    searcher = searcher_for(search)
    points, values, pending = observations(trials)
    k = len(search.goals())
    if k > 1:
        values = vectors(trials, k)[0]
    warm = warm_start(search, store)
    if warm.skipped and any(warm.skipped.values()):
        log.info("search.warm_start: %s", ", ".join(
            f"{k}: {warm.used[k]} told, {v} outside the space skipped"
            for k, v in warm.skipped.items()))
    told, told_values = warm.points + points, warm.values + values
    if told:
        searcher.tell(told, told_values, warm.violations + _violations(trials, search)
                      if search.constraints else None)
    first = initial_points(search, searcher, told + pending, n)
    proposed = first + searcher.ask(n - len(first), pending=pending + first)
    return proposed, bool(getattr(searcher, "exhausted", False))


def _violations(trials: list[Trial], search: Search) -> list[Any]:
    """Per finished trial its violations of this study's constraints (None without them; a
    trial stored without violations, e.g. of an earlier study, counts as meeting them)."""
    n = len(search.parsed_constraints())
    raw = vectors(trials, 1)[1]
    return [None if not n else (list(v)[:n] if v else [0.0] * n) for v in raw]


def _said(objectives: list[tuple[str, str]]) -> str:
    return ", ".join(f"{m} ({d})" for m, d in objectives)
