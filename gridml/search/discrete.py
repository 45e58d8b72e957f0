"""Every combination of discrete levels of a space: the grid searcher's points, and the rest of a
small all-discrete space (``Space.size``, random search running out). Depends on parameters only,
so ``space.py`` and ``grid.py`` both import it without a cycle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gridml.errors import SearchError
from gridml.search.params import Param

MAX_GRID = 1_000_000
Point = dict[str, Any]


def enumerate_points(params: Sequence[Param], points_per_dim: int | Mapping[str, int] | None) -> list[Point]:
    """Every combination, in order (``points_per_dim`` None: every int, only for the discrete).

    ``params`` in an order where a condition's parent comes first (``Space.params``)."""
    levels = {p.name: _levels(p, _per(points_per_dim, p.name)) for p in params}
    out: list[Point] = [{}]
    for p in params:
        nxt = []
        for partial in out:
            if _active(p, partial):
                nxt += [{**partial, p.name: v} for v in levels[p.name]]
            else:
                nxt.append(partial)
        if len(nxt) > MAX_GRID:
            raise SearchError(f"the grid has more than {MAX_GRID:,} points",
                              hint="lower search.options.grid_points or use random/bayes")
        out = nxt
    return out


def _per(points: int | Mapping[str, int] | None, name: str) -> int | None:
    if isinstance(points, Mapping):
        points = points.get(name, 5)
    if points is None:
        return None
    if isinstance(points, bool) or not isinstance(points, int) or points < 1:
        raise SearchError(f"search.options.grid_points: {points!r} is not a positive whole number",
                          hint="e.g. grid_points: 5, or {learning_rate: 4, dropout: 3}")
    return points


def _levels(p: Param, k: int | None) -> list[Any]:
    if p.type == "categorical":
        return list(p.choices)
    if p.type == "int" and (k is None or p.high - p.low + 1 <= k):
        return list(range(int(p.low), int(p.high) + 1))
    if k is None:
        raise SearchError(f"parameter {p.name!r} is real: it has no finite set of values")
    space = np.geomspace if p.log else np.linspace
    vals = space(p.low, p.high, k) if k > 1 else np.array([space(p.low, p.high, 3)[1]])
    if p.type == "int":
        return sorted({round(float(v)) for v in vals})
    return [float(v) for v in vals]


def _active(p: Param, partial: Point) -> bool:
    for parent, allowed in (p.condition or {}).items():
        wanted = allowed if isinstance(allowed, (list, tuple)) else [allowed]
        if parent not in partial or partial[parent] not in wanted:
            return False
    return True
