"""Bayesian optimisation with a Gaussian process, fast for batches.

scikit-optimize's ``Optimizer.ask(n_points)`` refits the GP's kernel hyperparameters and reruns
the whole acquisition search once per point of a batch. Here one batch costs one fit:

1. the first ``n_initial_points`` positions of a study are a scrambled Sobol design (seeded);
2. then the kernel (skopt's Matern 5/2 GP, see ``gp.py``) is fitted once on the finite
   observations, BLAS kept to one thread (small matrices on a shared machine);
3. each point of the batch maximises expected improvement over a bounded candidate set (random
   draws, draws around the best observations, a few shrinking local rounds around the best
   candidates; ``acquisition.py``), and is then added to the posterior with a constant-liar value
   (pending trials are added the same way first), re-conditioning the *fixed* kernel.

Points equal to a told, pending or already chosen one are never returned.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gridml.search.base import BaseSearcher, Point
from gridml.search.random import draw_novel

LIARS = {"min": np.min, "mean": np.mean, "max": np.max}


class BayesSearcher(BaseSearcher):
    name = "bayes"
    defaults: dict[str, Any] = {"n_initial_points": 10, "xi": 0.01, "liar": "min",
                                "candidates": 1000, "restarts": 2}

    def __init__(self, space: Any, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        from gridml.errors import SearchError

        if self.options["liar"] not in LIARS:
            raise SearchError(f"search.options.liar: {self.options['liar']!r} is not known",
                              hint=f"use one of {sorted(LIARS)}")

    def _propose(self, n: int, pending: list[Point], seen: set[tuple]) -> list[Point]:
        out = self._initial(n, len(self.told) + len(pending), seen)
        _, y = self.observations()
        if len(out) < n and len(y) < 2:
            out += draw_novel(self, self.rng(pending, salt=2), n - len(out), seen)
        elif len(out) < n:
            out += self._batch(n - len(out), pending + out, seen)
        return out

    def _initial(self, n: int, count: int, seen: set[tuple]) -> list[Point]:
        """Sobol design points for the study positions ``count`` .. ``n_initial_points - 1``."""
        total = int(self.options["n_initial_points"])
        if count >= total:
            return []
        from scipy.stats import qmc

        sobol = qmc.Sobol(self.space.dims, scramble=True, seed=self.seed % 2**32)
        u = sobol.random(1 << max(total - 1, 1).bit_length())[count:total]
        return self.novel(self.space.points(self.space.from_unit(u)), seen, n)

    def _batch(self, k: int, pending: list[Point], seen: set[tuple]) -> list[Point]:
        from threadpoolctl import threadpool_limits

        from gridml.search.acquisition import Batch

        with threadpool_limits(limits=1, user_api="blas"):
            points, y = self.observations()
            batch = Batch(self.space, points, y, self.rng(pending, salt=1), self.options)
            batch.pretend(pending)
            out: list[Point] = []
            for _ in range(k):
                point = batch.propose(seen)
                if point is None:
                    break
                out.append(point)
        if len(out) < k:  # a small discrete space nearly used up
            out += draw_novel(self, self.rng(pending, salt=3), k - len(out), seen)
        return out
