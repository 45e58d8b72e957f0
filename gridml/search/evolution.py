"""Evolution: CMA-ES (the ``cma`` package) on the unit cube of the space.

Why ``cma`` rather than nevergrad: it is one small, dependency-free package whose ask/tell works
with *any* told solutions (so the strategy can be replayed from stored observations), its
bound handling keeps samples inside [0, 1], and CMA-ES is the standard evolutionary baseline for
hyperparameter search; nevergrad would bring pandas and many optimisers gridml does not use.

Why this path and not Optuna's ``CmaEsSampler`` (``optuna`` ``sampler: cmaes``, removed in
issue 25, which asked for one CMA-ES path): ``cma`` is an installed dependency of gridml while the
sampler needs the separate ``cmaes`` package, which is not (the option only ever said so); the
sampler does not take categorical parameters into CMA-ES (it samples them independently, i.e.
at random) and no conditional ones, where this path maps every parameter to a cell of the unit
cube; and its state would be rebuilt from an Optuna study every call anyway, as this replay does,
at the cost of building that study from every observation.

The controller keeps no optimizer state, so the strategy is rebuilt every cycle by replaying the
finite observations in the order they were told, in generations of ``popsize``: ask (advances
the strategy as it would have), then tell that generation's observed points and values. Leftover
observations and pending trials belong to the generation in flight; its new members are sampled
from the current distribution with numpy's global generator seeded by (seed, observations +
pending) and restored afterwards. Every parameter is one coordinate of the unit cube (the same
mapping as random search: log scales, int cells, one cell per categorical choice); a sample maps
to a point, ints and categoricals by their cell, inactive conditional parameters dropped.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any, ClassVar

import cma
import numpy as np

from gridml.search.base import BaseSearcher, Point
from gridml.search.random import draw_novel


class EvolutionSearcher(BaseSearcher):
    name = "evolution"
    defaults: ClassVar[dict[str, Any]] = {"popsize": None, "sigma0": 0.3}

    def _propose(self, n: int, pending: list[Point], seen: set[tuple]) -> list[Point]:
        count = len(self.told) + len(pending)
        out: list[Point] = []
        with _global_numpy_seed([self.seed % 2**32, 0]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            es = self._replay()
            np.random.seed([self.seed % 2**32, count + 1])
            for _ in range(10):
                u = np.array(es.ask(number=max(2 * (n - len(out)), 4)))
                out += self.novel(self.space.points(self.space.from_unit(u)), seen, n - len(out))
                if len(out) == n:
                    return out
        return out + draw_novel(self, self.rng(pending), n - len(out), seen)

    def _replay(self) -> Any:
        """The strategy after every complete generation of the finite observations."""
        opts = {"seed": self.seed % 2**32 + 1, "bounds": [0.0, 1.0], "verbose": -9}
        if self.options["popsize"]:
            opts["popsize"] = int(self.options["popsize"])
        es = cma.CMAEvolutionStrategy([0.5] * self.space.dims, float(self.options["sigma0"]), opts)
        points, y = self.observations()
        u = self.space.to_unit(points) if points else np.zeros((0, self.space.dims))
        lam = es.popsize
        for g in range(len(points) // lam):
            es.ask()
            es.tell(list(u[g * lam:(g + 1) * lam]), [float(v) for v in y[g * lam:(g + 1) * lam]])
        return es


@contextlib.contextmanager
def _global_numpy_seed(seed: list[int]) -> Iterator[None]:
    """cma draws from numpy's global generator: seed it, and give the caller's state back."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)
