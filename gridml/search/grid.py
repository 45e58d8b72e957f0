"""Grid search: the product of the dimensions, proposed in a fixed order until exhausted.

Each real dimension gets ``grid_points`` values (default 5; evenly spaced, or geometrically where
``log``); an int dimension gets at most ``grid_points`` distinct whole numbers the same way (all of
them when the range is that small); a categorical dimension gets all its choices. ``grid_points``
is one number or a mapping ``{parameter: number}``. Conditional parameters appear only in the
combinations where their condition holds. When every grid point is told or pending, ``ask``
returns fewer points than asked and ``exhausted`` is True.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from gridml.errors import SearchError
from gridml.search.base import BaseSearcher, Point
from gridml.search.params import Param

MAX_GRID = 1_000_000


class GridSearcher(BaseSearcher):
    name = "grid"
    defaults: ClassVar[dict[str, Any]] = {"grid_points": 5}

    def _propose(self, n: int, pending: list[Point], seen: set[tuple]) -> list[Point]:
        grid = enumerate_points(self.space, points_per_dim=self.options["grid_points"])
        out = self.novel(grid, seen, n)
        self._set_exhausted(len(out) < n, len(grid))
        return out


def enumerate_points(space: Any, points_per_dim: int | Mapping[str, int] | None) -> list[Point]:
    """Every combination, in order (``points_per_dim`` None: every int, only for the discrete)."""
    levels = {p.name: _levels(p, _per(points_per_dim, p.name)) for p in space.params}
    out: list[Point] = [{}]
    for p in space.params:
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
