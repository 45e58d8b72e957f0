"""Grid search: the product of the dimensions, proposed in a fixed order until exhausted.

Each real dimension gets ``grid_points`` values (default 5; evenly spaced, or geometrically where
``log``); an int dimension gets at most ``grid_points`` distinct whole numbers the same way (all of
them when the range is that small); a categorical dimension gets all its choices. ``grid_points``
is one number or a mapping ``{parameter: number}``. Conditional parameters appear only in the
combinations where their condition holds. When every grid point is told or pending, ``ask``
returns fewer points than asked and ``exhausted`` is True.
"""

from __future__ import annotations

from typing import Any, ClassVar

from gridml.search.base import BaseSearcher, Point
from gridml.search.discrete import enumerate_points


class GridSearcher(BaseSearcher):
    name = "grid"
    defaults: ClassVar[dict[str, Any]] = {"grid_points": 5}

    def _propose(self, n: int, pending: list[Point], seen: set[tuple]) -> list[Point]:
        grid = enumerate_points(self.space.params, points_per_dim=self.options["grid_points"])
        out = self.novel(grid, seen, n)
        self._set_exhausted(len(out) < n, len(grid))
        return out
