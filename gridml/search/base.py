"""The Searcher seam: ``ask(n)`` points, ``tell(points, values)``.

Stable public API (also used by the server's /ask route and external users)::

    s = gridml.search.create("bayes", space, seed=1, direction="minimize")
    s.tell(points, values)        # all finished observations (values: the objective, NaN = failed)
    batch = s.ask(4, pending=running_points)   # never proposes a pending or told point again

``space`` is the spec's ``search.space`` mapping, e.g.
``{"lr": {"type": "real", "low": 1e-4, "high": 0.1, "log": True},
   "units": {"type": "int", "low": 8, "high": 128},
   "act": {"type": "categorical", "choices": ["relu", "tanh"]}}``.
Searchers keep no state the controller needs: it rebuilds one from the stored observations every
cycle, so a searcher must give *different* proposals when rebuilt with more observations or
pending points (seed its randomness from (seed, number of observations + pending)).
Values are the raw objective; searchers flip the sign themselves for ``direction="maximize"`` and
skip NaN/None (failed trials must not poison the model).

Several objectives (``search.objectives``): ``create(..., directions=["maximize", "minimize"])``;
``tell`` then takes one vector per point (None when failed). Constraints (``search.constraints``):
``create(..., constraints=k)`` and ``tell(points, values, violations)`` with per point a list of
``k`` violations (0 met, > 0 missed, None not reported). Only the algorithms whose
:meth:`BaseSearcher.supports` says so take them; the others refuse at construction (so at
``gridml validate``).

:class:`BaseSearcher` does that bookkeeping once; a backend implements ``_propose``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from gridml.errors import SearchError
from gridml.search.space import Space

Point = dict[str, Any]


class Searcher(Protocol):
    def tell(self, points: Sequence[Point], values: Sequence[float | None]) -> None: ...
    def ask(self, n: int, pending: Sequence[Point] = ()) -> list[Point]: ...
    # may return fewer than n (grid exhausted: then exhausted is True)
    @property
    def exhausted(self) -> bool: ...


class BaseSearcher(ABC):
    """Stores observations, checks arguments, and keeps proposals new; subclasses propose."""

    name: ClassVar[str] = "base"
    defaults: ClassVar[Mapping[str, Any]] = {}  # the options this algorithm takes

    @classmethod
    def supports(cls, options: Mapping[str, Any]) -> tuple[bool, bool]:
        """(several objectives, constraints) this algorithm takes, given the options."""
        return False, False

    def __init__(self, space: Any, *, seed: int = 0, direction: str = "minimize",
                 directions: Sequence[str] | None = None, constraints: int = 0,
                 **options: Any) -> None:
        directions = list(directions or [direction])
        for d in directions:
            if d not in ("minimize", "maximize"):
                raise SearchError(f"direction {d!r} is not known", hint="use minimize or maximize")
        multi, constrained = self.supports({**self.defaults, **options})
        if len(directions) > 1 and not multi:
            raise SearchError(f"search.objectives: algorithm {self.name!r}"
                              f"{self._sampler(options)} optimises a single objective",
                              hint="use algorithm optuna (sampler tpe or nsgaii) or random, or "
                              "one objective/direction")
        if constraints and not constrained:
            raise SearchError(f"search.constraints: algorithm {self.name!r}"
                              f"{self._sampler(options)} cannot take constraints",
                              hint="use algorithm optuna (sampler tpe or nsgaii) or random, or "
                              "remove search.constraints")
        self.directions = directions
        self.n_constraints = int(constraints)
        direction = directions[0]
        unknown = sorted(set(options) - self.accepted(options))
        if unknown:
            raise SearchError(f"search.options: {unknown} not understood by {self.name!r}",
                              hint=f"it takes {sorted(self.accepted(options)) or 'no options'}")
        self.space = space if isinstance(space, Space) else Space(space)
        self.seed = int(seed)
        self.direction = direction
        self.options = {**self.defaults, **options}
        self.told: list[Point] = []
        self.values: list[float | None] = []  # the first objective
        self.vectors: list[list[float] | None] = []  # all objectives (None: failed)
        self.violations: list[list[float] | None] = []  # per point (None: no constraints)
        self._exhausted = False
        self.exhausted_reason = ""  # says why, once exhausted

    @classmethod
    def accepted(cls, options: Mapping[str, Any]) -> set[str]:
        """The option names this algorithm takes (given the options, e.g. a chosen sampler)."""
        return set(cls.defaults)

    @property
    def exhausted(self) -> bool:
        """True once no new point is left to propose (grid done, small discrete space used up)."""
        return self._exhausted

    def _set_exhausted(self, done: bool, total: int) -> None:
        self._exhausted = done
        self.exhausted_reason = (f"{self.name}: all {total} points of the space are told or "
                                 "pending" if done else "")

    @staticmethod
    def _sampler(options: Mapping[str, Any]) -> str:
        return f" (sampler {options['sampler']})" if "sampler" in options else ""

    def tell(self, points: Sequence[Point], values: Sequence[Any],
             violations: Sequence[Sequence[float | None] | None] | None = None) -> None:
        """Add finished observations (raw objective, or a vector of them with several
        objectives; None or NaN for failed trials) and, with constraints, their violations."""
        if len(points) != len(values):
            raise SearchError(f"tell: {len(points)} points but {len(values)} values",
                              hint="give one value (None for a failed trial) per point")
        self.space.check(points, "tell: point")  # names, types, ranges, choices, conditions
        k = len(self.directions)
        vectors = [_as_vector(v, k) for v in values]
        self.told += [dict(p) for p in points]
        self.vectors += vectors
        self.values += [None if v is None else v[0] for v in vectors]
        given = list(violations) if violations is not None else [None] * len(points)
        if len(given) != len(points):
            raise SearchError(f"tell: {len(points)} points but {len(given)} violations",
                              hint="give one list of violations (or None) per point")
        self.violations += [None if v is None else [_violation(x) for x in v] for v in given]

    def ask(self, n: int, pending: Sequence[Point] = ()) -> list[Point]:
        """Up to ``n`` new points, none equal to a told or pending one."""
        if n <= 0:
            return []
        pending = [dict(p) for p in pending]
        seen = set(self.space.keys(self.space.columns(self.told + pending)))
        points = self._propose(int(n), pending, seen)
        return points[:n]

    @abstractmethod
    def _propose(self, n: int, pending: list[Point], seen: set[tuple]) -> list[Point]:
        """Each algorithm's own proposals: up to ``n`` points not in ``seen``."""

    # ---- helpers for subclasses -----------------------------------------------------------
    def rng(self, pending: Sequence[Point], salt: int = 0) -> np.random.Generator:
        """Randomness derived from (seed, observations + pending): a rebuilt searcher differs."""
        count = len(self.told) + len(pending)
        return np.random.default_rng([self.seed % 2**63, count, salt])

    def observations(self) -> tuple[list[Point], np.ndarray]:
        """Finite observations, as values to *minimise* (the sign flipped for maximize)."""
        keep = [i for i, v in enumerate(self.values) if v is not None]
        y = np.array([self.values[i] for i in keep], dtype=float)
        return [self.told[i] for i in keep], (-y if self.direction == "maximize" else y)

    def novel(self, candidates: list[Point], seen: set[tuple], n: int) -> list[Point]:
        """The first ``n`` candidates not in ``seen`` (which is updated) nor repeated."""
        out = []
        for point, key in zip(candidates, self.space.keys(self.space.columns(candidates))):
            if key not in seen:
                seen.add(key)
                out.append(point)
                if len(out) == n:
                    break
        return out


def _as_vector(v: Any, k: int) -> list[float] | None:
    """A told value as a vector of ``k`` finite objectives, or None (failed / not usable)."""
    if k == 1 and not isinstance(v, (list, tuple)):
        one = _as_value(v)
        return None if one is None else [one]
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or len(v) != k:
        raise SearchError(f"tell: objective value {v!r} is not a list of {k} numbers",
                          hint=f"give {k} values (one per objective), or None for a failed trial")
    out = [_as_value(x) for x in v]
    return None if any(x is None for x in out) else [float(x) for x in out if x is not None]


def _violation(x: Any) -> float:
    """A constraint's violation; not reported (None, NaN) counts as violated."""
    f = _as_value(x)
    return 1e12 if f is None else f


def _as_value(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError) as exc:
        raise SearchError(f"tell: objective value {v!r} is not a number",
                          hint="give a float, or None for a failed trial") from exc
    return f if math.isfinite(f) else None
