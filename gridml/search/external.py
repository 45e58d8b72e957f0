"""``external``: the searcher of a campaign driven by an external optimizer over the API.

It proposes nothing and is never exhausted: the controller runs the points an external process
enqueues (``POST /api/v1/studies/{study}/trials``), in order, until ``max_trials`` have finished
or the process closes the study (``POST /api/v1/studies/{study}/close``). ``search.space`` may
be given (the enqueued points are then checked against it) or left out (any point is taken).
See examples/external_skopt.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gridml.search.base import BaseSearcher, Point


class ExternalSearcher(BaseSearcher):
    name = "external"

    def __init__(self, space: Any, *, seed: int = 0, direction: str = "minimize",
                 **options: Any) -> None:
        if space:  # checked as any space is (initial_points are run first, as with any searcher)
            super().__init__(space, seed=seed, direction=direction, **options)
            return
        # no space: the external optimizer owns it; a placeholder dimension gets the base
        # class's argument checks and bookkeeping (nothing is ever proposed from it)
        super().__init__({"unused": {"type": "categorical", "choices": [0]}}, seed=seed,
                         direction=direction, **options)

    @classmethod
    def accepted(cls, options: Mapping[str, Any]) -> set[str]:
        return set()

    def tell(self, points: Sequence[Point], values: Sequence[Any],
             violations: Sequence[Sequence[float | None] | None] | None = None) -> None:
        """Nothing to learn: the external optimizer keeps its own model."""

    def ask(self, n: int, pending: Sequence[Point] = ()) -> list[Point]:
        return []

    def _propose(self, n: int, pending: list[Point], seen: set[tuple]) -> list[Point]:
        return []  # (not reached: ask is overridden)
