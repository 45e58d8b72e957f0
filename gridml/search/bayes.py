"""``algorithm: bayes``, gridml's fast default: scikit-optimize's GP model, one kernel fit per batch.

The model is the one skopt's ``Optimizer(base_estimator="GP")`` builds (``cook_estimator("GP")``:
a constant times a Matern 5/2 kernel with one length scale per feature, learned Gaussian noise,
normalised targets, skopt's bounds; reals and ints scaled to [0, 1], categoricals one-hot), on
scikit-learn's kernels (``gp.py``; nothing is imported from skopt). What differs from
``Optimizer.ask(n_points)``, which refits the kernel and reruns the acquisition search once per
point of a batch (``algorithm: skopt`` does exactly that), is the use:

1. the first ``n_initial_points`` positions of a study (default: the GP's input width, one per
   real or int parameter and one per categorical choice, + 2, within [5, 10]) are a scrambled
   Sobol design (seeded);
2. then the kernel hyperparameters are fitted **once per batch** on the finite observations (on a
   random subset of ``fit_max`` above that many), BLAS kept to one thread;
3. each point of the batch optimises its acquisition (lower confidence bound with a ``kappa``
   that steps through ``kappas`` by study position, or EI) over a bounded candidate search
   (``acquisition.py``: one candidate pool per batch whose posterior is updated by rank-k
   updates, local refinement, L-BFGS-B polish), and is then added to the posterior with a
   constant-liar value (pending trials are added the same way first), extending the Cholesky
   factor of the *fixed* kernel.

Points equal to a told, pending or already chosen one are never returned.
"""

from __future__ import annotations

from typing import Any, ClassVar

from gridml.errors import SearchError
from gridml.search.acquisition import LIARS, Batch
from gridml.search.base import BaseSearcher, Point
from gridml.search.features import Encoder
from gridml.search.gp import one_blas_thread
from gridml.search.random import draw_novel


class BayesSearcher(BaseSearcher):
    name = "bayes"
    defaults: ClassVar[dict[str, Any]] = {"n_initial_points": None, "acquisition": "lcb",
                                "kappas": (0.0, 1.0, 2.0, 3.0), "xi": 0.01, "liar": "min",
                                "prior_quantile": 0.75, "candidates": 1000, "restarts": 2,
                                "fit_max": 100}

    def __init__(self, space: Any, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        check_options(self.options)

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
        total = self.n_initial
        if count >= total:
            return []
        from scipy.stats import qmc  # ~1 s of CPU to import: not before the first ask

        sobol = qmc.Sobol(self.space.dims, scramble=True, seed=self.seed % 2**32)
        u = sobol.random(1 << max(total - 1, 1).bit_length())[count:total]
        return self.novel(self.space.points(self.space.from_unit(u)), seen, n)

    @property
    def n_initial(self) -> int:
        """``n_initial_points``; by default the GP's input width + 2, within [5, 10]."""
        given = self.options["n_initial_points"]
        return int(given) if given is not None else min(10, max(5, Encoder(self.space).width + 2))

    def _kappa(self, position: int) -> float | None:
        if self.options["acquisition"] == "ei":
            return None
        kappas = self.options["kappas"]
        return float(kappas[position % len(kappas)])

    def _batch(self, k: int, pending: list[Point], seen: set[tuple]) -> list[Point]:
        with one_blas_thread():
            points, y = self.observations()
            batch = Batch(self.space, points, y, self.rng(pending, salt=1), self.options)
            batch.pretend(pending)
            out: list[Point] = []
            start = len(self.told) + len(pending)
            for i in range(k):
                point = batch.propose(seen, self._kappa(start + i))
                if point is None:
                    break
                out.append(point)
        if len(out) < k:  # a small discrete space nearly used up
            out += draw_novel(self, self.rng(pending, salt=3), k - len(out), seen)
        return out


def check_options(options: dict[str, Any]) -> None:
    """Refuse option values the Bayesian searcher cannot use, naming the fix."""
    problems = []
    if options["liar"] not in LIARS:
        problems.append(f"liar: {options['liar']!r} is not known; use one of {sorted(LIARS)}")
    if options["acquisition"] not in ("lcb", "ei"):
        problems.append(f"acquisition: {options['acquisition']!r} is not known; use lcb or ei")
    kappas = options["kappas"]
    if not isinstance(kappas, (list, tuple)) or not kappas or not all(
            isinstance(k, (int, float)) and k >= 0 for k in kappas):
        problems.append(f"kappas: {kappas!r} must be a non-empty list of numbers >= 0")
    if not 0.0 <= float(options["prior_quantile"]) <= 1.0:
        problems.append("prior_quantile: must be between 0 and 1")
    if options["n_initial_points"] is None:
        options = {**options, "n_initial_points": 0}
    for key in ("n_initial_points", "candidates", "restarts", "fit_max"):
        if isinstance(options[key], bool) or not isinstance(options[key], int) or options[key] < 0:
            problems.append(f"{key}: must be a whole number >= 0 (got {options[key]!r})")
    if problems:
        raise SearchError("search.options: " + "; ".join(problems))
