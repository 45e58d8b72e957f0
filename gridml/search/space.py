"""The search space (checked by ``validate.py``, the one validator) and three views of a point.

* **points** are what users and the controller see: ``{"lr": 0.01, "units": 64, "act": "relu"}``,
  plain Python values, inactive conditional parameters left out;
* **columns** (:class:`Columns`) hold many points at once as numpy arrays, one per parameter
  (categoricals as choice indices) plus an ``active`` mask per parameter;
* the **unit cube** gives every parameter one coordinate in [0, 1): random, grid and evolution
  sample there (:meth:`Space.from_unit`, :meth:`Space.to_unit`).

The Gaussian-process encoding (one-hot categoricals, normalised numbers) is in ``features.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gridml.errors import SearchError, SpecError
from gridml.search.discrete import enumerate_points
from gridml.search.params import Param, make_param
from gridml.search.validate import clean, first_point_problem, order, space_problems

Point = dict[str, Any]


@dataclass
class Columns:
    """Many points, one array per parameter (``values``) and where it exists (``active``)."""

    values: dict[str, np.ndarray]
    active: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(next(iter(self.values.values()))) if self.values else 0


class Space:
    """A checked search space; parameters ordered so that a condition's parent comes first."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        problems = space_problems(spec)
        if problems:
            raise SpecError([str(p) for p in problems])
        self.spec: dict[str, dict[str, Any]] = {str(k): clean(v) for k, v in spec.items()}
        self.params: list[Param] = [make_param(k, self.spec[k]) for k in order(self.spec)[0]]
        self.names = list(self.spec)  # the spec's order, used for the points handed out
        self._by_name = {p.name: p for p in self.params}

    def check(self, points: Sequence[Point], where: str = "point") -> None:
        """Refuse points outside the space (one line: the first problem and its fix)."""
        problem = first_point_problem(self.spec, points, where)
        if problem:
            raise SearchError(problem)

    @property
    def dims(self) -> int:
        return len(self.params)

    # ---- unit cube -------------------------------------------------------------------------
    def from_unit(self, u: np.ndarray) -> Columns:
        """Map rows of ``u`` (m x dims, in [0, 1]) to columns, conditions applied."""
        u = np.clip(np.atleast_2d(np.asarray(u, dtype=float)), 0.0, 1.0)
        values = {p.name: p.from_unit(u[:, i]) for i, p in enumerate(self.params)}
        return Columns(values, self.activity(values))

    def to_unit(self, points: Sequence[Point]) -> np.ndarray:
        """The unit-cube coordinates of ``points`` (inactive parameters at 0.5)."""
        cols = self.columns(points)
        out = np.full((len(points), self.dims), 0.5)
        for i, p in enumerate(self.params):
            act = cols.active[p.name]
            out[act, i] = p.to_unit(cols.values[p.name][act])
        return out

    # ---- points <-> columns ------------------------------------------------------------------
    def activity(self, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Which rows each parameter exists in (a child exists only where its parents do)."""
        m = len(next(iter(values.values())))
        active: dict[str, np.ndarray] = {}
        for p in self.params:
            mask = np.ones(m, dtype=bool)
            for parent, allowed in (p.condition or {}).items():
                mask &= active[parent] & self.by_name(parent).matches(values[parent], allowed)
            active[p.name] = mask
        return active

    def columns(self, points: Sequence[Point]) -> Columns:
        """Columns of user points; values of inactive parameters are ignored."""
        values: dict[str, np.ndarray] = {}
        for p in self.params:
            values[p.name] = p.column([pt.get(p.name) for pt in points])
        active = self.activity(values)
        for p in self.params:
            missing = [i for i, pt in enumerate(points) if active[p.name][i] and p.name not in pt]
            if missing:
                raise SearchError(f"point {dict(points[missing[0]])} has no value for "
                                  f"{p.name!r}", hint="give every active parameter of the space")
        return Columns(values, active)

    def points(self, cols: Columns) -> list[Point]:
        """Plain-Python points (JSON-serialisable), inactive parameters left out."""
        out: list[Point] = [{} for _ in range(len(cols))]
        for name in self.names:
            p, vals, act = self.by_name(name), cols.values[name], cols.active[name]
            for i in np.flatnonzero(act):
                out[i][name] = p.plain(vals[i])
        return out

    def key(self, point: Point) -> tuple:
        """A hashable identity of a point: equal keys mean the same trial configuration."""
        cols = self.columns([point])
        return self.keys(cols)[0]

    def keys(self, cols: Columns) -> list[tuple]:
        per = [[p.key_of(v) if a else None for v, a in zip(cols.values[p.name], cols.active[p.name])]
               for p in self.params]
        return list(zip(*per)) if per else []

    def by_name(self, name: str) -> Param:
        return self._by_name[name]

    def size(self, limit: int = 1_000_000) -> int | None:
        """The number of distinct points when every parameter is discrete (None: infinite or big)."""
        if any(p.type == "real" for p in self.params):
            return None
        if math.prod(p.cardinality() for p in self.params) > limit:
            return None
        return len(enumerate_points(self.params, points_per_dim=None))
