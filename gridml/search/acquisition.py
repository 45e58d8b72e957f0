"""One batch of Bayesian proposals: the kernel fitted once, constant liar, bounded search.

Each point of a batch maximises its acquisition over a bounded candidate set: a pool of
``candidates`` uniform draws and draws around the best observations, drawn afresh for every point
up to ``LOCAL_ABOVE`` (500) rows (issue 22: one pool per batch there cost Hartmann6's median best
after 50 evaluations -3.32 -> -3.199, as the batch's later points only reshuffled the first one's
candidates), and above that drawn once per batch with its posterior mean and variance following
every added point by rank-k updates (``Posterior.track``: what keeps ask(8) at 1,000
observations under 1 s); then four shrinking rounds of perturbations around the 8 best pool
members, and L-BFGS-B over the real-valued features from the two best (central differences, one
vectorised posterior call per step). Above ``LOCAL_ABOVE`` rows the rounds and the polish run on
the posterior of the ``LOCAL`` (200) observations nearest to each start (a small Cholesky factor
instead of the whole one), and their results are scored exactly. The chosen point is then added
to the posterior with the liar's value (the best observation, ``liar: min``; the Cholesky factor
extended, not refactorised) so the next point of the batch goes elsewhere; pending trials are
added the same way before the first point.

The acquisition is the lower confidence bound ``mu - kappa * sd`` with ``kappa`` stepping through
``kappas`` (default 0, 1, 2, 3) by the study position of the point: every batch holds an
exploiting point (the minimum of the posterior mean) and increasingly exploring ones, and a
sequential study cycles through them. ``acquisition: ei`` uses expected improvement instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gridml.search.base import Point
from gridml.search.features import Encoder
from gridml.search.gp import Posterior, expected_improvement, fit_kernel
from gridml.search.space import Space

RADII = (0.1, 0.03, 0.01, 0.003)  # local rounds, in feature units
STARTS = 8  # best candidates refined locally
PER_START = 32  # perturbations per start and round
TOP_OBSERVED = 5  # observations whose neighbourhoods are sampled
POLISH = 2  # best local results polished by L-BFGS-B over the real-valued features
POLISH_ITERATIONS = 30
LOCAL = 200  # rows of the local posteriors that refine and polish ...
LOCAL_ABOVE = 500  # ... once the posterior has more rows than this (below, exact is cheaper)
LIARS: dict[str, Callable[[np.ndarray], Any]] = {"min": np.min, "mean": np.mean, "max": np.max}

Score = Callable[[np.ndarray], np.ndarray]


class Batch:
    def __init__(self, space: Space, points: list[Point], y: np.ndarray,
                 rng: np.random.Generator, options: Mapping[str, Any]) -> None:
        self.space, self.enc, self.rng = space, Encoder(space), rng
        self.candidates, self.xi = int(options["candidates"]), float(options["xi"])
        feats = self.enc.encode(space.columns(points))
        centre = float(np.quantile(y, float(options["prior_quantile"])))
        fitted = fit_kernel(feats, y, int(rng.integers(2**31)), int(options["restarts"]), centre,
                            int(options["fit_max"]))
        self.post = Posterior(fitted, feats, y, (centre, float(np.std(y)) or 1.0))
        self.best = float(np.min(y))
        self.lie = float(LIARS[options["liar"]](y))
        self.anchors = feats[np.argsort(y)[:TOP_OBSERVED]]
        self.real_cols = [self.enc.blocks[p.name].start for p in space.params if p.type == "real"]
        self.score: Score = self._ei
        self.kappa: float | None = None
        self.pool_ready = False

    def pretend(self, points: list[Point]) -> None:
        """Condition on ``points`` as if they had returned the liar's value."""
        if points:
            feats = self.enc.encode(self.space.columns(points))
            self.post = self.post.add(feats, np.full(len(points), self.lie))

    def propose(self, seen: set[tuple], kappa: float | None) -> Point | None:
        """The new point of best acquisition (None when no candidate is new), then pretend it.

        ``kappa``: lower confidence bound with this weight on the deviation; None: EI.
        """
        self.kappa = kappa
        self.score = self._ei if kappa is None else self._lcb(kappa)
        if len(self.post.y) > LOCAL_ABOVE:  # one pool per batch, tracked through the lies
            if not self.pool_ready:
                self.post.track(self._pool())
                self.pool_ready = True
            assert self.post.pool is not None
            pool, pool_score = self.post.pool.feats, self._acquire(*self.post.predict_pool())
        else:  # a fresh pool per point: the batch's later points explore other candidates
            pool = self._pool()
            pool_score = self.score(pool)
        feats, score = self._search(pool, pool_score)
        for i in np.argsort(-score):
            cols = self.enc.snap(feats[i : i + 1])
            key = self.space.keys(cols)[0]
            if key not in seen:
                seen.add(key)
                self.post = self.post.add(feats[i : i + 1], np.array([self.lie]))
                return self.space.points(cols)[0]
        return None

    def _pool(self) -> np.ndarray:
        """Candidates: ``candidates`` uniform draws and 64 around each of the best observations."""
        return np.vstack([self._random(), self._around(self.anchors, 0.1, 64)])

    def _search(self, pool: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(-score)[:STARTS]
        starts, start_score = pool[order], score[order]
        local = len(self.post.y) > LOCAL_ABOVE
        if local:  # refine on the posteriors of the nearest observations
            locals_ = [self._local(x) for x in starts]
            start_score = np.concatenate([self._scorer(p)(x[None]) for p, x in zip(locals_, starts)])
        found, found_score = [pool], [score]
        for r in RADII:
            trial = self._around(starts, r, PER_START)
            if local:
                per = trial.reshape(len(starts), PER_START, -1)
                t_score = np.vstack([self._scorer(p)(rows) for p, rows in zip(locals_, per)])
            else:
                t_score = self.score(trial).reshape(len(starts), PER_START)
                found.append(trial)
                found_score.append(t_score.ravel())
            j = np.argmax(t_score, axis=1)
            better = t_score[np.arange(len(starts)), j] > start_score
            starts[better] = trial.reshape(len(starts), PER_START, -1)[better, j[better]]
            start_score = np.maximum(start_score, t_score.max(axis=1))
        polished = np.array([self._polish(x) for x in starts[np.argsort(-start_score)[:POLISH]]])
        if local:  # the refined points, scored exactly
            polished = np.vstack([starts, polished])
        found.append(polished)
        found_score.append(self.score(polished))
        return np.vstack(found), np.concatenate(found_score)

    def _scorer(self, post: Posterior) -> Score:
        """The current acquisition on another posterior (a local one)."""
        sd = self.kappa is None or self.kappa > 0

        def score(rows: np.ndarray) -> np.ndarray:
            return self._acquire(*post.predict(rows, sd=sd))
        return score

    def _polish(self, x: np.ndarray) -> np.ndarray:
        """L-BFGS-B on the real-valued features of ``x`` (central differences, one call each)."""
        cols = [j for j in self.real_cols if x[j] >= 0.0]
        if not cols:
            return x
        k, h = len(cols), 1e-5
        steps = np.vstack([np.zeros(k), h * np.eye(k), -h * np.eye(k)])
        local_score = self._scorer(self._local(x))
        scale = abs(float(local_score(x[None])[0])) or 1e-12

        def f(v: np.ndarray) -> tuple[float, np.ndarray]:
            rows = np.repeat(x[None], 2 * k + 1, axis=0)
            rows[:, cols] = v + steps
            s = local_score(rows) / scale
            return -float(s[0]), -(s[1 : k + 1] - s[k + 1 :]) / (2 * h)

        from scipy.optimize import minimize  # imported by the kernel's fit already

        res = minimize(f, x[cols], jac=True, method="L-BFGS-B", bounds=[(0.0, 1.0)] * k,
                       options={"maxiter": POLISH_ITERATIONS})
        out = x.copy()
        out[cols] = np.clip(res.x, 0.0, 1.0)
        return out

    def _local(self, x: np.ndarray) -> Posterior:
        """The posterior of the ``LOCAL`` observations nearest to ``x`` (in kernel distance; lies
        included) when there are more: polishing on it reads a small Cholesky factor at every
        step instead of the whole one; the polished points are then scored exactly."""
        post = self.post
        if len(post.y) <= LOCAL_ABOVE:
            return post
        d2 = (((post.feats - x) * post.inv_scale) ** 2).sum(axis=1)
        near = np.sort(np.argpartition(d2, LOCAL)[:LOCAL])
        return Posterior(post.fitted, post.feats[near], post.y[near], (post.mean, post.std))

    def _random(self) -> np.ndarray:
        return self.enc.unit_to_features(self.rng.random((self.candidates, self.space.dims)))

    def _around(self, centres: np.ndarray, radius: float, per: int) -> np.ndarray:
        noise = self.rng.normal(0.0, radius, (len(centres), per, centres.shape[1]))
        raw = (centres[:, None, :] + noise).reshape(-1, centres.shape[1])
        return self.enc.encode(self.enc.snap(raw))

    def _acquire(self, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
        """The acquisition (larger is better) of posterior means and deviations."""
        if self.kappa is None:
            return expected_improvement(mu, sd, self.best, self.xi)
        return -(mu - self.kappa * sd)

    def _lcb(self, kappa: float) -> Score:
        def score(feats: np.ndarray) -> np.ndarray:
            return self._acquire(*self.post.predict(feats, sd=kappa > 0))
        return score

    def _ei(self, feats: np.ndarray) -> np.ndarray:
        return self._acquire(*self.post.predict(feats))
