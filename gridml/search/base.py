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
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

Point = dict[str, Any]


class Searcher(Protocol):
    def tell(self, points: Sequence[Point], values: Sequence[float | None]) -> None: ...
    def ask(self, n: int, pending: Sequence[Point] = ()) -> list[Point]: ...
    # may return fewer than n (grid exhausted: then exhausted is True)
    @property
    def exhausted(self) -> bool: ...
