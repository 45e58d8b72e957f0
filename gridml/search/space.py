"""The search space: parsing and checking the spec's ``search.space``, and three views of a point.

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

from gridml.errors import SpecError
from gridml.search.params import Param, parse_param

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
        problems: list[str] = []
        if not isinstance(spec, Mapping) or not spec:
            raise SpecError("search.space: must be a non-empty mapping of parameter name -> "
                            "{type: real|int|categorical, ...}")
        parsed = {str(k): parse_param(str(k), v, problems) for k, v in spec.items()}
        params = {k: p for k, p in parsed.items() if p is not None}
        problems += _check_conditions(params, set(parsed))
        if problems:
            raise SpecError(problems)
        self.params: list[Param] = _topological(params)
        self.names = list(params)  # the spec's order, used for the points handed out
        self._by_name = {p.name: p for p in self.params}

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
                from gridml.errors import SearchError
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
        from gridml.search.grid import enumerate_points
        return len(enumerate_points(self, points_per_dim=None))


def _check_conditions(params: Mapping[str, Param], names: set[str]) -> list[str]:
    problems = []
    for p in params.values():
        for parent, allowed in (p.condition or {}).items():
            where = f"search.space.{p.name}.conditional.{parent}"
            if parent in names and parent not in params:
                continue  # the parent itself is wrong: reported already
            if parent not in params:
                problems.append(f"{where}: names unknown parameter {parent!r}; use one of "
                                f"{sorted(params)}")
            elif parent == p.name:
                problems.append(f"{where}: a parameter cannot depend on itself")
            else:
                problems += [f"{where}: {msg}" for msg in params[parent].check_allowed(allowed)]
    return problems


def _topological(params: Mapping[str, Param]) -> list[Param]:
    order: list[Param] = []
    placed: set[str] = set()
    todo = list(params.values())
    while todo:
        ready = [p for p in todo if set(p.condition or {}) <= placed]
        if not ready:
            cycle = ", ".join(sorted(p.name for p in todo))
            raise SpecError(f"search.space: conditions form a cycle among {cycle}; "
                            "make one of them unconditional")
        order += ready
        placed |= {p.name for p in ready}
        todo = [p for p in todo if p.name not in placed]
    return order
