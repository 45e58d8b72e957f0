"""Random search: independent uniform (log-uniform where ``log``) draws, seeded.

Draws come from a generator seeded by (seed, observations + pending), so the rebuilt searcher of
the next cycle proposes new points; draws equal to a told or pending point are skipped. In a small
all-discrete space the remaining points are enumerated once draws stop finding new ones, and the
searcher reports ``exhausted`` when none is left.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from gridml.search.base import BaseSearcher, Point
from gridml.search.discrete import enumerate_points


class RandomSearcher(BaseSearcher):
    name = "random"
    defaults: ClassVar[dict[str, Any]] = {}

    @classmethod
    def supports(cls, options: Mapping[str, Any]) -> tuple[bool, bool]:
        return True, True  # draws ignore the values: infeasible trials are just never best

    def _propose(self, n: int, pending: list[Point], seen: set[tuple]) -> list[Point]:
        rng = self.rng(pending)
        return draw_novel(self, rng, n, seen)


def draw_novel(searcher: BaseSearcher, rng: np.random.Generator, n: int,
               seen: set[tuple]) -> list[Point]:
    """``n`` new uniform points (fewer, and ``exhausted`` set, when a finite space runs out)."""
    space = searcher.space
    out: list[Point] = []
    for _ in range(20):
        u = rng.random((max(4 * (n - len(out)), 16), space.dims))
        out += searcher.novel(space.points(space.from_unit(u)), seen, n - len(out))
        if len(out) == n:
            return out
    return out + _rest_of_finite(searcher, rng, n - len(out), seen)


def _rest_of_finite(searcher: BaseSearcher, rng: np.random.Generator, n: int,
                    seen: set[tuple]) -> list[Point]:
    if searcher.space.size() is None:
        return []  # a huge space where 20 rounds of draws found nothing new: give up quietly
    left = enumerate_points(searcher.space.params, points_per_dim=None)
    order = rng.permutation(len(left))
    out = searcher.novel([left[i] for i in order], seen, n)
    searcher._set_exhausted(len(out) < n, len(left))
    return out
